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
# # Post-use & Pre-cut: Tables 1-2, 3, 4, 9 and 10, Figures 2, 4 and 5
#
# Regenerates the paper's tables and figures from the runs of experiment `holistic` (`conf/experiment/holistic/`)
# under `$SPECREPRO_RESULTS` (default `results/`, relative paths from the project root); never runs a model. Each
# section runs one artifact of `bench/report/holistic/` as `python -m bench.report holistic/<artifact>` does,
# prints the files it wrote under the results dir and shows them; a section without its runs says so in one line
# and the others still run. Cells are "ours (paper)"; "—" is an empty cell. `$SPECREPRO_MODEL` picks the model
# (default: that of the most recent holistic run).

# %%
import pandas as pd

from bench.report.notebook import report, results_dir, show, show_report

print(f"results: {results_dir()}")

# %% [markdown]
# ## Tables 1-2: tok/s and speedup over AR per method and dataset
#
# AR, Lookahead, Assisted, Speculative at lambda 12, Ouroboros at lambda 12 and ours on HumanEval, MT-Bench and
# GSM8K (`make reproduce-holistic-table1`); the paper's cells are its Llama-2-chat 7B&70B pair. Below, our numbers
# with MAT and lossless counts, and every pair the paper reports (NaN where it has no cell).

# %%
show_report("holistic/table1", "holistic_table1.csv", drop=("run_id", "ar_run_id"))

# %% [markdown]
# ## Table 3: the ablation ladder x draft length
#
# sd, + reuse at the draft, + reuse at the target, + Pre-cut, at lambda 3-24 on HumanEval, and their AR baseline
# (`make reproduce-holistic-table3`). The markdown decides the paper's two hardware-independent claims from the
# data. Below, per cell: MAT, both utilisations (Eq. 3's new tokens / draft calls; Table 5's accepted / drafted),
# hit rates at the draft and the target, and draft calls and tokens per step.

# %%
show_report("holistic/table3", "holistic_table3.csv", drop=("run_id", "ar_run_id"))

# %% [markdown]
# ## Table 4: MAT and utilisation, vanilla SD against the full method
#
# Two cells of Table 3 (sd at lambda 12, both reuses and Pre-cut at lambda <= 24; `make reproduce-holistic-table4`),
# our pair under the paper's six. Cells are "MAT / utilisation" with utilisation = accepted / drafted draft tokens
# (the paper's Table 5 definition); the footer adds Eq. 3's utilisation and the speedups.

# %%
md, _ = report("holistic/table4")
show(md)

# %% [markdown]
# ## Table 9: wall-clock of one operation per component
#
# The latest run with both reuses and Pre-cut (lambda <= 24) on HumanEval (`make reproduce-holistic-table9`).
# Below, per component: the phase, what one operation is, how many there were, ms per operation and per
# verification step, and the share of the timed region.

# %%
show_report("holistic/table9", "holistic_table9.csv", drop=("run_id",))

# %% [markdown]
# ## Table 10: speedup per Spec-Bench category
#
# AR, Speculative at lambda 8, Assisted and ours on spec_bench (`make reproduce-holistic-table10`); the paper's
# pair is Llama-3.1-Instruct. Below, per method and category, our speedup.

# %%
md, table10 = report("holistic/table10")
show(md)
if table10:
    show(pd.read_csv(table10["holistic_table10.csv"]).pivot(index="method", columns="category", values="speedup"))

# %% [markdown]
# ## Figure 4: token utilisation over time with Pre-cut
#
# The three Figure 4 runs on Alpaca (vanilla SD at lambda 12; Pre-cut up to 24 with Q learned in warm-up then
# frozen, "Q_init"; Pre-cut with Q updated throughout; `make reproduce-holistic-fig4`). The paper's figure has
# curves only; its claim is the ordering Q_updated > Q_init > vanilla SD, decided here from the data. Below, the
# mean per verification step of each curve's accepted, drafted and new tokens and draft calls.

# %%
md, fig4 = report("holistic/fig4")
if fig4:
    show(fig4["holistic_fig4.png"])
    show(md)
    steps = pd.read_csv(fig4["holistic_fig4.csv"])
    show(steps.groupby("curve")[["accepted", "drafted", "new_tokens", "draft_calls"]].mean())

# %% [markdown]
# ## Figure 5: draft-length sensitivity with reuse only
#
# The holistic runs with both reuses and no Pre-cut at every lambda on HumanEval and MT-Bench (`make
# reproduce-holistic-fig5`; HumanEval's are Table 3's "+ reuse at the target" row). The paper's figure has no
# values in its text; its claim, that the best lambda differs between tasks, is decided here from the data. Below,
# every point with MAT, both utilisations and the hit rates.

# %%
md, fig5 = report("holistic/fig5")
if fig5:
    show(fig5["holistic_fig5.png"])
    show(md)
    show(pd.read_csv(fig5["holistic_fig5.csv"]).drop(columns=["run_id", "ar_run_id"]))

# %% [markdown]
# ## Figure 2: the observations behind Post-use and Pre-cut
#
# Vanilla SD at lambda 12 on Alpaca with per-step records (`run.record_steps=true`, `make reproduce-holistic-fig2`):
# (a) the local optimal draft length per iteration, (b) the share of discarded draft tokens that reappear later
# (in the output, in a later draft), (c) the acceptance of draft prefixes against the product of their tokens'
# confidences. Without per-step records, (a) alone, from any vanilla SD run.

# %%
md, fig2 = report("holistic/fig2")
if fig2:
    show(fig2["holistic_fig2.png"])
    show(md)
