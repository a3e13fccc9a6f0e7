"""ProPD (Zhong et al., 2024): Tables 1-3, Figures 3, 6 and 7.

Make targets: LIMIT questions per dataset, on MT-Bench spread over its 8 categories (LIMIT=16 fills a batch of 16);
the reports say when a run decoded fewer rows together than its batch size."""

from bench.cost.replay import Setting
from bench.report.declare import Paper

PAPER = Paper(
    "propd", "ProPD (Zhong et al., 2024): Tables 1-3, Figures 3, 6 and 7.",
    contents=("Table 1", "Table 2", "Table 3", "Figure 3", "Figure 6", "Figure 7"), claimed=("propd",),
    # "the 7b model ... on A6000" (13B and 33B on an A100); fp16 as Medusa's.
    setting=Setting("Vicuna-7B on an RTX A6000, fp16", "llama-2-7b@a6000:float16"),
    sweep="$(PY) -m bench.run $(SWEEP) experiment=propd/{sweep} $(PROPD_ARGS)", needs=("heads",), shown=" LIMIT=16",
    experiment="propd_{name}")  # the Medusa heads first; the page at LIMIT=16 fills a batch of 16
