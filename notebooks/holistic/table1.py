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
# # Post-use & Pre-cut, Tables 1-2: tok/s and speedup over AR per method and dataset
#
# Reads the holistic experiment's runs (AR, Lookahead, Assisted, Speculative at lambda 12, Ouroboros at lambda 12,
# ours) on HumanEval, MT-Bench and GSM8K under `$SPECREPRO_RESULTS` (default `results/`); never runs a model.
# `make reproduce-holistic-table1 LIMIT=5` produces them. Built by `bench.report.holistic.table1` (also
# `python -m bench.report holistic/table1`), written to `<results>/tables/holistic_table1.{md,csv,tex}`.
# Optional: `$SPECREPRO_MODEL`.

# %%
from pathlib import Path

import pandas as pd

from bench.report.holistic.table1 import holistic_table1
from bench.report.plots import notebook_model, notebook_results, show

RESULTS = notebook_results()
MODEL = notebook_model()
print(f"results: {RESULTS}")

# %%
md = holistic_table1(RESULTS, model=MODEL)
for ext in ("md", "csv", "tex"):
    print(Path(RESULTS, "tables", f"holistic_table1.{ext}"))

# %% [markdown]
# Cells are "ours (paper)", the paper's being its Llama-2-chat 7B&70B pair; "—" is an empty cell.

# %%
show(md)

# %% [markdown]
# Our numbers with MAT and lossless counts, and every pair the paper reports (NaN where it has no cell):

# %%
table = pd.read_csv(Path(RESULTS, "tables", "holistic_table1.csv"))
show(table.drop(columns=["run_id", "ar_run_id"]))
