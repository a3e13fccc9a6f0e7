"""ProPD Figure 3 (b) and (c): the target's iteration time against the tree size, batch size and sequence length.

    python scripts/propd_iteration_time.py [model=smollm2-135m] [--reps 3] [--batches 1,2,4,8,16]
        [--sizes 1,4,8,16,32,48,64] [--seq-len 256] [--seq-lens 64,128,256,512,768] [--seq-sizes 16,64]
        [--max-tokens N] [--out PATH] [other Hydra overrides: model.*, paths.*,
        run.threads, run.jobs_beside]

One point is the median seconds of one target forward over `tree_size` tokens per row (root included; a chain's
mask, since only the size matters for the cost), for `batch` rows, after `seq_len` cached tokens per row (random
tokens). The grid: every batch size x every tree size at --seq-len (panel b), and every --seq-lens x --seq-sizes at
batch 1 (panel c); a point in both is measured once. As bench/models/forward_cost.py measures T(n): the tree part
has an explicit 4D additive float mask, as a verified tree does; within each repeat the sizes of one (batch,
length) are interleaved so machine drift hits them alike; the first repeat is an untimed warm-up; the device is
synced around each forward; the cache is cropped back after each. --max-tokens skips points with batch x tree size
above it (listed in the file). Writes results/propd/iteration_time.json atomically:
{"model", "device", "machine", "dtype", "reps", "rows": [{"batch", "tree_size", "seq_len", "seconds" (the median),
"min_seconds", "max_seconds" (the fastest and slowest repeat)}], ...}.
Most of the default grid's work is the batch-16 row (16 x 173 tokens per repeat); --max-tokens or fewer --batches
shorten it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import DynamicCache

from bench.cachefile import atomic_write
from bench.cli import OneLineParser, run_script
from bench.core.forward import cache_kw
from bench.core.machine import machine_id
from bench.core.timing import device_sync
from bench.core.tree import chain
from bench.errors import HarnessError
from bench.models.forward_cost import random_token_floor
from bench.models.linear_backend import backend_of
from bench.paths import project_path
from bench.run.compose import compose_config
from bench.run.jobs import set_threads
from bench.run.runner import get_bundle

OUT = Path("propd", "iteration_time.json")  # under paths.results


def ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"need integers >= 1: {text!r}")
    return values


def parser() -> OneLineParser:
    p = OneLineParser(prog="propd_iteration_time.py", description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3, help="timed repeats per point (after one warm-up); default 3")
    p.add_argument("--batches", type=ints, default=[1, 2, 4, 8, 16], help="panel (b) batch sizes")
    p.add_argument("--sizes", type=ints, default=[1, 4, 8, 16, 32, 48, 64], help="panel (b) tree sizes")
    p.add_argument("--seq-len", type=int, default=256, help="panel (b) cached tokens per row")
    p.add_argument("--seq-lens", type=ints, default=[64, 128, 256, 512, 768], help="panel (c) cached tokens")
    p.add_argument("--seq-sizes", type=ints, default=[16, 64], help="panel (c) tree sizes (batch 1)")
    p.add_argument("--max-tokens", type=int, default=None, help="skip points with batch x tree size above this")
    p.add_argument("--out", default=None, help=f"default: <paths.results>/{OUT.as_posix()}")
    return p


def grid(args) -> tuple[dict[tuple[int, int], list[int]], list[dict]]:
    """{(batch, seq_len): [tree sizes]} to measure (each point once) and the points skipped by --max-tokens."""
    points = {(b, args.seq_len, s) for b in args.batches for s in args.sizes}
    points |= {(1, n, s) for n in args.seq_lens for s in args.seq_sizes}
    groups: dict[tuple[int, int], list[int]] = {}
    skipped = []
    for b, n, s in sorted(points):
        if args.max_tokens is not None and b * s > args.max_tokens:
            skipped.append({"batch": b, "tree_size": s, "seq_len": n})
        else:
            groups.setdefault((b, n), []).append(s)
    return groups, skipped


def tree_inputs(vocab: int, batch: int, size: int, seq_len: int, dtype, device, gen: torch.Generator):
    """Random tokens, position ids and the additive mask (all of the prefix, the chain's part of the tree)."""
    ids = torch.randint(random_token_floor(vocab), vocab - 1, (batch, size), generator=gen).to(device)
    pos = (seq_len + torch.arange(size, device=device)).expand(batch, size)
    bias = chain(size - 1).attention_bias(dtype, device)
    mask = torch.cat([torch.zeros(size, seq_len, dtype=dtype, device=device), bias], 1)
    return ids, pos, mask.expand(batch, 1, size, seq_len + size)


@torch.inference_mode()
def measure_group(model, vocab: int, dtype, device, batch: int, seq_len: int, sizes: list[int], reps: int,
                  gen: torch.Generator, tick=lambda: None) -> dict[int, tuple[float, float, float]]:
    """(median, fastest, slowest) seconds of one forward per tree size over the timed repeats, after a random prefix
    of seq_len tokens in each of batch rows."""
    prefix = torch.randint(random_token_floor(vocab), vocab - 1, (batch, seq_len), generator=gen).to(device)
    cache = DynamicCache(config=model.config)
    kv = cache_kw(model, cache)  # the name the installed transformers takes (5.24: `cache`; 5.17: the old one)
    model(input_ids=prefix, **kv, use_cache=True, logits_to_keep=1)
    shapes = {s: tree_inputs(vocab, batch, s, seq_len, dtype, device, gen) for s in sizes}
    times: dict[int, list[float]] = {s: [] for s in sizes}
    for _ in range(reps + 1):  # the first repeat warms up
        for s, (ids, pos, mask) in shapes.items():
            device_sync(device)
            t0 = time.perf_counter()
            model(input_ids=ids, position_ids=pos, attention_mask=mask, **kv, use_cache=True)
            device_sync(device)
            times[s].append(time.perf_counter() - t0)
            cache.crop(-s)  # back to the prefix: every size sees the same seq_len
            tick()
    return {s: (statistics.median(t[1:]), min(t[1:]), max(t[1:])) for s, t in times.items()}


def measure_grid(bundle, groups: dict[tuple[int, int], list[int]], reps: int) -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    total = sum(len(sizes) for sizes in groups.values()) * (reps + 1)
    rows = []
    with tqdm(total=total, desc="iteration time", unit="fwd", file=sys.stderr) as bar:
        for (batch, seq_len), sizes in groups.items():
            bar.set_postfix(batch=batch, seq_len=seq_len)
            seconds = measure_group(bundle.model, bundle.vocab_size, bundle.dtype, bundle.device, batch, seq_len,
                                    sizes, reps, gen, lambda: bar.update(1))
            rows += [{"batch": batch, "tree_size": s, "seq_len": seq_len, "seconds": med, "min_seconds": lo,
                      "max_seconds": hi} for s, (med, lo, hi) in seconds.items()]
    return rows


def main(argv: list[str]) -> int:
    args, overrides = parser().parse_known_args(argv)
    unknown = [a for a in overrides if a.startswith("-")]
    if unknown or args.reps < 1:
        print(f"error: {f'unknown option {unknown[0]}' if unknown else '--reps must be >= 1'}", file=sys.stderr)
        return 2
    try:
        cfg = compose_config(overrides)
        set_threads(cfg.run)  # run.threads and run.jobs_beside as a run takes them: the machine label says both
        bundle = get_bundle(cfg.model, cfg.paths.model_cache)
        groups, skipped = grid(args)
        longest = max(n + s for (_, n), sizes in groups.items() for s in sizes) if groups else 0
        if longest > bundle.max_context:
            raise HarnessError(f"seq_len + tree size {longest} exceeds {bundle.name}'s context {bundle.max_context}")
        rows = measure_grid(bundle, groups, args.reps)
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else project_path(cfg.paths.results) / OUT
    atomic_write(out, json.dumps({
        "model": bundle.name, "device": str(bundle.device), "machine": machine_id(bundle.device, backend_of(bundle.model)),
        "dtype": str(bundle.dtype).replace("torch.", ""), "reps": args.reps, "statistic": "median",
        "created": datetime.now().isoformat(timespec="seconds"), "rows": rows, "skipped": skipped}, indent=1))
    print(f"iteration time of {bundle.name}: {len(rows)} points ({len(skipped)} skipped) -> {out}")
    return 0


if __name__ == "__main__":
    run_script(main)
