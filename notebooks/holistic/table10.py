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
# # Post-use & Pre-cut, Table 10: speedup per Spec-Bench category
#
# Reads the holistic runs on spec_bench (AR, Speculative at lambda 8, Assisted, ours) under `$SPECREPRO_RESULTS`
# (default `results/`); never runs a model. `make reproduce-holistic-table10` produces them. Built by
# `bench.report.holistic.table10` (also `python -m bench.report holistic/table10`):
# `<results>/tables/holistic_table10.{md,csv,tex}`. Optional: `$SPECREPRO_MODEL`.

# %%
from pathlib import Path

import pandas as pd

from bench.report.holistic.table10 import holistic_table10
from bench.report.plots import notebook_model, notebook_results, show

RESULTS = notebook_results()
MODEL = notebook_model()
print(f"results: {RESULTS}")

# %%
md = holistic_table10(RESULTS, model=MODEL)
for ext in ("md", "csv", "tex"):
    print(Path(RESULTS, "tables", f"holistic_table10.{ext}"))

# %% [markdown]
# Cells are "ours (paper)", the paper's pair being Llama-3.1-Instruct; "—" is an empty cell.

# %%
show(md)

# %% [markdown]
# Per method and category: our speedup, the questions it is measured on, the paper's:

# %%
table = pd.read_csv(Path(RESULTS, "tables", "holistic_table10.csv"))
show(table.pivot(index="method", columns="category", values="speedup"))
