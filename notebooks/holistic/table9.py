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
# # Post-use & Pre-cut, Table 9: wall-clock of one operation per component
#
# Reads the latest holistic run with both reuses and Pre-cut (lambda <= 24) on HumanEval under
# `$SPECREPRO_RESULTS` (default `results/`); never runs a model. `make reproduce-holistic-table9` produces it.
# Built by `bench.report.holistic.table9` (also `python -m bench.report holistic/table9`):
# `<results>/tables/holistic_table9.{md,csv,tex}`. Optional: `$SPECREPRO_MODEL`.

# %%
from pathlib import Path

import pandas as pd

from bench.report.holistic.table9 import holistic_table9
from bench.report.plots import notebook_model, notebook_results, show

RESULTS = notebook_results()
MODEL = notebook_model()
print(f"results: {RESULTS}")

# %%
md = holistic_table9(RESULTS, model=MODEL)
for ext in ("md", "csv", "tex"):
    print(Path(RESULTS, "tables", f"holistic_table9.{ext}"))

# %%
show(md)

# %% [markdown]
# Per component: the phase, what one operation is, how many there were, ms per operation and per verification
# step, and the share of the timed region:

# %%
show(pd.read_csv(Path(RESULTS, "tables", "holistic_table9.csv")).drop(columns=["run_id"]))
