"""DySpec (Xiong et al., 2024): Tables 1-4, Figures 2 and 5, the Figure 4 time breakdown, Table 5 and Figures 7
and 9.

Only the registrations live here; each artifact's module is imported when it runs.
"""

from bench.report.registry import Artifact, option

TABLE5_OPTIONS = (
    option("--sizes", help="tree sizes, nodes incl. the root (default 256,512,1024,2048)"),
    option("--trees-per-size", type=int, help="default 20"),
    option("--seed", type=int, help="default 0"),
    option("--generators", help="of recursive, greedy (default: both)"),
    option("--trees", help='recorded trees, JSONL of {"parents": [...], "prefix_len": int}'),
    option("--prefixes", help="prefix lengths for Figure 9 (default 0,128,256,512,1024)"),
    option("--fig-sizes", help="synthetic tree sizes for Figure 9 (default 768,1024)"),
    option("--block", type=int, help="tile side (default 32, DySpec's kernel)"),
)

DRAFT_COMMON = ("model", "paper_size", "draft")  # --draft: one drafter's runs (bench/report/drafter.py)
# REPRODUCED.md shows these artifacts once per drafter in the evidence (bench/report/reproduced.py)
PER_DRAFTER = ("table", "fig2", "fig5", "time_breakdown")

ARTIFACTS = {
    "table": Artifact(
        f"{__name__}.tables:dyspec_table",
        "Tables 1-3 (latency, accepted tokens) -> tables/dyspec_table{N}.{md,csv,tex}",
        options=(option("--paper-table", type=int,
                        help="the paper's table (1: 68M/7B, 2: 68M/13B, 3: 7B/70B); "
                             "default: by --paper-size, else by the runs' paper size"),), common=DRAFT_COMMON),
    "fig2": Artifact(
        f"{__name__}.fig2:dyspec_fig2",
        "Figure 2 (acceptance rate vs draft probability; runs with run.record_steps=true) -> figures/dyspec_fig2.*",
        common=("model", "draft")),
    "fig5": Artifact(
        f"{__name__}.fig5:dyspec_fig5",
        "Figure 5 (tree size and accepted tokens per step; Table 4's budget) -> figures/dyspec_fig5.{png,csv,md}",
        common=("model", "draft")),
    "time_breakdown": Artifact(
        f"{__name__}.time_breakdown:dyspec_time_breakdown",
        "Figure 4 (time per component) -> tables/dyspec_time_breakdown.{md,csv}, figures/",
        options=(option("--dataset", help="only runs on this dataset"),
                 option("--temperature", type=float, help="only runs at this temperature (default: all)")),
        common=DRAFT_COMMON),
    "table5": Artifact(
        f"{__name__}.table5:dyspec_table5",
        "Table 5, Figures 7 and 9 (mask tiles per tree order; no runs needed)",
        options=TABLE5_OPTIONS, common=(), needs_runs=False),
}

# Shown on REPRODUCED.md (`make reproduced`): (artifact, options, the command that makes its runs).
REPRODUCED = (("table", {"paper_table": 1}, "make draft && make reproduce-dyspec-table1 LIMIT=10"),
              ("table", {"paper_table": 4}, "make draft && make reproduce-dyspec-table4 LIMIT=5"),
              ("fig2", {}, "make draft && make reproduce-dyspec-fig2 LIMIT=10"),
              ("fig5", {}, "make draft && make reproduce-dyspec-fig5 LIMIT=5"),
              ("time_breakdown", {}, "make draft && make reproduce-dyspec-table1"),
              # No model: seeded random trees, 5 per size on the page (every page build and its tests recompute
              # it; `make reproduce-dyspec-table5` draws 20 per size).
              ("table5", {"trees_per_size": 5}, "python -m bench.report dyspec/table5 --trees-per-size 5"))
