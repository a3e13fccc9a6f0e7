"""The KV cache's share of a decode step, transformers' DynamicLayer (appends by concatenation) against the
engine's PreallocatedLayer (writes in place), at a short and a long context (`make bench-engine`).

Per context length and cache kind: the appends alone (every layer's update with one token's keys and values,
then the crop back: what the cache costs a step) and whole one-token forwards on that cache; kinds interleaved in
each repeat, medians of the repeats after a warm-up.
"""

from __future__ import annotations

import statistics
import time

import torch
from transformers import DynamicCache

from bench.core.forward import cache_kw
from bench.core.kv import new_cache
from bench.core.timing import device_sync
from bench.models.forward_cost import random_token_floor

KINDS = {"dynamic": lambda config, n: DynamicCache(config=config), "preallocated": new_cache}


@torch.inference_mode()
def cache_share(model, contexts=(256, 1500), reps: int = 9) -> dict:
    """{context: {kind: {"append_ms", "forward_ms", "share"}}}; share = append_ms / forward_ms."""
    device, vocab = model.device, model.get_output_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(0)
    out = {}
    for ctx in contexts:
        prefix = torch.randint(random_token_floor(vocab), vocab - 1, (1, ctx), generator=gen).to(device)
        token = torch.randint(random_token_floor(vocab), vocab - 1, (1, 1), generator=gen).to(device)
        caches = {}
        for kind, make in KINDS.items():
            caches[kind] = make(model.config, ctx + 64)
            model(input_ids=prefix, **cache_kw(model, caches[kind]), use_cache=True, logits_to_keep=1)
        layer0 = caches["dynamic"].layers[0]
        k = torch.zeros_like(layer0.keys[:, :, :1])
        times = {kind: {"append": [], "forward": []} for kind in KINDS}
        for _ in range(reps + 1):
            for kind, cache in caches.items():
                device_sync(device)
                t0 = time.perf_counter()
                for i in range(len(cache.layers)):
                    cache.update(k, k, i)
                device_sync(device)
                times[kind]["append"].append(time.perf_counter() - t0)
                cache.crop(-1)
                t0 = time.perf_counter()
                model(input_ids=token, **cache_kw(model, cache), use_cache=True)
                device_sync(device)
                times[kind]["forward"].append(time.perf_counter() - t0)
                cache.crop(-1)
        out[ctx] = {}
        for kind, t in times.items():
            append, forward = (1000 * statistics.median(t[x][1:]) for x in ("append", "forward"))
            out[ctx][kind] = {"append_ms": append, "forward_ms": forward, "share": append / forward}
    return out


def print_share(share: dict) -> None:
    for ctx, kinds in share.items():
        parts = [f"{kind} append {v['append_ms']:.2f} ms of a {v['forward_ms']:.1f} ms step ({100 * v['share']:.1f}%)"
                 for kind, v in kinds.items()]
        print(f"KV cache at {ctx} tokens: " + "; ".join(parts))
