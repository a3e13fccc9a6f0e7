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
# # DySpec: Tables 1 and 4, Figures 2, 5 and 4, Table 5 and Figures 7 and 9
#
# Regenerates the paper's tables and figures from the runs under `$SPECREPRO_RESULTS` (default `results/`, relative
# paths from the project root); never runs a model. One section per artifact of `bench/report/dyspec/`, from its
# declaration (bench/report/notebook.py): each runs the artifact as `python -m bench.report dyspec/<artifact>` does,
# prints the files it wrote under the results dir and shows its markdown, figures and the numbers behind them; a
# section without its runs says so in one line (with the make target that produces them) and the others still run.
# Cells read "ours (paper)"; "—" is an empty cell, its reason in the footer. `$SPECREPRO_MODEL` picks the model
# (default: that of the most recent run of DySpec's methods), `$SPECREPRO_DRAFT` the drafter, `$SPECREPRO_DATASET` and `$SPECREPRO_TEMPERATURE` Figure 4's runs,
# `$SPECREPRO_TREES` (an absolute path) recorded trees and `$SPECREPRO_SIZES`, `$SPECREPRO_TREES_PER_SIZE`,
# `$SPECREPRO_FIG_SIZES` Table 5's sweep.

# %%
from bench.report.notebook import results_dir, sections

print(f"results: {results_dir()}")
sections("dyspec")
