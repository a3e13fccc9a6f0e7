"""Table 3's and Figure 4's claims decided from paired bootstrap intervals over questions, not from points."""

from __future__ import annotations

import numpy as np

from bench.metrics import bootstrap_interval, question_rates, verdict
from bench.report.claims import overall, paired_ratio_interval, per_question
from bench.report.holistic.common import counted
from bench.report.tables import fmt_ci
from bench.run.store import Run

MAT_TOLERANCE = 0.99  # "equal MAT": within 1%


def ratio_interval(a: Run, b: Run, num, den, each: bool = True) -> list[float] | None:
    """Paired interval of (sum num(record) / sum den(record)) of a over b's, over the questions of both; None where
    a question's den (`each`), else the den summed over them, is not positive in a or b."""
    sa, sb = (per_question(x.records, num, den) for x in (a, b))
    qs = set(sa) & set(sb)
    dens = [[x[q][1] for q in qs] for x in (sa, sb)]
    if not qs or any((min(d) if each else sum(d)) <= 0 for d in dens):
        return None
    return paired_ratio_interval(sa, sb)


def reuse_verdict(pairs: dict[int, tuple[Run, Run]]) -> tuple[str, list[str]]:
    """Reuse over vanilla SD at each lambda (pairs: lambda -> (sd run, reuse run)): holds when the ratio of Eq. 3
    utilisations is wholly above 1 and of MATs wholly above MAT_TOLERANCE. (verdict, per-lambda texts)."""
    found, texts = [], []
    for n, (sd, reuse) in sorted(pairs.items()):
        util = ratio_interval(reuse, sd, lambda r: r["new_tokens"], counted("draft_calls"))
        mat = ratio_interval(reuse, sd, lambda r: r["new_tokens"], lambda r: len(r["accept_lengths"]))
        v = overall((verdict(util, 1.0), verdict(mat, MAT_TOLERANCE)))
        found.append(v)
        texts.append(f"lambda {n}: {v}, util ratio {fmt_ci(util)}, MAT ratio {fmt_ci(mat)}")
    return overall(found), texts


def spread_difference(*rates, axis=-1):
    """rates: k reuse runs, their k AR bases, k Pre-cut runs, their k bases (questions on the last axis)."""
    k = len(rates) // 4
    reuse, cut = (np.stack([rates[o + i].mean(axis) / rates[o + k + i].mean(axis) for i in range(k)]) for o in (0, 2 * k))
    return (reuse.max(0) - reuse.min(0)) / reuse.max(0) - (cut.max(0) - cut.min(0)) / cut.max(0)


def flatten_interval(reuse: list[tuple[Run, Run]], cut: list[tuple[Run, Run]]) -> list[float] | None:
    """Interval of the spread of speedups over lambda ((max - min) / max), reuse only minus with Pre-cut; reuse and
    cut: (run, AR base) per common lambda, every run resampled on the same questions."""
    runs = [r for r, _ in reuse] + [b for _, b in reuse] + [r for r, _ in cut] + [b for _, b in cut]
    rates = [question_rates(r.records) for r in runs]
    qs = sorted(set.intersection(*(set(x) for x in rates)), key=str)
    if len(qs) < 2:
        return None
    return bootstrap_interval([[x[q] for q in qs] for x in rates], spread_difference)


def ordering_verdict(vanilla: Run, q_init: Run, q_updated: Run) -> str:
    """"holds (...)": Q_updated > Q_init > vanilla SD in utilisation, from the two paired ratio intervals."""
    accepted, drafted = counted("accepted_draft"), counted("draft_tokens")
    top = ratio_interval(q_updated, q_init, accepted, drafted, each=False)
    low = ratio_interval(q_init, vanilla, accepted, drafted, each=False)
    v = overall((verdict(top, 1.0), verdict(low, 1.0)))
    return f"{v} (utilisation ratios: Q_updated / Q_init {fmt_ci(top)}, Q_init / vanilla {fmt_ci(low)})"
