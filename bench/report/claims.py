"""Claims decided from intervals (bench.metrics.verdict), never from the point alone: a paper's speedup over AR."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator

from bench import metrics
from bench.cost.replay import Setting, replayable
from bench.metrics import aggregate_speedup, aggregate_speedup_interval, speedup, speedup_interval
from bench.report.select import paired_baseline
from bench.report.tables import MISSING, with_interval
from bench.run.store import Run

VERDICTS = ("holds", "undecided", "does not hold")


def overall(verdicts) -> str:
    """A claim over cells: "does not hold" when one cell does not, else "undecided" when one is, else "holds"."""
    return "does not hold" if "does not hold" in verdicts else "undecided" if "undecided" in verdicts else "holds"


def per_question(records: list[dict], num: Callable[[dict], float], den: Callable[[dict], float]) -> dict:
    """question_id -> [sum of num(record), sum of den(record)] over its turns."""
    out: dict = defaultdict(lambda: [0, 0])
    for r in records:
        out[r["question_id"]][0] += num(r)
        out[r["question_id"]][1] += den(r)
    return out


def sums_interval(per: dict, num: int = 0, den: int = 1, guard: bool = True) -> list[float] | None:
    """95% interval of sum per[q][num] / sum per[q][den] over questions q (per_question's, say), the questions
    resampled; None without questions or, with `guard`, where a question's den is not positive."""
    qs = sorted(per, key=str)
    if not qs or (guard and any(per[q][den] <= 0 for q in qs)):
        return None
    return metrics.bootstrap_interval([[per[q][num] for q in qs], [per[q][den] for q in qs]], metrics.ratio_of_sums)


def paired_ratio_interval(a: dict, b: dict) -> list[float] | None:
    """95% interval of a's sum num / sum den over b's (per_question), the questions of both resampled together."""
    qs = sorted(set(a) & set(b), key=str)
    lists = [[x[q][i] for q in qs] for x in (a, b) for i in (0, 1)]
    return metrics.bootstrap_interval(lists, metrics.ratio_of_rates) if qs else None


def with_baselines(used: list[Run], runs: Iterable[Run], baseline: str = "ar", setting: Setting | None = None,
                   skipped: list[tuple[Run, str]] | None = None) -> Iterator[tuple[Run, Run]]:
    """Each of `runs` with its paired `baseline` run among `used`, those without one left out; with a setting, only
    those it replays: every target forward timed. `skipped` gets (run, "untimed") for the runs a setting leaves
    out."""
    skipped = [] if skipped is None else skipped
    for run in runs:
        base = paired_baseline(used, run, baseline)
        if base is None:
            continue
        if setting is not None and not replayable(run.records + base.records):
            skipped.append((run, "untimed"))
            continue
        yield run, base


def paired_speedups(claimed: tuple[str, ...], used: list[Run], setting: Setting | None = None
                    ) -> list[tuple[float | None, list[float] | None]]:
    """(speedup, interval) of each run of the `claimed` methods over its AR baseline among `used`; with a setting,
    both replayed on it. At batch > 1 the tables' aggregate tokens/s (per-row rates share a batch's time)."""
    out = []
    for run, base in with_baselines(used, [r for r in used if r.method in claimed], "ar", setting):
        mine, theirs = ((setting.run_replayed(run), setting.run_replayed(base)) if setting is not None
                        else (run.records, base.records))
        ratio, interval = ratio_of(run.batch_size > 1)
        out.append((ratio(mine, theirs), interval(mine, theirs)))
    return out


def ratio_of(aggregate: bool) -> tuple[Callable, Callable]:
    """(speedup, its paired interval) over records: of aggregate rates (batch > 1: rows share a batch's time), or of
    mean per-question rates (Spec-Bench's)."""
    return (aggregate_speedup, aggregate_speedup_interval) if aggregate else (speedup, speedup_interval)


def speed_ratios(run: Run | None, base: Run | None, aggregate: bool = True
                 ) -> tuple[float | None, list[float] | None]:
    """run over base on the questions of both (aggregate rates, or mean per-question rates: Spec-Bench's) and its
    paired 95% interval; (None, None) without one of them."""
    if run is None or base is None:
        return None, None
    ratio, interval = ratio_of(aggregate)
    return ratio(run.records, base.records), interval(run.records, base.records)


def speedup_claim(claimed: tuple[str, ...], used: list[Run], setting: Setting | None = None) -> str:
    """"faster than AR: holds in 2, undecided in 1 of 3 (lowest 0.91 [0.85, 0.97]; highest ...)"; MISSING when no
    run of the `claimed` methods has its AR baseline; with a setting, projected on it."""
    found = [(p, ci) for p, ci in paired_speedups(claimed, used, setting) if p is not None]
    if not found:
        return MISSING
    counts = Counter(metrics.verdict(ci, 1.0) for _, ci in found)
    tally = ", ".join(f"{v} in {counts[v]}" for v in VERDICTS if counts[v])
    lo, hi = min(found, key=lambda x: x[0]), max(found, key=lambda x: x[0])
    span = (f"{with_interval(*lo)}" if len(found) == 1
            else f"lowest {with_interval(*lo)}; highest {with_interval(*hi)}")
    methods = "/".join(claimed)
    return f"{methods} faster than AR: {tally} of {len(found)} ({span})"
