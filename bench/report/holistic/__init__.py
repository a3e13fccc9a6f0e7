"""Post-use & Pre-cut (holistic token efficiency): Tables 3 and 4 so far.

Only the registrations live here; each artifact's module is imported when it runs. Every artifact returns the
markdown it wrote and reads runs of experiment `holistic` (conf/experiment/holistic/, select.py).
"""

from bench.report.registry import Artifact, option

MODEL = {"common": ("model",)}
DATASET = option("--dataset", help="the runs' dataset (default humaneval, as the paper's ablation)")

ARTIFACTS = {
    "table3": Artifact(f"{__name__}.table3:holistic_table3",
                       "Table 3 (ablation ladder x draft length: speedup vs AR, MAT, utilisation) -> "
                       "tables/holistic_table3.{md,csv,tex}", options=(DATASET,), **MODEL),
    "table4": Artifact(f"{__name__}.table4:holistic_table4",
                       "Table 4 (MAT and utilisation, vanilla SD vs ours) -> tables/holistic_table4.{md,csv,tex}",
                       options=(DATASET,), **MODEL),
}

# Shown on REPRODUCED.md (`make reproduced`): (artifact, options, the command that makes its runs).
REPRODUCED = (
    ("table3", {}, "make reproduce-holistic-table3 LIMIT=5"),
    ("table4", {}, "make reproduce-holistic-table4 LIMIT=5"),
)
