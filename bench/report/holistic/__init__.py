"""Post-use & Pre-cut (holistic token efficiency): Tables 1-2 (one table), 3, 4, 9 and 10, Figures 2, 4 and 5.

Make targets need MODEL's draft (make draft); new tokens per dataset as the paper's Table 7 unless MAX_NEW is given."""

from bench.cost.replay import Setting

CLAIMED = ("holistic",)  # the paper's own method(s): their speedup over AR is its claim (bench.report.claims)
# The paper's artifacts in order of appearance: REPRODUCED.md's summary rows.
CONTENTS = ("Tables 1-2", "Figure 2", "Table 3", "Table 4", "Table 9", "Table 10", "Figure 4", "Figure 5")
# Its hardware (bench.report.projected): the Llama-2-7B draft on one A6000, the 70B target over four with `auto`
# placement (layers in sequence: a forward costs what one A6000 holding every layer would), bfloat16.
SETTING = Setting("Llama-2-70B over 4x RTX A6000 with the Llama-2-7B draft on one, bf16",
                  "llama-2-70b@a6000:bfloat16", draft="llama-2-7b@a6000:bfloat16")
