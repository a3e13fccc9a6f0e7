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
# # Post-use & Pre-cut, Table 3: the ablation ladder x draft length
#
# Reads the holistic runs on HumanEval at every (level, lambda): sd, + reuse at the draft, + reuse at the target,
# + Pre-cut, lambda 3-24, and their AR baseline, under `$SPECREPRO_RESULTS` (default `results/`); never runs a
# model. `make reproduce-holistic-table3` produces them. Built by `bench.report.holistic.table3` (also
# `python -m bench.report holistic/table3`): `<results>/tables/holistic_table3.{md,csv,tex}`. The markdown
# decides the paper's two hardware-independent claims from the data. Optional: `$SPECREPRO_MODEL`.

# %%
from pathlib import Path

import pandas as pd

from bench.report.holistic.table3 import holistic_table3
from bench.report.plots import notebook_model, notebook_results, show

RESULTS = notebook_results()
MODEL = notebook_model()
print(f"results: {RESULTS}")

# %%
md = holistic_table3(RESULTS, model=MODEL)
for ext in ("md", "csv", "tex"):
    print(Path(RESULTS, "tables", f"holistic_table3.{ext}"))

# %%
show(md)

# %% [markdown]
# Per cell: MAT, both utilisations (Eq. 3's new tokens / draft calls; Table 5's accepted / drafted), hit rates
# at the draft and the target, and draft calls and tokens per step:

# %%
cells = pd.read_csv(Path(RESULTS, "tables", "holistic_table3.csv"))
show(cells.drop(columns=["run_id", "ar_run_id"]))
