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
# # ProPD, Table 3: ablation of early pruning and dynamic tree generation
#
# Reads the medusa runs and the propd runs of each switch combination (neither, pruning only, dynamic only,
# both; from `method_settings`, else the run's variant) at batch 1, 2, 4, 8, 16 under `$SPECREPRO_RESULTS`
# (default `results/`); never runs a model. `make reproduce-propd-table3` produces them. Built by
# `bench.report.propd.table3` (also `python -m bench.report propd/table3`), written to
# `<results>/tables/propd_table3.{md,csv,tex}`. Optional: `$SPECREPRO_MODEL`, `$SPECREPRO_DATASET`.

# %%
import os
from pathlib import Path

from bench.report.plots import notebook_model, notebook_results, show
from bench.report.propd.table3 import build_propd_table3, claim_texts, render_propd_table3
from bench.report.tables import write_texts

RESULTS = notebook_results()
MODEL = notebook_model()
DATASET = os.environ.get("SPECREPRO_DATASET") or "mt_bench"
print(f"results: {RESULTS}")

# %%
table3 = build_propd_table3(RESULTS, model=MODEL, dataset=DATASET)
texts = render_propd_table3(table3)
for path in write_texts(Path(RESULTS, "tables"), "propd_table3", texts):
    print(path)

# %% [markdown]
# Cells: propd's aggregate tokens/s over medusa's at the same batch size, ours (paper's Vicuna-7B).

# %%
show(texts["md"])

# %% [markdown]
# The paper's hardware-independent claim (2), on ours and on the paper's 7B numbers:

# %%
for line in claim_texts(table3):
    print(line)

# %% [markdown]
# The numbers behind each cell (rates, MAT, prune rate, nodes drafted per step; NaN where missing):

# %%
show(table3.drop(columns=["propd_run_id", "medusa_run_id"]))
