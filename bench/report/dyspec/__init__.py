"""DySpec (Xiong et al., 2024): Tables 1-4, Figures 2 and 5, the Figure 4 time breakdown, Table 5 and Figures 7
and 9.

Make targets: Sequoia's protocol (raw-text c4/openwebtext/cnn_dailymail, 128-token prompts, 128 new tokens, T 0 and
0.6); Table 1 = MODEL with its own draft (`make draft` first); Tables 2-3 = the paper's Llama-2 pairs (hub, GPU)."""

from bench.cost.replay import Setting
from bench.report.declare import Paper

PAPER = Paper(
    "dyspec", "DySpec (Xiong et al., 2024): Tables 1-4, Figures 2 and 5, the Figure 4 time breakdown, Table 5 and "
    "Figures 7 and 9.", contents=("Table 1", "Table 2", "Table 3", "Table 4", "Figure 2", "Figure 4", "Figure 5", "Table 5",
                          "Figure 7", "Figure 9"), claimed=("dyspec",),
    # "one NVIDIA A100 40GB GPU"; JF68m drafts for Llama-2-7B (Table 1) and -13B (Table 2), Llama-2-7B for the
    # offloaded Llama-2-70B (Tables 3-4); fp16.
    setting=Setting("Llama-2-7B with the JF68m draft on an A100 40GB, fp16", "llama-2-7b@a100-40gb",
                    draft="llama-68m@a100-40gb"),
    settings={"Table 2": Setting("Llama-2-13B with the JF68m draft on an A100 40GB, fp16", "llama-2-13b@a100-40gb",
                                 draft="llama-68m@a100-40gb"),
              **dict.fromkeys(("Table 3", "Table 4"), Setting(
                  "Llama-2-70B offloaded to host memory with the Llama-2-7B draft on an A100 40GB, fp16",
                  "llama-2-70b@a100-40gb+offloaded", draft="llama-2-7b@a100-40gb"))})
