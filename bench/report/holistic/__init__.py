"""Post-use & Pre-cut (holistic token efficiency): Tables 1-2 (one table), 3, 4, 9 and 10, Figures 2, 4 and 5.

Only the registrations live here; each artifact's module is imported when it runs. Every artifact returns the
markdown it wrote and reads runs of experiment `holistic` (conf/experiment/holistic/; common.py, through
bench.report.select).
"""

from bench.report.registry import Artifact, option

MODEL = {"common": ("model", "draft")}  # --draft: one drafter's runs (bench/report/drafter.py)
DATASET = option("--dataset", help="the runs' dataset (default humaneval, as the paper's ablation)")
FIG4_DATASET = option("--dataset", help="the runs' dataset (default alpaca, as the paper's Figure 4)")

ARTIFACTS = {
    "table1": Artifact(f"{__name__}.table1:holistic_table1",
                       "Tables 1-2 (tok/s and speedup vs AR of AR, Lookahead, Assisted, Speculative, Ouroboros, ours "
                       "on HumanEval, MT-Bench, GSM8K) -> tables/holistic_table1.{md,csv,tex}", **MODEL),
    "table3": Artifact(f"{__name__}.table3:holistic_table3",
                       "Table 3 (ablation ladder x draft length: speedup vs AR, MAT, utilisation) -> "
                       "tables/holistic_table3.{md,csv,tex}", options=(DATASET,), **MODEL),
    "table4": Artifact(f"{__name__}.table4:holistic_table4",
                       "Table 4 (MAT and utilisation, vanilla SD vs ours) -> tables/holistic_table4.{md,csv,tex}",
                       options=(DATASET,), **MODEL),
    "table9": Artifact(f"{__name__}.table9:holistic_table9",
                       "Table 9 (wall-clock of one operation per component of the full method) -> "
                       "tables/holistic_table9.{md,csv,tex}", options=(DATASET,), **MODEL),
    "table10": Artifact(f"{__name__}.table10:holistic_table10",
                        "Table 10 (speedup vs AR per Spec-Bench category: Speculative (8), Assisted, ours) -> "
                        "tables/holistic_table10.{md,csv,tex}", **MODEL),
    "fig2": Artifact(f"{__name__}.fig2:holistic_fig2",
                     "Figure 2 (local optimal lambda per iteration, reuse potential, acceptance vs confidence "
                     "product; (b), (c) need run.record_steps=true) -> figures/holistic_fig2.{png,csv,md}", **MODEL),
    "fig4": Artifact(f"{__name__}.fig4:holistic_fig4",
                     "Figure 4 (utilisation over time: vanilla SD, Pre-cut Q_init, Q updated) -> "
                     "figures/holistic_fig4.{png,csv,md}", options=(FIG4_DATASET,), **MODEL),
    "fig5": Artifact(f"{__name__}.fig5:holistic_fig5",
                     "Figure 5 (speedup vs draft length with reuse only, HumanEval and MT-Bench) -> "
                     "figures/holistic_fig5.{png,csv,md}", **MODEL),
    "settings": Artifact(f"{__name__}.settings:holistic_settings",
                         "the open settings swept (W, beta, target_cost, warm-up) -> tables/holistic_settings.{md,csv}",
                         **MODEL),
}

# REPRODUCED.md shows these artifacts once per drafter in the evidence (bench/report/reproduced.py)
PER_DRAFTER = ("table1", "table3", "table4", "table9", "table10", "fig2", "fig4", "fig5")
# Shown on REPRODUCED.md (`make reproduced`): (artifact, options, the command that makes its runs).
REPRODUCED = (
    ("table1", {}, "make reproduce-holistic-table1 LIMIT=5"),
    ("table3", {}, "make reproduce-holistic-table3 LIMIT=5"),
    ("table4", {}, "make reproduce-holistic-table4 LIMIT=5"),
    ("table9", {}, "make reproduce-holistic-table9 LIMIT=5"),
    ("table10", {}, "make reproduce-holistic-table10"),
    ("fig2", {}, "make reproduce-holistic-fig2 LIMIT=5"),
    ("fig4", {}, "make reproduce-holistic-fig4 LIMIT=5"),
    ("fig5", {}, "make reproduce-holistic-fig5 LIMIT=5"),
)
