"""Token Recycling (Luo et al., 2024): Table 1, Figures 3 and 4, and the paper's tree vs `tree=auto`.

Make targets: one Table 1 sweep per dataset (Vicuna on SpecBench, MBPP_MODEL on MBPP, as the paper); Figures 3 and 4
on MT-Bench (LIMIT questions, both turns)."""

from bench.cost.replay import Setting

CLAIMED = ("token_recycling",)  # the paper's own method(s): their speedup over AR is its claim (bench.report.claims)
# The paper's artifacts in order of appearance: REPRODUCED.md's summary rows.
CONTENTS = ("Table 1", "Figure 3", "Figure 4")
# Its hardware (bench.report.projected): "a single A100-80GB GPU", Vicuna-7B on SpecBench; fp16 as Spec-Bench runs.
SETTING = Setting("Vicuna-7B on an A100 80GB, fp16", "llama-2-7b@a100-80gb:float16")
