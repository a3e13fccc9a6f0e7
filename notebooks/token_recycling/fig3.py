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
# # Token Recycling, Figure 3: tree breadth, tree depth, update strategy
#
# Reads the runs of experiments `tr_fig3a` (breadth: sizes 30..100 at depth 6, trees from our builder),
# `tr_fig3b` (depth 4..8 at 80 nodes) and `tr_fig3c` (update strategy first / parallel / last on the
# paper's tree) under `$SPECREPRO_RESULTS` (default `results/`); never runs a model. Writes
# `<results>/figures/tr_fig3.png` and the plotted points `tr_fig3.csv`. `$SPECREPRO_MODEL` picks a model
# (default: that of the most recent matching run).
#
# The paper gives no point values for Figure 3, only axis ranges and qualitative claims; the figure
# prints those under each panel and draws no paper points.

# %%
import pandas as pd

from bench.report.plots import notebook_model, notebook_results, show
from bench.report.token_recycling.fig3 import FIG3_PANELS, tr_fig3

RESULTS = notebook_results()
MODEL = notebook_model()
print(f"results: {RESULTS}")

# %%
paths = tr_fig3(RESULTS, model=MODEL)
for p in paths:
    print(p)

# %%
show(paths[0])

# %% [markdown]
# The plotted points (the latest run per x value; MAT includes the bonus token, tokens/s is the mean over
# questions):

# %%
points = pd.read_csv(paths[1])
show(points[["panel", "x_name", "x", "mat", "tokens_per_s", "tree", "tree_size", "tree_depth", "update",
             "run_id"]])

# %% [markdown]
# What the paper says for each panel (no point values are published):

# %%
for experiment, panel, _, _, paper in FIG3_PANELS:
    print(f"({panel}) {experiment}: {paper}")
