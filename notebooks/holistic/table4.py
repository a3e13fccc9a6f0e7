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
# # Post-use & Pre-cut, Table 4: MAT and utilisation, vanilla SD against the full method
#
# Reads two cells of Table 3 (sd at lambda 12, both reuses and Pre-cut at lambda <= 24) on HumanEval under
# `$SPECREPRO_RESULTS` (default `results/`); never runs a model. `make reproduce-holistic-table4` produces them.
# Built by `bench.report.holistic.table4` (also `python -m bench.report holistic/table4`):
# `<results>/tables/holistic_table4.{md,csv,tex}`, our pair under the paper's six. Optional: `$SPECREPRO_MODEL`.

# %%
from pathlib import Path

from bench.report.holistic.table4 import holistic_table4
from bench.report.plots import notebook_model, notebook_results, show

RESULTS = notebook_results()
MODEL = notebook_model()
print(f"results: {RESULTS}")

# %%
md = holistic_table4(RESULTS, model=MODEL)
for ext in ("md", "csv", "tex"):
    print(Path(RESULTS, "tables", f"holistic_table4.{ext}"))

# %% [markdown]
# Cells are "MAT / utilisation" with utilisation = accepted / drafted draft tokens (the paper's Table 5
# definition); the footer adds Eq. 3's utilisation and the speedups.

# %%
show(md)
