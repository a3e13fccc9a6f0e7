"""Table 3's two claims decided from paired bootstrap intervals over questions (bench.run.metrics), not points.

- `reuse_verdict`: at each lambda measured for both, reuse (both reuses, no Pre-cut) over vanilla SD: the ratio of
  Eq. 3 utilisations (new tokens / draft calls) and of MATs, questions resampled together in both runs. A lambda
  holds when utilisation's ratio is wholly above 1 and MAT's wholly above MAT_TOLERANCE; it does not when
  either is wholly on the other side. The claim holds when every lambda does, does not when one does not.
- `ordering_verdict` (Figure 4): Q_updated's utilisation (accepted / drafted) over Q_init's and Q_init's over
  vanilla SD's, paired on the questions; holds when both ratios are wholly above 1.
- `flatten_interval`: the spread of speedups over lambda ((max - min) / max), reuse only minus with Pre-cut, every
  run and its AR baseline resampled on the same questions; holds when the difference's interval is above 0.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from bench.run.metrics import bootstrap_interval, question_rates, ratio_of_rates, verdict
from bench.run.store import Run

MAT_TOLERANCE = 0.99  # "equal MAT": within 1%


def sums(run: Run, den: str) -> dict:
    """question_id -> (new tokens, draft calls or steps) over its turns."""
    out: dict = defaultdict(lambda: [0.0, 0.0])
    for r in run.records:
        out[r["question_id"]][0] += r["new_tokens"]
        out[r["question_id"]][1] += (sum((r.get("counters") or {}).get("draft_calls") or []) if den == "calls"
                                     else len(r["accept_lengths"]))
    return out


def ratio_interval(a: Run, b: Run, den: str) -> list[float] | None:
    """Paired interval of (tokens / den) of a over that of b, over the questions of both."""
    sa, sb = sums(a, den), sums(b, den)
    qs = sorted(set(sa) & set(sb), key=str)
    if not qs or any(sa[q][1] <= 0 or sb[q][1] <= 0 for q in qs):
        return None
    return bootstrap_interval([[sa[q][0] for q in qs], [sa[q][1] for q in qs],
                               [sb[q][0] for q in qs], [sb[q][1] for q in qs]], ratio_of_rates)


def reuse_verdict(pairs: dict[int, tuple[Run, Run]]) -> tuple[str, list[str]]:
    """pairs: lambda -> (sd run, reuse run). (verdict, per-lambda texts)."""
    found, texts = [], []
    for n, (sd, reuse) in sorted(pairs.items()):
        util, mat = ratio_interval(reuse, sd, "calls"), ratio_interval(reuse, sd, "steps")
        u, m = verdict(util, 1.0), verdict(mat, MAT_TOLERANCE)
        v = "does not hold" if "does not hold" in (u, m) else "holds" if u == m == "holds" else "undecided"
        found.append(v)
        texts.append(f"lambda {n}: {v}, util ratio {fmt_ci(util)}, MAT ratio {fmt_ci(mat)}")
    overall = "does not hold" if "does not hold" in found else "undecided" if "undecided" in found else "holds"
    return overall, texts


def fmt_ci(ci: list[float] | None) -> str:
    return "—" if ci is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def spread_difference(*rates, axis=-1):
    """rates: k reuse runs, their k AR bases, k Pre-cut runs, their k bases (questions on the last axis)."""
    k = len(rates) // 4
    reuse = np.stack([rates[i].mean(axis) / rates[k + i].mean(axis) for i in range(k)])
    cut = np.stack([rates[2 * k + i].mean(axis) / rates[3 * k + i].mean(axis) for i in range(k)])

    def spread(s):
        return (s.max(0) - s.min(0)) / s.max(0)

    return spread(reuse) - spread(cut)


def flatten_interval(reuse: list[tuple[Run, Run]], cut: list[tuple[Run, Run]]) -> list[float] | None:
    """Interval of (reuse-only spread - Pre-cut spread); reuse and cut: (run, AR base) per common lambda."""
    runs = [r for r, _ in reuse] + [b for _, b in reuse] + [r for r, _ in cut] + [b for _, b in cut]
    rates = [question_rates(r.records) for r in runs]
    qs = sorted(set.intersection(*(set(x) for x in rates)), key=str)
    if len(qs) < 2:
        return None
    return bootstrap_interval([[x[q] for q in qs] for x in rates], spread_difference)


def counter_ratio_interval(a: Run, b: Run, num: str, den: str) -> list[float] | None:
    """Paired interval of (sum num / sum den counters) of a over b's, over the questions of both."""
    def per_question(run: Run) -> dict:
        out: dict = defaultdict(lambda: [0.0, 0.0])
        for r in run.records:
            c = r.get("counters") or {}
            out[r["question_id"]][0] += sum(c.get(num) or [])
            out[r["question_id"]][1] += sum(c.get(den) or [])
        return out

    sa, sb = per_question(a), per_question(b)
    qs = sorted(set(sa) & set(sb), key=str)
    if not qs or sum(sa[q][1] for q in qs) <= 0 or sum(sb[q][1] for q in qs) <= 0:
        return None
    return bootstrap_interval([[sa[q][0] for q in qs], [sa[q][1] for q in qs],
                               [sb[q][0] for q in qs], [sb[q][1] for q in qs]], ratio_of_rates)


def ordering_verdict(vanilla: Run, q_init: Run, q_updated: Run) -> str:
    """"holds (...)": Q_updated > Q_init > vanilla SD in utilisation, from the two paired ratio intervals."""
    top = counter_ratio_interval(q_updated, q_init, "accepted_draft", "draft_tokens")
    low = counter_ratio_interval(q_init, vanilla, "accepted_draft", "draft_tokens")
    found = (verdict(top, 1.0), verdict(low, 1.0))
    v = "does not hold" if "does not hold" in found else "holds" if found == ("holds", "holds") else "undecided"
    return f"{v} (utilisation ratios: Q_updated / Q_init {fmt_ci(top)}, Q_init / vanilla {fmt_ci(low)})"
