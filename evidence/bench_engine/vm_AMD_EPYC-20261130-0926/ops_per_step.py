"""Kernel launches (aten ops that run a kernel on a GPU, bench.core.launches) per decode step and phase, for AR,
Token Recycling (the paper's 80-node tree) and PLD on the embedded model, fp32 on the CPU: the first HumanEval
prompt, NEW new tokens (128 unless the environment sets NEW), the engine of the checkout it runs in. Prints a table
and writes ops_per_step-<NEW>.json beside this file. Run from the repository root:
[NEW=32] python evidence/<folder>/ops_per_step.py"""
import json
import os
import pathlib
import subprocess
import types

from bench.core.launches import ops_per_step
from bench.perf.engine_bench import runner_for

NEW = int(os.environ.get("NEW", "128"))
args = types.SimpleNamespace(prompts=1, max_new_tokens=NEW, set=[])
sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
result = {"git_sha": sha,
          "model": "smollm2-135m", "prompt": "humaneval 0", "max_new_tokens": NEW, "methods": {}}
for method in ("ar", "token_recycling", "pld"):
    r = runner_for("smollm2-135m", method, [], args)
    prompt = r.encode([], r.items[0]["turns"][0])
    ops = ops_per_step(r.method, r.engine, [prompt], NEW)
    outside = round(sum(v for k, v in ops.items() if k != "target_forward"), 1)
    result["methods"][method] = {"phases": ops, "outside_forward": outside}
    print(f"{method:16s} forward {ops['target_forward']:7.1f}  outside it {outside:5.1f}  {ops}")
pathlib.Path(__file__).with_name(f"ops_per_step-{NEW}.json").write_text(json.dumps(result, indent=1) + "\n")
