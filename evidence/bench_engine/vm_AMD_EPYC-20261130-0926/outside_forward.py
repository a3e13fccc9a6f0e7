"""Our AR against HF generate at batch 1 on one model object (the bench's ar_vs_hf_generate pair), split at the
model's forward: forward hooks on the model time each forward (the prefill's too) on the host; the rest of each
call's wall time is the decode loop's own work. The two take turns (who goes first alternates), 3 HumanEval prompts,
NEW tokens each, ROUNDS rounds, the first a warm-up. Run from the repository root:
python evidence/bench_engine/<folder>/outside_forward.py [NEW] [ROUNDS]"""
import statistics
import sys
import time
import types

import torch

from bench.perf.engine_bench import runner_for, timed

NEW = int(sys.argv[1]) if len(sys.argv) > 1 else 64
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 6
args = types.SimpleNamespace(prompts=3, max_new_tokens=NEW, set=[])
hf = runner_for("smollm2-135m", "hf_generate", [], args)
ar = runner_for("smollm2-135m", "ar", [], args)
model = ar.bundle.model
print(f"one model object: {hf.bundle.model is model}; {torch.get_num_threads()} threads, "
      f"linear backend {ar.bundle.linear_backend}; {NEW} new tokens, {ROUNDS} rounds")
fw = {"t": 0.0, "n": 0, "t0": 0.0}
model.register_forward_pre_hook(lambda m, a, k: fw.update(t0=time.perf_counter()), with_kwargs=True)
model.register_forward_hook(lambda m, a, k, o: fw.update(t=fw["t"] + time.perf_counter() - fw["t0"], n=fw["n"] + 1),
                            with_kwargs=True)
prompts = [ar.encode([], it["turns"][0]) for it in ar.items]
res, outs = {"ar": [], "hf": []}, {"ar": [], "hf": []}
for rnd in range(ROUNDS):
    for name, r in (("ar", ar), ("hf", hf)) if rnd % 2 == 0 else (("hf", hf), ("ar", ar)):
        for p in prompts:
            fw.update(t=0.0, n=0)
            (gen,), wall = timed(r, [p])
            if rnd:
                res[name].append((wall, len(gen.output_ids), fw["t"], fw["n"]))
                outs[name].append(gen.output_ids)
for name, xs in res.items():
    wall, tokens, f, n = (sum(x[i] for x in xs) for i in range(4))
    print(f"{name}: {tokens / wall:.2f} tok/s; {n} forwards, {f / n * 1e3:.2f} ms each; "
          f"outside them {(wall - f) / n * 1e3:.3f} ms a forward")
ratios = [(a[1] / a[0]) / (h[1] / h[0]) for a, h in zip(res["ar"], res["hf"])]
print(f"ar/hf tok/s per call: median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f} "
      f"over {len(ratios)}; outputs identical {outs['ar'] == outs['hf']}")
