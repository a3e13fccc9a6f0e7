"""The target's forward cost curve T(n): seconds of one forward over n tokens (root + draft) after a prefix.

Hardware decides how much a draft tree costs: on an A100 an 81-token forward costs about one 1-token step,
on a 2-core CPU several. Tree methods that adapt to the machine (`tree=auto`, Sequoia) need T(n), so it is
measured once per machine, model, dtype and linear backend and cached as JSON under results/cache/forward_cost/.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import torch

from bench.cachefile import CorruptCache, atomic_write, load_or_build
from bench.core.forward import cache_kw, tree_mask
from bench.core.kv import new_cache
from bench.core.machine import machine_id
from bench.core.timing import device_sync
from bench.core.tree import chain
from bench.models.linear_backend import backend_of, rows_of, set_backend

DEFAULT_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 81, 96, 128)
# One-token forwards are timed as AR runs them, one after another (the median of a run of them): timed once right after
# the largest size, they cost 3-6% more than AR's did (docs/cost_model.md, the validation of 2026-11-27).
ONE_TOKEN_RUN = 5


def random_token_floor(vocab: int) -> int:
    """Random tokens skip the first 100 ids (special and byte tokens); tiny test vocabularies keep their upper half."""
    return min(100, vocab // 2)


@torch.inference_mode()
def measure(bundle, sizes=DEFAULT_SIZES, prefix_tokens: int = 256, reps: int = 7) -> dict[int, float]:
    """Median seconds of one forward over n tokens after a cache of prefix_tokens (random tokens).

    Multi-token forwards carry an explicit 4D additive mask, as a verified tree does. Sizes are
    interleaved within each repeat so machine drift hits them alike; the first repeat is a warm-up. A one-token
    forward's sample is the median of a run of ONE_TOKEN_RUN of them, as AR runs them.
    """
    model, device, dtype = bundle.model, bundle.device, bundle.dtype
    gen = torch.Generator().manual_seed(0)
    low, vocab = random_token_floor(bundle.vocab_size), bundle.vocab_size
    prefix = torch.randint(low, vocab - 1, (1, prefix_tokens), generator=gen).to(device)
    cache = new_cache(model.config, prefix_tokens + max(sizes))  # the engine's cache, so T(n) is its forward's
    model(input_ids=prefix, **cache_kw(model, cache), use_cache=True, logits_to_keep=1)
    shapes = {}
    for n in sizes:
        inputs = torch.randint(low, vocab - 1, (1, n), generator=gen).to(device)
        pos = (prefix_tokens + torch.arange(n, device=device))[None]
        mask = None
        if n > 1:
            mask = tree_mask([chain(n - 1)], prefix_tokens, n, dtype, device)  # the engine's
        shapes[n] = (inputs, pos, mask)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(reps + 1):
        for n, (inputs, pos, mask) in shapes.items():
            burst = []
            for _ in range(ONE_TOKEN_RUN if n == 1 else 1):
                device_sync(device)
                t0 = time.perf_counter()
                model(input_ids=inputs, position_ids=pos, attention_mask=mask, **cache_kw(model, cache),
                      use_cache=True)
                device_sync(device)
                burst.append(time.perf_counter() - t0)
                cache.crop(-n)
            times[n].append(statistics.median(burst))
    return {n: statistics.median(t[1:]) for n, t in times.items()}


@torch.inference_mode()
def measure_prefill(bundle, sizes, reps: int = 3) -> dict[int, float]:
    """Median seconds of a prefill over n prompt tokens: from an empty cache, causal, scoring only the last token
    (logits_to_keep=1), as the engine prefills; a verification forward scores every token, which costs a
    vocabulary-sized product per token more (it overpriced 32-128-token prefills by 20-30% here). The first repeat
    is a warm-up."""
    model, device = bundle.model, bundle.device
    gen = torch.Generator().manual_seed(0)
    low, vocab = random_token_floor(bundle.vocab_size), bundle.vocab_size
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(reps + 1):
        for n in sizes:
            inputs = torch.randint(low, vocab - 1, (1, n), generator=gen).to(device)
            cache = new_cache(model.config, n)
            device_sync(device)
            t0 = time.perf_counter()
            model(input_ids=inputs, **cache_kw(model, cache), use_cache=True, logits_to_keep=1)
            device_sync(device)
            times[n].append(time.perf_counter() - t0)
    return {n: statistics.median(t[1:]) for n, t in times.items()}


def measure_backends(bundle, backends, sizes=DEFAULT_SIZES, prefix_tokens: int = 256, reps: int = 5) -> dict:
    """{backend: {n: median seconds}}: `measure` once per backend and repeat, backends interleaved and their order
    flipped every repeat so drift hits both. Each call prefills the same random prefix and runs one untimed pass
    first, which is where a freshly swapped-in backend packs its weights. `mixed` runs on the model's own crossover.
    Leaves the model on its own backend."""
    own, rows = backend_of(bundle.model), rows_of(bundle.model)
    times = {b: {n: [] for n in sizes} for b in backends}
    try:
        for rep in range(reps):
            for b in (backends if rep % 2 == 0 else backends[::-1]):
                set_backend(bundle.model, b, rows)
                for n, s in measure(bundle, sizes, prefix_tokens, reps=1).items():
                    times[b][n].append(s)
    finally:
        set_backend(bundle.model, own, rows)
    return {b: {n: statistics.median(t) for n, t in per.items()} for b, per in times.items()}


def cache_file(cache_dir: str | Path, bundle) -> Path:
    machine = re.sub(r"[^A-Za-z0-9._-]+", "_", machine_id(bundle.device, backend_of(bundle.model)))
    dtype = str(bundle.dtype).replace("torch.", "")
    return Path(cache_dir) / f"{bundle.name}-{dtype}-{bundle.device.type}-{machine}.json"


def read_curve(path: Path) -> dict:
    """A cached curve; CorruptCache (or the JSON error) if the file is not a whole one."""
    curve = json.loads(path.read_text())
    if not curve["sizes"] or len(curve["sizes"]) != len(curve["ms"]) or "machine" not in curve:
        raise CorruptCache("no sizes, sizes and ms differ in length, or no machine")
    return curve


def load_or_measure(bundle, cache_dir: str | Path, sizes=DEFAULT_SIZES, prefix_tokens: int = 256) -> dict:
    """The cached curve for this machine/model/dtype, measured (about a minute on CPU) if absent or corrupt;
    one process measures while others that want it wait (bench.cachefile)."""

    def build(path: Path) -> dict:
        seconds = measure(bundle, sizes, prefix_tokens)
        curve = {
            "model": bundle.name,
            "dtype": str(bundle.dtype).replace("torch.", ""),
            "device": str(bundle.device),
            "machine": machine_id(bundle.device, backend_of(bundle.model)),
            "linear_backend": backend_of(bundle.model),
            "prefix_tokens": prefix_tokens,
            "sizes": list(seconds),
            "ms": [1000 * s for s in seconds.values()],
            "created": datetime.now().isoformat(timespec="seconds"),
        }
        atomic_write(path, json.dumps(curve, indent=2))
        return curve

    return load_or_build(cache_file(cache_dir, bundle), read_curve, build, "forward-cost curve")


def cost_at(curve: dict, n) -> np.ndarray:
    """T(n) in ms, linearly interpolated between measured sizes (extrapolated linearly past the last)."""
    sizes, ms = np.asarray(curve["sizes"], float), np.asarray(curve["ms"], float)
    n = np.asarray(n, float)
    slope = (ms[-1] - ms[-2]) / (sizes[-1] - sizes[-2])
    return np.where(n <= sizes[-1], np.interp(n, sizes, ms), ms[-1] + slope * (n - sizes[-1]))
