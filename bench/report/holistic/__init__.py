"""Post-use & Pre-cut (holistic token efficiency): Tables 1-2 (one table), 3, 4, 9 and 10, Figures 2, 4 and 5.

Make targets need MODEL's draft (make draft); new tokens per dataset as the paper's Table 7 unless MAX_NEW is given."""

from bench.cost.replay import Setting
from bench.report.declare import Paper

PAPER = Paper(
    "holistic", "Post-use & Pre-cut (holistic token efficiency): Tables 1-2 (one table), 3, 4, 9 and 10, Figures 2, "
    "4 and 5.", contents=("Tables 1-2", "Figure 2", "Table 3", "Table 4", "Table 9", "Table 10", "Figure 4", "Figure 5"),
    claimed=("holistic",),
    # The Llama-2-7B draft on one A6000, the 70B target over four with `auto` placement (layers in sequence: a
    # forward costs what one A6000 holding every layer would), bfloat16.
    setting=Setting("Llama-2-70B over 4x RTX A6000 with the Llama-2-7B draft on one, bf16",
                    "llama-2-70b@a6000:bfloat16", draft="llama-2-7b@a6000:bfloat16"),
    sweep="$(PY) -m bench.run $(SWEEP) experiment=holistic/{sweep} $(HOLISTIC_ARGS)", shown=" LIMIT=5",
    experiment="holistic", common=("model", "draft"), per_drafter=True)  # --draft: one drafter's runs
