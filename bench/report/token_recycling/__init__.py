"""Token Recycling (Luo et al., 2024): Table 1, Figures 3 and 4, and the paper's tree vs `tree=auto`.

Only the registrations live here; each artifact's module is imported when it runs.
"""

from bench.report.registry import Artifact, option

_TR = "bench.report.token_recycling"

ARTIFACTS = {
    "table1": Artifact(f"{_TR}.table1:token_recycling_table1",
                       "Table 1: SpecBench and MBPP, ours (paper) -> tables/token_recycling_table1.{md,csv,tex}",
                       options=(option("--mbpp-model", help="model of the MBPP columns (default: --model)"),)),
    "fig3": Artifact(f"{_TR}.fig3:tr_fig3", "Figure 3: breadth, depth, update strategy -> figures/tr_fig3.{png,csv}",
                     common=("model",), needs_runs=False),
    "fig4": Artifact(f"{_TR}.fig4:tr_fig4", "Figure 4: time per component -> figures/tr_fig4.{png,csv}",
                     common=("model",), needs_runs=False),
    "auto": Artifact(f"{_TR}.auto:tr_auto", "paper's tree vs tree=auto vs ar -> figures/tr_auto.{png,csv,md}",
                     common=("model",), needs_runs=False),
}
