"""Claims decided from intervals (bench.run.metrics.verdict), never from the point alone.

`speedup_claim`: every paper claims its method decodes faster than AR; on the runs one artifact used, each run of
the paper's method (its package's CLAIMED) is paired with its AR baseline among those runs (same model,
dataset, temperature, max_new_tokens, batch size and machine; bench.report.select.paired_baseline) and the paired
bootstrap interval of its speedup (at batch > 1 of aggregate tokens/s, as the tables) decides "holds" (all above
1), "does not hold" (all below) or "undecided".
`claim_cell` is one such verdict with its point and interval, as a table cell.
"""

from __future__ import annotations

import importlib
from collections import Counter

from bench.cost.replay import Setting, replayable
from bench.report.select import paired_baseline
from bench.report.tables import MISSING, with_interval
from bench.run.metrics import (
    aggregate_speedup,
    aggregate_speedup_interval,
    speedup,
    speedup_interval,
    verdict,
)
from bench.run.store import Run

VERDICTS = ("holds", "undecided", "does not hold")


def claim_cell(point: float | None, interval: list[float] | None, threshold: float = 1.0,
               higher: bool = True) -> str:
    """"holds (2.31 [2.10, 2.52])": the verdict from the interval, then the point and interval."""
    return f"{verdict(interval, threshold, higher)} ({with_interval(point, interval)})"


def claimed(paper: str) -> tuple[str, ...]:
    """The paper's own method(s), whose speedup over AR is the claim every artifact of the paper is checked against."""
    return importlib.import_module(f"bench.report.{paper}").CLAIMED


def paired_speedups(paper: str, used: list[Run], setting: Setting | None = None
                    ) -> list[tuple[float | None, list[float] | None]]:
    """(speedup, interval) of each run of the paper's method against its AR baseline among `used`; with a
    setting, both replayed on it (batch 1 only: bench.cost.replay)."""
    out = []
    for run in used:
        if run.method not in claimed(paper):
            continue
        base = paired_baseline(used, run, "ar")
        if base is None or (setting is not None and (run.batch_size > 1 or not replayable(run.records + base.records))):
            continue
        if setting is not None:
            mine, theirs = setting.replayed(run.records), setting.replayed(base.records)
            out.append((speedup(mine, theirs), speedup_interval(mine, theirs)))
        else:  # at batch > 1 the tables' aggregate tokens/s (per-row rates share a batch's time)
            batched = run.batch_size > 1
            out.append((speed_ratio(run, base, batched), speed_ratio_interval(run, base, batched)))
    return out


def speed_ratio(run: Run | None, base: Run | None, aggregate: bool = True) -> float | None:
    """run over base on the questions of both: aggregate rates, or mean per-question rates (Spec-Bench's)."""
    if run is None or base is None:
        return None
    return (aggregate_speedup if aggregate else speedup)(run.records, base.records)


def speed_ratio_interval(run: Run | None, base: Run | None, aggregate: bool = True) -> list[float] | None:
    """speed_ratio's 95% interval, paired over the questions of both runs (bench.run.metrics)."""
    if run is None or base is None:
        return None
    return (aggregate_speedup_interval if aggregate else speedup_interval)(run.records, base.records)


def speedup_claim(paper: str, used: list[Run], setting: Setting | None = None) -> str:
    """"faster than AR: holds in 2, undecided in 1 of 3 (lowest 0.91 [0.85, 0.97]; highest ...)", or MISSING
    when no run of the paper's method has its AR baseline among the runs; with a setting, projected on it."""
    found = [(p, ci) for p, ci in paired_speedups(paper, used, setting) if p is not None]
    if not found:
        return MISSING
    counts = Counter(verdict(ci, 1.0) for _, ci in found)
    tally = ", ".join(f"{v} in {counts[v]}" for v in VERDICTS if counts[v])
    lo, hi = min(found, key=lambda x: x[0]), max(found, key=lambda x: x[0])
    span = (f"{with_interval(*lo)}" if len(found) == 1
            else f"lowest {with_interval(*lo)}; highest {with_interval(*hi)}")
    methods = "/".join(claimed(paper))
    return f"{methods} faster than AR: {tally} of {len(found)} ({span})"
