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
# # DySpec: Tables 1-4, Figures 2 and 5, the Figure 4 time breakdown, Table 5 and Figures 7 and 9
#
# Regenerates DySpec's tables and figures from the runs under `$SPECREPRO_RESULTS` (default `results/`, relative
# paths from the project root); never runs a model. Each section runs one artifact of `bench/report/dyspec/` as
# `python -m bench.report dyspec/<artifact>` does, prints the files it wrote under the results dir and shows
# them; a section without its runs says so in one line and the others still run. `$SPECREPRO_MODEL` picks the
# target model (default: every model with DySpec runs for the tables, that of the most recent run otherwise).

# %%
import pandas as pd

from bench.paths import project_path
from bench.report.dyspec.tables import dyspec_models
from bench.report.dyspec.time_breakdown import FIG4_COMPONENTS
from bench.report.notebook import env, report, results_dir, show

print(f"results: {results_dir()}")

# %% [markdown]
# ## Tables 1-3: latency per token, accepted tokens per step, speedup vs AR
#
# The dyspec, sequoia, specinfer and ar runs on c4 / openwebtext / cnn_dailymail at T 0 and 0.6 (`make
# reproduce-dyspec-table1`, `-table2`, `-table3`). One table per target model: the paper's table whose target
# size is the model's (7B: Table 1, 13B: Table 2, 70B: Table 3). Cells read "ours (paper)"; "—" means no run or
# no published value. The footer says which runs, machine, trees and prompts each table used, and how our AR
# baseline differs from Sequoia's. Below each, the numbers behind it (latencies in seconds, NaN where missing).

# %%
for model in [env("SPECREPRO_MODEL")] if env("SPECREPRO_MODEL") else dyspec_models(results_dir()) or [None]:
    md, table = report("dyspec/table", model=model)
    show(md)
    for csv in (path for name, path in table.items() if name.endswith(".csv")):
        numbers = pd.read_csv(csv)
        show(numbers.drop(columns=[c for c in numbers.columns if c.endswith("_run_id")]))

# %% [markdown]
# ## Figure 4: time per component of a decoding step, per method
#
# The latest DySpec runs (every dataset and temperature, pooled; `$SPECREPRO_DATASET` and `$SPECREPRO_TEMPERATURE`
# keep only those). Our phases map to the paper's components (draft forward, target forward with the prefill, tree
# construction, mask building, sampling, verification, other). The paper gives no values for Figure 4, only claims,
# printed under ours. Below, the shares behind the figure (of the summed phase times; each row sums to 1) and our
# raw phase seconds.

# %%
md, breakdown = report("dyspec/time_breakdown", dataset=env("SPECREPRO_DATASET"),
                       temperature=env("SPECREPRO_TEMPERATURE", float))
if breakdown:
    show(breakdown["dyspec_time_breakdown.png"])
    show(md)
    shares = pd.read_csv(breakdown["dyspec_time_breakdown.csv"])
    show(shares[["label", "runs", "prompts", *(key for key, _, _ in FIG4_COMPONENTS), "phase_sum_over_wall"]])
    show(shares[["label", "phases"]])

# %% [markdown]
# ## Table 5 and Figures 7 and 9: tiles of the tree attention mask, with and without reordering
#
# A block-sparse attention kernel skips a 32x32 tile of the mask only when it is all zero, so its work is the
# number of non-zero tiles, which depends on the order of the tree's tokens. Table 5 counts them for random trees
# in four orders (the generator's, BFS, DySpec's DFS, heavy-path) beside the paper's counts ("ours (paper)", means
# over the random trees, printed as markdown); Figure 9 against the prompt prefix length; Figure 7 draws one tree's
# mask. No runs needed: with `$SPECREPRO_TREES` (a JSONL of {"parents": [...], "prefix_len": int}, e.g. recorded
# by the dyspec method; relative paths from the project root) Figure 9 uses those trees, else synthetic ones.
# `$SPECREPRO_TABLE5_SIZES`, `$SPECREPRO_TABLE5_TREES_PER_SIZE` and `$SPECREPRO_TABLE5_FIG_SIZES` change the sweep
# (defaults: the paper's sizes, 20 trees each, 768 and 1024). Below, Figure 9's points (mean tiles per source, tree
# size or size bucket, prefix length and order).

# %%
trees = env("SPECREPRO_TREES")
_, table5 = report("dyspec/table5", sizes=env("SPECREPRO_TABLE5_SIZES"),
                   trees_per_size=env("SPECREPRO_TABLE5_TREES_PER_SIZE", int),
                   fig_sizes=env("SPECREPRO_TABLE5_FIG_SIZES"), trees=str(project_path(trees)) if trees else None)
if table5:
    show([path for name, path in table5.items() if name.endswith(".png")])
    show(pd.read_csv(table5["dyspec_fig9_block_counts.csv"]))

# %% [markdown]
# ## Table 4: budget 768 with Algorithm 2 (threshold 0.001)
#
# The dyspec runs of `experiment=dyspec/table4` (run.variant b768) beside AR (`make reproduce-dyspec-table4`):
# Table 4's cells select those runs, Tables 1-3 the budget-64 ones.

# %%
md, table4 = report("dyspec/table", paper_table=4)
if table4:
    show(md)

# %% [markdown]
# ## Figure 2: acceptance rate against draft probability
#
# dyspec runs with per-step records (`run.record_steps=true`, `make reproduce-dyspec-fig2`) on CNN DailyMail at
# T 0 and 0.6: every node a verification tested, binned by the draft's probability of its token, with the share
# accepted and its 95% interval. The paper's right panel (target vs draft probability) needs the target's
# probabilities, which no record keeps.

# %%
md, fig2 = report("dyspec/fig2")
if fig2:
    show(fig2["dyspec_fig2.png"])
    show(md)

# %% [markdown]
# ## Figure 5: tree size and accepted tokens per step
#
# The dyspec run at Table 4's budget (768, threshold) on OpenWebText at T 0.6, as the paper (`make
# reproduce-dyspec-fig5`), else the latest dyspec run: per step, the tree's size and the tokens accepted, beside
# the paper's mean tree size (551.79 of 768).

# %%
md, fig5 = report("dyspec/fig5")
if fig5:
    show(fig5["dyspec_fig5.png"])
    show(md)
