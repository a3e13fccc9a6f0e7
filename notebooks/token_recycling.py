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
# Regenerates Token Recycling's tables and figures from the runs under `$SPECREPRO_RESULTS` (default `results/`,
# relative paths from the project root); never runs a model. Each section runs one artifact of
# `bench/report/token_recycling/` as `python -m bench.report token_recycling/<artifact>` does, prints the files it
# wrote under the results dir and shows them; a section without its runs says so in one line (with the make
# target that produces them) and the others still run. `$SPECREPRO_MODEL` picks the model (default: that of the
# most recent matching run).

# %%
import pandas as pd

from bench.report.notebook import env, report, results_dir, show, show_report
from bench.report.token_recycling.fig3 import FIG3_PANELS
from bench.report.token_recycling.fig4 import fig4_points

print(f"results: {results_dir()}")

# %% [markdown]
# ## Table 1: SpecBench per-category speedups, MAT, tok/s and speedup on SpecBench and MBPP
#
# `make reproduce-tr-table1` produces the runs. Cells read "ours (paper)"; "—" means no run or no published
# value. `$SPECREPRO_MBPP_MODEL` names the MBPP columns' model (the paper's Code Llama; default: the SpecBench
# model), `$SPECREPRO_PAPER_SIZE` the paper's rows (7B/13B/33B). Below the table, the numbers behind it (ours and
# `_paper` columns, NaN where missing).

# %%
show_report("token_recycling/table1", "token_recycling_table1.csv", drop=("specbench_run_id", "mbpp_run_id"),
            mbpp_model=env("SPECREPRO_MBPP_MODEL"), paper_size=env("SPECREPRO_PAPER_SIZE"))

# %% [markdown]
# ## Figure 3: tree breadth, tree depth, update strategy
#
# Runs of experiments `tr_fig3a` (breadth: sizes 30..100 at depth 6, trees from our builder), `tr_fig3b` (depth
# 4..8 at 80 nodes) and `tr_fig3c` (update strategy first / parallel / last on the paper's tree); `make
# reproduce-tr-fig3`. The plotted points are the latest run per x value; MAT includes the bonus token, tokens/s
# is the mean over questions. The paper gives no point values, only axis ranges and claims, printed under each
# panel; no paper points are drawn.

# %%
_, fig3 = report("token_recycling/fig3")
if fig3:
    show(fig3["tr_fig3.png"])
    show(pd.read_csv(fig3["tr_fig3.csv"])[["panel", "x_name", "x", "mat", "tokens_per_s", "tree", "tree_size",
                                           "tree_depth", "update", "run_id"]])
for experiment, panel, _, _, paper in FIG3_PANELS:
    print(f"({panel}) {experiment}: {paper}")

# %% [markdown]
# ## Figure 4: time allocation per component
#
# The latest `tr_fig4` run (`make reproduce-tr-fig4`). Our phases map to the paper's components as preprocess →
# Preprocess, draft → Retrieval, target_forward → Model Forward, verify → Verify, update → Update; prefill is
# folded into Model Forward (the paper times a whole response and has no prefill component). Ours beside the
# paper's percentages (`bench/report/token_recycling/paper_tables/`).

# %%
_, fig4 = report("token_recycling/fig4")
if fig4:
    show(fig4["tr_fig4.png"])
    show(pd.read_csv(fig4["tr_fig4.csv"])[["label", "our_phases", "ours_percent", "paper_percent"]])

# %% [markdown]
# The same run with prefill as its own component (not written to a file; the paper has no value for it):

# %%
if fig4:
    separate, _ = fig4_points(results_dir(), model=env("SPECREPRO_MODEL"), fold_prefill=False)
    show(separate[["label", "our_phases", "ours_percent", "paper_percent"]])

# %% [markdown]
# ## The paper's tree vs `tree=auto`, and this machine's forward cost
#
# The `tr_auto` runs (token_recycling with the paper's tree, with `tree=auto`, and ar; `make reproduce-tr-auto`)
# and the forward-cost curve cached in `results/cache/forward_cost/`. Predicted MAT is the tree builder's
# estimate (none for the paper's template tree) of verification MAT (MAT with each prompt's prefill step left
# out; see docs/methods.md, "Trees", for how close it gets); MAT·T(1)/T(size+1) is the speedup the measured MAT
# would give if drafting and verifying cost nothing.

# %%
_, auto = report("token_recycling/auto")
if auto:
    show(auto["tr_auto.png"])
    show(auto["tr_auto.md"].read_text())
    if "tr_auto_forward_cost.csv" in auto:
        show(pd.read_csv(auto["tr_auto_forward_cost.csv"]))
