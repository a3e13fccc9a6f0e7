"""The eager engine at 8e1706b (before its batch's rows were verified together) against bca10f0, in one process on
the same model: AR at batch 1 and at batch 4, the two taking turns (who goes first alternates), the first round a
warm-up. Prints each batch size's old/new time per token (median and range over the timed calls) and whether the
outputs are identical. Run from the repository root: python evidence/bench_engine/<folder>/ab.py OLD_ENGINE_PY."""
import importlib.util
import statistics
import sys
import time
import types

import torch

from bench.core.engine import Engine as New
from bench.core.timing import PhaseTimer
from bench.perf.engine_bench import runner_for

spec = importlib.util.spec_from_file_location("engine_old", sys.argv[1])  # git show 8e1706b:bench/core/engine.py
engine_old = importlib.util.module_from_spec(spec)
sys.modules["engine_old"] = engine_old  # its dataclasses look their module up
spec.loader.exec_module(engine_old)
NEW_TOKENS, ROUNDS = 64, 4
r = runner_for("smollm2-135m", "ar", [], types.SimpleNamespace(prompts=8, max_new_tokens=NEW_TOKENS, set=[]))
b = r.bundle
prompts = [r.encode([], it["turns"][0]) for it in r.items]
engines = {"old": engine_old.Engine(b.model, b.eos_token_ids, b.max_context),
           "new": New(b.model, b.eos_token_ids, b.max_context)}
print(f"{torch.get_num_threads()} threads, {b.name}, linear backend {b.linear_backend}")
for batch in (1, 4):
    groups = [prompts[i : i + batch] for i in range(0, 8 if batch > 1 else 3, batch)]
    times, outs = {"old": [], "new": []}, {}
    for rnd in range(ROUNDS):
        for name in ("old", "new") if rnd % 2 == 0 else ("new", "old"):
            for g in groups:
                rows = [r.method] + [r.method.fork() for _ in g[1:]]
                t = time.perf_counter()
                gens = engines[name].generate_batch(rows, g, NEW_TOKENS, PhaseTimer(sync=False),
                                                    [torch.Generator().manual_seed(i) for i in range(len(g))])
                spent = time.perf_counter() - t
                if rnd:
                    times[name].append(spent / sum(len(x.output_ids) for x in gens))
                outs.setdefault(name, []).append([x.output_ids for x in gens])
    ratio = [o / n for o, n in zip(times["old"], times["new"])]
    print(f"batch {batch}: old/new time per token median {statistics.median(ratio):.3f} "
          f"(range {min(ratio):.3f}-{max(ratio):.3f}, {len(ratio)} calls each); outputs identical "
          f"{outs['old'] == outs['new']}")
