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
# # Token Recycling: the paper's tree vs `tree=auto`, and this machine's forward cost
#
# Reads the `tr_auto` runs (token_recycling with the paper's tree, with `tree=auto`, and ar, same dataset)
# and the forward-cost curve cached in `results/cache/forward_cost/` under `$SPECREPRO_RESULTS` (default
# `results/`); never runs a model. Writes `<results>/figures/tr_auto.png` (T(n)/T(1) and the table),
# `tr_auto.csv` / `tr_auto.md` (the table) and `tr_auto_forward_cost.csv` (the curve).

# %%
import pandas as pd

from bench.report.plots import notebook_model, notebook_results, show
from bench.report.token_recycling.auto import tr_auto

RESULTS = notebook_results()
MODEL = notebook_model()
print(f"results: {RESULTS}")

# %%
paths = tr_auto(RESULTS, model=MODEL)
for p in paths:
    print(p)

# %%
show(paths[0])

# %% [markdown]
# Predicted MAT is the tree builder's estimate (none for the paper's template tree), of verification MAT (MAT
# with each prompt's prefill step left out; see docs/methods.md, "Trees", for how close it gets);
# MAT·T(1)/T(size+1) is the speedup the measured MAT would give if drafting and verifying cost nothing.

# %%
show(next(p for p in paths if p.suffix == ".md").read_text())

# %%
curve_csv = next((p for p in paths if p.name == "tr_auto_forward_cost.csv"), None)
if curve_csv is not None:
    show(pd.read_csv(curve_csv))
