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
# Regenerates ProPD's tables and figures from the runs under `$SPECREPRO_RESULTS` (default `results/`, relative
# paths from the project root); never runs a model. Each section runs one artifact of `bench/report/propd/` as
# `python -m bench.report propd/<artifact>` does, prints the files it wrote under the results dir and shows them;
# a section without its runs says so in one line and the others still run. Cells read "ours (paper)"; "—" is an
# empty cell, its reason in the footer. `$SPECREPRO_MODEL` picks the model (default: that of the most recent
# ProPD-family run), `$SPECREPRO_DATASET` the tables' dataset (default mt_bench, the paper's main set).

# %%
import pandas as pd

from bench.report.notebook import env, report, results_dir, show, show_report
from bench.report.propd.fig3 import PAPER

DATASET = env("SPECREPRO_DATASET")
print(f"results: {results_dir()}")

# %% [markdown]
# ## Table 1: speedup of ProPD over autoregressive decoding per batch size
#
# The propd (pruning and dynamic tree on) and ar runs at batch 1, 2, 4, 8, 16 (`make reproduce-propd-table1`).
# Our row (the embedded model) above the paper's Vicuna rows. At batch 1 the speedup is Spec-Bench's (mean
# per-question rates), above it the ratio of aggregate rates. Below, the numbers behind it (NaN where missing),
# with the mean prune rate and nodes drafted per step of each run.

# %%
show_report("propd/table1", "propd_table1.csv", drop=("propd_run_id", "ar_run_id"), dataset=DATASET)

# %% [markdown]
# ## Table 2: early pruning at batch 4, per pruning layer and top-k
#
# The medusa run (the "w/o pruning" row) and the propd runs with pruning on and the dynamic tree off at batch 4
# (`make reproduce-propd-table2`). The footer checks the paper's hardware-independent claim (1) on our runs and, by
# the same rule, on the paper's numbers. Below, the numbers behind the table (prune rate as a fraction).

# %%
show_report("propd/table2", "propd_table2.csv", drop=("run_id",), dataset=DATASET)

# %% [markdown]
# ## Table 3: ablation of early pruning and dynamic tree generation
#
# The medusa runs and the propd runs of each switch combination (neither, pruning only, dynamic only, both; from
# `method_settings`, else the run's variant) at batch 1, 2, 4, 8, 16 (`make reproduce-propd-table3`). Cells:
# propd's aggregate tokens/s over medusa's at the same batch size, ours (paper's Vicuna-7B); the footer checks the
# paper's claim (2) on ours and on the paper's 7B numbers. Below, the numbers behind each cell.

# %%
show_report("propd/table3", "propd_table3.csv", drop=("propd_run_id", "medusa_run_id"), dataset=DATASET)

# %% [markdown]
# ## Figure 7: tokens/s of AR, BPD, Medusa and ProPD per dataset and batch size
#
# The ar, bpd, medusa and propd (both switches on) runs on MT-Bench, ChatGPT Prompts and Alpaca at batch 1-16
# (`make reproduce-propd-fig7`; ChatGPT Prompts needs the hub). The paper gives no point values; the markdown
# checks its claim that ProPD is the fastest everywhere. Below, every point, with the mean per-question rate and
# MAT beside the aggregate rate.

# %%
md, fig7 = report("propd/fig7")
if fig7:
    show(fig7["propd_fig7.png"])
    show(md)
    show(pd.read_csv(fig7["propd_fig7.csv"]).drop(columns=["run_id"]))

# %% [markdown]
# ## Figure 3: early heads, iteration time, accepted length per task
#
# (a) top-k accuracy of early heads per layer, from `<results>/propd/early_heads.json`
# (`scripts/early_heads_report.py`); (b) iteration time vs tree size per batch size with the least-squares line
# T = b0 + b1 * size, and (c) vs sequence length, from `<results>/propd/iteration_time.json`
# (`scripts/propd_iteration_time.py`); (d) MAT per MT-Bench category of medusa and propd at batch 1, from their
# runs. `make reproduce-propd-fig3` produces all. Below, panel (b)'s fit per batch size (seconds; b1 per token of
# tree) and what the paper says for each panel (it publishes no point values).

# %%
md, fig3 = report("propd/fig3")
if fig3:
    show(fig3["propd_fig3.png"])
    show(md)
    show(pd.read_csv(fig3["propd_fig3_fit.csv"]))
for panel, text in PAPER.items():
    print(f"({panel}) {text}")

# %% [markdown]
# ## Figure 6: the dynamic tree's probability estimation
#
# A propd run with the dynamic tree on (`make reproduce-propd-fig6`) records its heads' top-k hit rates and the
# last tree size it chose. (a) the top-k probability of each head; (b) each node's expected acceptance in the
# best-first tree of that size, whose sum plus one is the estimated acceptance length, set beside the run's
# measured MAT. The paper's Figure 6 is a worked example, not a measurement. Below, the first nodes of (b).

# %%
md, fig6 = report("propd/fig6")
if fig6:
    show(fig6["propd_fig6.png"])
    show(md)
    nodes = pd.read_csv(fig6["propd_fig6.csv"])
    show(nodes[nodes["part"] == "b"][["node", "path", "value"]].head(16))
