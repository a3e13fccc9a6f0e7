"""Token Recycling (Luo et al., 2024): Table 1, Figures 3 and 4, and the paper's tree vs `tree=auto`.

Only the registrations live here; each artifact's module is imported when it runs.
"""

from bench.report.registry import Artifact, option

FIGURE = {"common": ("model",), "needs_runs": False}  # a figure names its experiment when it has no runs

ARTIFACTS = {
    "table1": Artifact(f"{__name__}.table1:token_recycling_table1",
                       "Table 1 (SpecBench, MBPP) -> tables/token_recycling_table1.{md,csv,tex}",
                       options=(option("--mbpp-model", help="the MBPP columns' model (default: --model)"),)),
    "fig3": Artifact(f"{__name__}.fig3:tr_fig3",
                     "Figure 3 (breadth, depth, update) -> figures/tr_fig3.{png,csv}", **FIGURE),
    "fig4": Artifact(f"{__name__}.fig4:tr_fig4",
                     "Figure 4 (time per component) -> figures/tr_fig4.{png,csv}", **FIGURE),
    "auto": Artifact(f"{__name__}.auto:tr_auto",
                     "paper's tree vs tree=auto vs ar -> figures/tr_auto.{png,csv,md}", **FIGURE),
}

# Shown on REPRODUCED.md (`make reproduced`): (artifact, options, the command that makes its runs).
REPRODUCED = (("table1", {}, "make reproduce-tr-table1 LIMIT=5"),
              ("fig3", {}, "make reproduce-tr-fig3"),
              ("fig4", {}, "make reproduce-tr-fig4"),
              ("auto", {}, "make reproduce-tr-auto"))
