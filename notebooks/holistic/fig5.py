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
# # Post-use & Pre-cut, Figure 5: draft-length sensitivity with reuse only
#
# Reads the holistic runs with both reuses and no Pre-cut at every lambda on HumanEval and MT-Bench under
# `$SPECREPRO_RESULTS` (default `results/`); never runs a model. `make reproduce-holistic-fig5 LIMIT=5` produces
# them (HumanEval's are Table 3's "+ reuse at the target" row). Plotted by `bench.report.holistic.fig5` (also
# `python -m bench.report holistic/fig5`): `<results>/figures/holistic_fig5.{png,csv,md}`. The paper's figure has
# no values in its text; its claim, that the best lambda differs between tasks, is decided here from the data.
# Optional: `$SPECREPRO_MODEL`.

# %%
import pandas as pd

from bench.report.holistic.fig5 import holistic_fig5
from bench.report.plots import figures_dir, notebook_model, notebook_results, show

RESULTS = notebook_results()
MODEL = notebook_model()
print(f"results: {RESULTS}")

# %%
md = holistic_fig5(RESULTS, model=MODEL)
written = [figures_dir(RESULTS) / f"holistic_fig5.{ext}" for ext in ("png", "csv", "md")]
for path in written:
    print(path)

# %%
show(written[0])

# %%
show(md)

# %% [markdown]
# Every point with MAT, both utilisations and the hit rates:

# %%
show(pd.read_csv(written[1]).drop(columns=["run_id", "ar_run_id"]))
