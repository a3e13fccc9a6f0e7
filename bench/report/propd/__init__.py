"""ProPD (Zhong et al., 2024): Tables 1-3, Figures 3, 6 and 7.

Only the registrations live here; each artifact's module is imported when it runs. Every artifact returns the
markdown it wrote (so REPRODUCED.md can show it) and reads runs of ar, bpd, medusa and propd (common.py, through bench.report.select).
"""

from bench.report.registry import Artifact, option

MODEL = {"common": ("model",)}
DATASET = option("--dataset", help="the runs' dataset (default mt_bench, as the paper's main set)")
FIGURE = {**MODEL, "needs_runs": False}  # Figure 3's panels (a)-(c) come from files, not runs

ARTIFACTS = {
    "table1": Artifact(f"{__name__}.table1:propd_table1",
                       "Table 1 (speedup vs AR per batch size) -> tables/propd_table1.{md,csv,tex}",
                       options=(DATASET,), **MODEL),
    "table2": Artifact(f"{__name__}.table2:propd_table2",
                       "Table 2 (early pruning: layer x top-k at batch 4) -> tables/propd_table2.{md,csv,tex}",
                       options=(DATASET, option("--batch-size", type=int, help="default 4, as the paper")), **MODEL),
    "table3": Artifact(f"{__name__}.table3:propd_table3",
                       "Table 3 (ablation vs Medusa per batch size) -> tables/propd_table3.{md,csv,tex}",
                       options=(DATASET,), **MODEL),
    "fig3": Artifact(f"{__name__}.fig3:propd_fig3",
                     "Figure 3 (early heads' top-k accuracy, iteration time, MAT per category) -> "
                     "figures/propd_fig3.{png,csv,md,tex}", **FIGURE),
    "fig6": Artifact(f"{__name__}.fig6:propd_fig6",
                     "Figure 6 (heads' top-k probability, expected acceptance per node of the chosen tree) -> "
                     "figures/propd_fig6.{png,csv,md}", **MODEL),
    "fig7": Artifact(f"{__name__}.fig7:propd_fig7",
                     "Figure 7 (tok/s of ar, bpd, medusa, propd per dataset and batch) -> "
                     "figures/propd_fig7.{png,csv,md,tex}", **MODEL),
}

# Shown on REPRODUCED.md (`make reproduced`): (artifact, options, the command that makes its runs).
REPRODUCED = (
    ("table1", {}, "make reproduce-propd-table1 LIMIT=16"),
    ("table2", {}, "make reproduce-propd-table2 LIMIT=16"),
    ("table3", {}, "make reproduce-propd-table3 LIMIT=16"),
    ("fig7", {}, "make reproduce-propd-fig7 LIMIT=16"),
    ("fig3", {}, "make reproduce-propd-fig3 LIMIT=16"),
    ("fig6", {}, "make reproduce-propd-fig6 LIMIT=16"),
)
