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
# # Token Recycling, Figure 4: time allocation per component
#
# Reads the latest `tr_fig4` run under `$SPECREPRO_RESULTS` (default `results/`); never runs a model.
# Our phases map to the paper's components as preprocess → Preprocess, draft → Retrieval,
# target_forward → Model Forward, verify → Verify, update → Update; prefill is folded into Model Forward
# (the paper times a whole response and has no prefill component). Writes `<results>/figures/tr_fig4.png`
# and `tr_fig4.csv` (ours beside the paper's percentages, from
# `bench/report/token_recycling/paper_tables/`).

# %%
import pandas as pd

from bench.report.plots import notebook_model, notebook_results, show
from bench.report.token_recycling.fig4 import fig4_points, tr_fig4

RESULTS = notebook_results()
MODEL = notebook_model()
print(f"results: {RESULTS}")

# %%
paths = tr_fig4(RESULTS, model=MODEL)
for p in paths:
    print(p)

# %%
show(paths[0])

# %%
show(pd.read_csv(paths[1])[["label", "our_phases", "ours_percent", "paper_percent"]])

# %% [markdown]
# The same run with prefill as its own component (not written to a file; the paper has no value for it):

# %%
separate, _ = fig4_points(RESULTS, model=MODEL, fold_prefill=False)
show(separate[["label", "our_phases", "ours_percent", "paper_percent"]])
