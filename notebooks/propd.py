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
# # ProPD: Tables 1-3, Figures 7, 3 and 6
#
# Regenerates the paper's tables and figures from the runs under `$SPECREPRO_RESULTS` (default `results/`, relative
# paths from the project root); never runs a model. One section per artifact of `bench/report/propd/`, from its
# declaration (bench/report/notebook.py): each runs the artifact as `python -m bench.report propd/<artifact>` does,
# prints the files it wrote under the results dir and shows its markdown, figures and the numbers behind them; a
# section without its runs says so in one line (with the make target that produces them) and the others still run.
# Cells read "ours (paper)"; "—" is an empty cell, its reason in the footer. `$SPECREPRO_MODEL` picks the model
# (default: that of the most recent ProPD-family run), `$SPECREPRO_DATASET` the tables' dataset (default mt_bench, the paper's main set).

# %%
from bench.report.notebook import results_dir, sections

print(f"results: {results_dir()}")
sections("propd")
