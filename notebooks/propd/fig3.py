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
# # ProPD, Figure 3: early heads, iteration time, accepted length per task
#
# (a) top-k accuracy of early heads per layer, from `<results>/propd/early_heads.json`
# (`scripts/early_heads_report.py`); (b) iteration time vs tree size per batch size with the least-squares line
# T = b0 + b1 * size, and (c) vs sequence length, from `<results>/propd/iteration_time.json`
# (`scripts/propd_iteration_time.py`); (d) MAT per MT-Bench category of medusa and propd at batch 1, from their
# runs. `$SPECREPRO_RESULTS` (default `results/`); never runs a model. `make reproduce-propd-fig3` produces all.
# Plotted by `bench.report.propd.fig3` (also `python -m bench.report propd/fig3`):
# `<results>/figures/propd_fig3.{png,csv,md,tex}` and `propd_fig3_fit.csv`. Optional: `$SPECREPRO_MODEL`.

# %%
import pandas as pd

from bench.report.plots import figures_dir, notebook_model, notebook_results, show
from bench.report.propd.fig3 import FILES, PAPER, propd_fig3

RESULTS = notebook_results()
MODEL = notebook_model()
print(f"results: {RESULTS}")

# %%
md = propd_fig3(RESULTS, model=MODEL)
written = [figures_dir(RESULTS) / name for name in FILES]
for path in written:
    print(path)

# %%
show(written[0])

# %%
show(md)

# %% [markdown]
# Panel (b)'s fit per batch size (seconds; b1 per token of tree):

# %%
show(pd.read_csv(figures_dir(RESULTS) / "propd_fig3_fit.csv"))

# %% [markdown]
# What the paper says for each panel (it publishes no point values):

# %%
for panel, text in PAPER.items():
    print(f"({panel}) {text}")
