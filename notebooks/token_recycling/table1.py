# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.16.4
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Token Recycling, Table 1: ours beside the paper's
#
# Reads the runs under `$SPECREPRO_RESULTS` (default `results/`, relative paths from the project root),
# never runs a model. `make reproduce-table1` produces the runs. The table is built by
# `bench.report.token_recycling.table1.build_token_recycling_table1` (every number recomputed from
# `records.jsonl`; also `python -m bench.report token_recycling/table1`) and written to
# `<results>/tables/token_recycling_table1.{md,csv,tex}`. Optional: `$SPECREPRO_MODEL` (SpecBench model)
# and `$SPECREPRO_MBPP_MODEL` (MBPP model, the paper's Code Llama), `$SPECREPRO_PAPER_SIZE` (7B/13B/33B).

# %%
import os
from pathlib import Path

from bench.report.plots import notebook_model, notebook_results, show
from bench.report.tables import write_texts
from bench.report.token_recycling.table1 import build_token_recycling_table1, render_token_recycling_table1

RESULTS = notebook_results()
MODEL = notebook_model()
MBPP_MODEL = os.environ.get("SPECREPRO_MBPP_MODEL") or None
PAPER_SIZE = os.environ.get("SPECREPRO_PAPER_SIZE") or None
print(f"results: {RESULTS}")

# %%
table = build_token_recycling_table1(RESULTS, model=MODEL, paper_size=PAPER_SIZE, mbpp_model=MBPP_MODEL)
texts = render_token_recycling_table1(table)
for path in write_texts(Path(RESULTS, "tables"), "token_recycling_table1", texts):
    print(path)

# %% [markdown]
# Cells read "ours (paper)"; "—" means no run or no published value.

# %%
show(texts["md"])

# %% [markdown]
# The numbers behind the table (ours and `_paper` columns, NaN where missing):

# %%
show(table.drop(columns=["specbench_run_id", "mbpp_run_id"]))
