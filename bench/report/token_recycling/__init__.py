"""Token Recycling (Luo et al., 2024): Table 1, Figures 3 and 4, and the paper's tree vs `tree=auto`.

Make targets: one Table 1 sweep per dataset (Vicuna on SpecBench, MBPP_MODEL on MBPP, as the paper); Figures 3 and 4
on MT-Bench (LIMIT questions, both turns)."""

from bench.cost.replay import Setting
from bench.report.declare import Paper

PAPER = Paper(
    "token_recycling", "Token Recycling (Luo et al., 2024): Table 1, Figures 3 and 4, and the paper's tree vs "
    "`tree=auto`.", contents=("Table 1", "Figure 3", "Figure 4"), claimed=("token_recycling",),
    # "a single A100-80GB GPU", Vicuna-7B on SpecBench; fp16 as Spec-Bench runs.
    setting=Setting("Vicuna-7B on an A100 80GB, fp16", "llama-2-7b@a100-80gb:float16"),
    target="reproduce-tr-{name}", needs=("tree-stats",), needs_runs=False)
