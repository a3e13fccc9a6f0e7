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
# # DySpec, Table 5 and Figures 7 and 9: tiles of the tree attention mask, with and without reordering
#
# A block-sparse attention kernel skips a 32x32 tile of the mask only when it is all zero, so its work is
# the number of non-zero tiles, which depends on the order of the tree's tokens. Table 5 counts them for
# random trees in four orders (the generator's, BFS, DySpec's DFS, heavy-path) beside the paper's counts;
# Figure 9 against the prompt prefix length; Figure 7 draws one tree's mask. Never runs a model: with
# `$SPECREPRO_TREES` (a JSONL of {"parents": [...], "prefix_len": int}, e.g. recorded by the dyspec method;
# relative paths from the project root) Figure 9 uses those trees, else synthetic ones. Built by
# `bench.report.dyspec.table5` (also `python -m bench.report dyspec/table5`); writes
# `<results>/tables/dyspec_table5.{md,csv}` and `<results>/figures/dyspec_fig9_block_counts.{png,csv}`,
# `dyspec_fig7_masks.png`. `$SPECREPRO_TABLE5_SIZES`, `$SPECREPRO_TABLE5_TREES_PER_SIZE` and
# `$SPECREPRO_TABLE5_FIG_SIZES` change the sweep (defaults: the paper's sizes, 20 trees each, 768 and 1024).

# %%
import os

import pandas as pd

from bench.paths import project_path
from bench.report.dyspec.table5 import dyspec_table5
from bench.report.plots import notebook_results, show

RESULTS = notebook_results()
TREES = os.environ.get("SPECREPRO_TREES") or None
SIZES = os.environ.get("SPECREPRO_TABLE5_SIZES") or "256,512,1024,2048"
TREES_PER_SIZE = int(os.environ.get("SPECREPRO_TABLE5_TREES_PER_SIZE") or 20)
FIG_SIZES = os.environ.get("SPECREPRO_TABLE5_FIG_SIZES") or "768,1024"
print(f"results: {RESULTS}")

# %% [markdown]
# The table (printed as markdown: "ours (paper)", means over the random trees):

# %%
paths = dyspec_table5(RESULTS, sizes=SIZES, trees_per_size=TREES_PER_SIZE, fig_sizes=FIG_SIZES,
                      trees=str(project_path(TREES)) if TREES else None)
for p in paths:
    print(p)

# %%
for png in (p for p in paths if p.suffix == ".png"):
    show(png)

# %% [markdown]
# Figure 9's points (mean tiles per source, tree size or size bucket, prefix length and order):

# %%
show(pd.read_csv(next(p for p in paths if p.name == "dyspec_fig9_block_counts.csv")))
