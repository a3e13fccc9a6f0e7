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
# # Token Recycling: Table 1, Figures 3 and 4, the paper's tree vs `tree=auto`
#
# Regenerates the paper's tables and figures from the runs under `$SPECREPRO_RESULTS` (default `results/`, relative
# paths from the project root); never runs a model. One section per artifact of `bench/report/token_recycling/`, from its
# declaration (bench/report/notebook.py): each runs the artifact as `python -m bench.report token_recycling/<artifact>` does,
# prints the files it wrote under the results dir and shows its markdown, figures and the numbers behind them; a
# section without its runs says so in one line (with the make target that produces them) and the others still run.
# Cells read "ours (paper)"; "—" is an empty cell, its reason in the footer. `$SPECREPRO_MODEL` picks the model
# (default: that of the most recent matching run), `$SPECREPRO_MBPP_MODEL` Table 1's MBPP columns' model, `$SPECREPRO_PAPER_SIZE` its paper rows.

# %%
from bench.report.notebook import results_dir, sections

print(f"results: {results_dir()}")
sections("token_recycling")
