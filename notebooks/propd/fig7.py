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
# # ProPD, Figure 7: tokens/s of AR, BPD, Medusa and ProPD per dataset and batch size
#
# Reads the ar, bpd, medusa and propd (pruning and dynamic tree on) runs on MT-Bench, ChatGPT Prompts and Alpaca
# at batch 1, 2, 4, 8, 16 under `$SPECREPRO_RESULTS` (default `results/`); never runs a model.
# `make reproduce-propd-fig7` produces them (ChatGPT Prompts needs the hub). Plotted by `bench.report.propd.fig7`
# (also `python -m bench.report propd/fig7`): `<results>/figures/propd_fig7.{png,csv,md,tex}`. The paper gives
# no point values for Figure 7. Optional: `$SPECREPRO_MODEL`.

# %%
import pandas as pd

from bench.report.plots import figures_dir, notebook_model, notebook_results, show
from bench.report.propd.fig7 import FILES, propd_fig7

RESULTS = notebook_results()
MODEL = notebook_model()
print(f"results: {RESULTS}")

# %%
md = propd_fig7(RESULTS, model=MODEL)
written = [figures_dir(RESULTS) / name for name in FILES]
for path in written:
    print(path)

# %%
show(written[0])

# %% [markdown]
# The plotted numbers ("—" where no run; the footer says why), and whether ProPD is the fastest everywhere:

# %%
show(md)

# %% [markdown]
# Every point, with the mean per-question rate and MAT beside the aggregate rate:

# %%
points = pd.read_csv(written[1])
show(points.drop(columns=["run_id"]))
