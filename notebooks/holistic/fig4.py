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
# # Post-use & Pre-cut, Figure 4: token utilisation over time with Pre-cut
#
# Reads the three Figure 4 runs on Alpaca (vanilla SD at lambda 12; Pre-cut up to 24 with Q learned in warm-up
# then frozen, "Q_init"; Pre-cut with Q updated throughout) under `$SPECREPRO_RESULTS` (default `results/`);
# never runs a model. `make reproduce-holistic-fig4 LIMIT=5` produces them. Plotted by
# `bench.report.holistic.fig4` (also `python -m bench.report holistic/fig4`):
# `<results>/figures/holistic_fig4.{png,csv,md}`. The paper's figure has curves only; its claim is the ordering
# Q_updated > Q_init > vanilla SD, decided here from the data. Optional: `$SPECREPRO_MODEL`.

# %%
import pandas as pd

from bench.report.holistic.fig4 import holistic_fig4
from bench.report.plots import figures_dir, notebook_model, notebook_results, show

RESULTS = notebook_results()
MODEL = notebook_model()
print(f"results: {RESULTS}")

# %%
md = holistic_fig4(RESULTS, model=MODEL)
written = [figures_dir(RESULTS) / f"holistic_fig4.{ext}" for ext in ("png", "csv", "md")]
for path in written:
    print(path)

# %%
show(written[0])

# %%
show(md)

# %% [markdown]
# Every verification step of every curve, with the step's accepted, drafted and new tokens and draft calls:

# %%
steps = pd.read_csv(written[1])
show(steps.groupby("curve")[["accepted", "drafted", "new_tokens", "draft_calls"]].mean())
