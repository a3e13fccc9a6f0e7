"""The one place where raw per-step records become metrics (Spec-Bench definitions, named explicitly).

A record is one prompt-turn: question_id, group, new_tokens, wall_time, accept_lengths (tokens committed
per target forward, prefill's first token included as a step of 1), phase_times, lossless.

- mat: mean accepted tokens per target forward, bonus token included, pooled over all steps of all
  records (step-weighted, as Spec-Bench's speed.py). AR is 1.00 by construction.
- accepted_draft_mean: mat - 1 (gpt-fast's "mean accepted"; drafts only).
- tokens_per_s.mean_of_questions: mean over questions of (sum tokens / sum wall time over its turns), as
  Spec-Bench; tokens_per_s.total: all tokens / all wall time.
- speedup: ratio of mean_of_questions rates (method / baseline), as Spec-Bench's speed.py. Both sides
  count tokens the same way (the engine's committed ids), unlike Spec-Bench's re-tokenized baseline.
- overhead_share: share of timed wall time outside model forwards (prefill, target_forward); None for
  methods timed as one opaque phase (HF generate).
"""

from __future__ import annotations

from collections import defaultdict

from bench.core.timing import MODEL_PHASES


def mat(records: list[dict]) -> float | None:
    steps = [a for r in records for a in r["accept_lengths"]]
    return sum(steps) / len(steps) if steps else None


def question_rates(records: list[dict]) -> dict:
    """question_id -> tokens/s over all its turns."""
    tokens, wall = defaultdict(int), defaultdict(float)
    for r in records:
        tokens[r["question_id"]] += r["new_tokens"]
        wall[r["question_id"]] += r["wall_time"]
    return {q: tokens[q] / wall[q] for q in tokens if wall[q] > 0}


def tokens_per_s(records: list[dict]) -> dict:
    rates = question_rates(records)
    wall = sum(r["wall_time"] for r in records)
    return {
        "mean_of_questions": sum(rates.values()) / len(rates) if rates else None,
        "total": sum(r["new_tokens"] for r in records) / wall if wall > 0 else None,
    }


def phase_totals(records: list[dict]) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for r in records:
        for k, v in r["phase_times"].items():
            totals[k] += v
    return dict(totals)


def overhead_share(records: list[dict]) -> float | None:
    totals = phase_totals(records)
    if not totals or "generate" in totals:
        return None
    timed = sum(totals.values())
    model = sum(totals.get(p, 0.0) for p in MODEL_PHASES)
    return (timed - model) / timed if timed > 0 else None


def speedup(records: list[dict], baseline: list[dict]) -> float | None:
    """Ratio of mean per-question tokens/s; only questions present in both runs are compared."""
    mine, base = question_rates(records), question_rates(baseline)
    common = sorted(set(mine) & set(base), key=str)
    if not common:
        return None
    return (sum(mine[q] for q in common) / len(common)) / (sum(base[q] for q in common) / len(common))


def summarize(records: list[dict]) -> dict:
    m = mat(records)
    totals = phase_totals(records)
    wall = sum(r["wall_time"] for r in records)
    checked = [r["lossless"] for r in records if r.get("lossless") is not None]
    return {
        "n_questions": len({r["question_id"] for r in records}),
        "n_turns": len(records),
        "new_tokens": sum(r["new_tokens"] for r in records),
        "steps": sum(len(r["accept_lengths"]) for r in records),
        "mat": m,
        "accepted_draft_mean": None if m is None else m - 1,
        "tokens_per_s": tokens_per_s(records),
        "wall_time": wall,
        "phase_times": totals,
        "phase_share": {k: v / wall for k, v in totals.items()} if wall > 0 else {},
        "phase_sum_over_wall": sum(totals.values()) / wall if wall > 0 else None,
        "overhead_share": overhead_share(records),
        "lossless": {
            "checked": len(checked),
            "equal": sum(1 for c in checked if c["equal"]),
            "first_divergences": [c["first_divergence"] for c in checked if not c["equal"]],
        },
    }


def by_group(records: list[dict]) -> dict[str, dict]:
    groups: dict[str, list] = defaultdict(list)
    for r in records:
        groups[r.get("group") or r.get("category") or "all"].append(r)
    return {g: summarize(rs) for g, rs in groups.items()}


def first_divergence(output: list[int], reference: list[int]) -> int | None:
    """Index of the first differing token (length mismatch counts), None when identical."""
    for i, (a, b) in enumerate(zip(output, reference)):
        if a != b:
            return i
    return None if len(output) == len(reference) else min(len(output), len(reference))
