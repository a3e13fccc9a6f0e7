"""Per layer shape, up to how many rows torch's own fp32 kernel multiplies faster than prepacked oneDNN: the
crossovers the `mixed` linear backend runs on (bench.models.linear_backend).

Measured inside the model's own forwards, not on a lone weight: a lone 576x576 weight stays in the core's caches
between calls, while in a decoding forward every weight comes from memory once. A forward pre-hook and a forward
hook on every linear layer time its call; a shape's time in one forward is the sum over its layers. Both kernels run
the same forwards (n tokens after a prefix, n = `sizes`), kernels interleaved with their order flipped every repeat
so drift hits both; the first repeat is a warm-up (it packs oneDNN's weights).
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict

import torch
from torch import nn

from bench.core.forward import cache_kw, tree_mask
from bench.core.kv import new_cache
from bench.core.tree import chain
from bench.models.linear_backend import KERNELS, PrepackedLinear, backend_of, rows_of, set_backend, shape_key

SIZES = (1, 2, 4, 8, 16)


def crossovers(times: dict[str, dict[str, dict[int, float]]]) -> dict[str, int]:
    """{shape: rows}: the largest measured size up to which torch's kernel was faster at every measured size (0 where
    oneDNN was faster at the smallest). times: {shape: {kernel: {n: seconds}}}."""
    rows = {}
    for shape, by_kernel in times.items():
        rows[shape] = 0
        for n in sorted(by_kernel["plain"]):
            if by_kernel["plain"][n] >= by_kernel["onednn"][n]:
                break
            rows[shape] = n
    return rows


@torch.inference_mode()
def layer_times(model, sizes=SIZES, prefix_tokens: int = 128, reps: int = 5) -> dict[str, dict[str, dict[int, float]]]:
    """{shape: {kernel: {n: median seconds of that shape's layers in one forward over n tokens}}}. Leaves the model
    on its own backend."""
    own, own_rows = backend_of(model), rows_of(model)
    device, dtype = model.device, model.dtype
    vocab = model.get_output_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(min(100, vocab // 2), vocab - 1, (1, prefix_tokens), generator=gen).to(device)
    inputs = {n: torch.randint(min(100, vocab // 2), vocab - 1, (1, n), generator=gen).to(device) for n in sizes}
    samples: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(
        lambda: {k: {n: [] for n in sizes} for k in KERNELS})
    running: dict[str, float] = defaultdict(float)  # this forward's seconds per shape
    started: dict[int, float] = {}

    def pre(module, args):
        started[id(module)] = time.perf_counter()

    def post(module, args, out):
        running[shape_key(module)] += time.perf_counter() - started[id(module)]

    try:
        for rep in range(reps + 1):
            for kernel in (KERNELS if rep % 2 == 0 else KERNELS[::-1]):
                set_backend(model, kernel)
                linears = [m for m in model.modules() if isinstance(m, (nn.Linear, PrepackedLinear))]
                handles = [h for m in linears for h in (m.register_forward_pre_hook(pre),
                                                         m.register_forward_hook(post))]
                try:
                    cache = new_cache(model.config, prefix_tokens + max(sizes))
                    model(input_ids=prefix, **cache_kw(model, cache), use_cache=True, logits_to_keep=1)
                    for n in sizes:
                        running.clear()
                        mask = tree_mask([chain(n - 1)], prefix_tokens, n, dtype, device) if n > 1 else None
                        pos = (prefix_tokens + torch.arange(n, device=device))[None]
                        model(input_ids=inputs[n], position_ids=pos, attention_mask=mask, **cache_kw(model, cache),
                              use_cache=True)
                        cache.crop(-n)
                        if rep:
                            for shape, seconds in running.items():
                                samples[shape][kernel][n].append(seconds)
                finally:
                    for h in handles:
                        h.remove()
    finally:
        set_backend(model, own, own_rows)
    return {shape: {k: {n: statistics.median(t) for n, t in per.items()} for k, per in by_kernel.items()}
            for shape, by_kernel in samples.items()}
