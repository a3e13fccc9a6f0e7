"""What a verification's logits cost this CPU's allocator a step: the time to allocate and fill a tensor of
[rows, slots, vocabulary] fp32 logits (its pages faulted in) and the time to free it, per size, repeated; with
`--keep` after `keep_freed_blocks` (glibc keeps freed blocks for reuse, as a GPU's caching
allocator does), else with glibc's defaults, which unmap a freed block over 32 MB at once
(evidence/projection/cpu_allocator/).

    python -m bench.perf.free_cost [--keep] [--out FILE]
"""

from __future__ import annotations

import ctypes
import json
import time

import numpy as np
import torch

from bench.cachefile import atomic_write
from bench.cli import OneLineParser
from bench.core.machine import machine_id
from bench.paths import project_path

VOCAB = 49152  # the embedded model's
SHAPES = ((1, 65), (4, 65), (8, 65), (16, 65), (1, 769))  # (rows, slots): Medusa's tree at batch 1-16; DySpec's 768
REPEATS = 7


def keep_freed_blocks() -> bool:
    """glibc's malloc from here on serves every block from its heap (M_MMAP_MAX 0) and never trims it (M_TRIM_THRESHOLD
    at its maximum), so a freed block is reused, not unmapped; False where the C library is not glibc."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # no libc.so.6 (macOS), or one without mallopt
        return False
    m_trim_threshold, m_mmap_max = -1, -4  # malloc.h
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, 2**31 - 1))


def timed(rows: int, slots: int) -> tuple[list[float], list[float]]:
    """(alloc + fill ms, free ms) per repeat, the first (the block's first use) included."""
    fill, free = [], []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        x = torch.empty(rows, slots, VOCAB)
        x.fill_(1.0)
        t1 = time.perf_counter()
        del x
        t2 = time.perf_counter()
        fill.append(1000 * (t1 - t0))
        free.append(1000 * (t2 - t1))
    return fill, free


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep freed blocks for reuse first (keep_freed_blocks)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    kept = keep_freed_blocks() if args.keep else False
    rows = []
    for b, n in SHAPES:
        fill, free = timed(b, n)
        rows.append({"rows": b, "slots": n, "mb": round(b * n * VOCAB * 4 / 1e6, 1),
                     "fill_ms_median": round(float(np.median(fill)), 3), "fill_ms": [round(v, 3) for v in fill],
                     "free_ms_median": round(float(np.median(free)), 3), "free_ms": [round(v, 3) for v in free]})
        print(f"{b:>2} x {n:>3} slots ({rows[-1]['mb']:>6} MB): alloc + fill {rows[-1]['fill_ms_median']:8.3f} ms, "
              f"free {rows[-1]['free_ms_median']:7.3f} ms (medians of {REPEATS})")
    out = {"machine": machine_id("cpu"), "torch": torch.__version__, "freed_blocks_kept": kept, "shapes": rows}
    if args.out:
        atomic_write(project_path(args.out), json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
