"""ProPD (Zhong et al., 2024): Tables 1-3, Figures 3, 6 and 7.

Make targets: LIMIT questions per dataset, on MT-Bench spread over its 8 categories (LIMIT=16 fills a batch of 16);
the reports say when a run decoded fewer rows together than its batch size."""

from bench.cost.replay import Setting

CLAIMED = ("propd",)  # the paper's own method(s): their speedup over AR is its claim (bench.report.claims)
# The paper's artifacts in order of appearance: REPRODUCED.md's summary rows.
CONTENTS = ("Table 1", "Table 2", "Table 3", "Figure 3", "Figure 6", "Figure 7")
# Its hardware (bench.report.projected): "the 7b model ... on A6000" (13B and 33B on an A100); fp16 as Medusa's.
SETTING = Setting("Vicuna-7B on an RTX A6000, fp16", "llama-2-7b@a6000:float16")
