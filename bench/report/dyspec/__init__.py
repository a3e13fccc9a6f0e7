"""DySpec (Xiong et al., 2024): Tables 1-4, Figures 2 and 5, the Figure 4 time breakdown, Table 5 and Figures 7
and 9.

Make targets: Sequoia's protocol, raw-text c4/openwebtext/cnn_dailymail, 128-token prompts, 128 new tokens, T 0 and
0.6. Table 1 = MODEL with its own draft (smollm2-135m: `make draft` first); Tables 2-3 = the paper's Llama-2 pairs
(the hub, a GPU).
"""

CLAIMED = ("dyspec",)  # the paper's own method(s): their speedup over AR is its claim (bench.report.claims)
# The paper's artifacts in order of appearance: REPRODUCED.md's summary rows.
CONTENTS = ("Table 1", "Table 2", "Table 3", "Table 4", "Figure 2", "Figure 4", "Figure 5", "Table 5", "Figure 7",
            "Figure 9")
