"""The one place where raw per-step records become metrics (Spec-Bench definitions, named explicitly).

A record is one prompt-turn: question_id, group, new_tokens, wall_time, accept_lengths (tokens committed
per target forward, prefill's first token included as a step of 1), phase_times, lossless.

- mat: mean accepted tokens per target forward, bonus token included, pooled over all steps of all
  records (step-weighted, as Spec-Bench's speed.py). AR is 1.00 by construction.
- accepted_draft_mean: mat - 1 (gpt-fast's "mean accepted"; drafts only).
- verification_mat: mat over verification steps only (each record's prefill step and its last, which EOS or the
  token limit may have cut, left out): the quantity a
  tree builder's predicted MAT estimates (methods/shared/trees/static.py). Not in `summarize`; the tree=auto
  report shows it.
- tokens_per_s.mean_of_questions: mean over questions of (sum tokens / sum wall time over its turns), as
  Spec-Bench; tokens_per_s.total: all tokens / all wall time.
- speedup: ratio of mean_of_questions rates (method / baseline), as Spec-Bench's speed.py. Both sides
  count tokens the same way (the engine's committed ids), unlike Spec-Bench's re-tokenized baseline.
- overhead_share: share of timed wall time outside model forwards (prefill, target_forward); None for
  methods timed as one opaque phase (HF generate).
- acceptance_by_depth[d-1]: share of verification steps (prefill and last excluded, as above) whose accepted path reaches
  depth d, i.e. that committed at least d drafts (per-position acceptance of a chain; of a tree's depth).

Uncertainty: a 95% interval from a bootstrap over questions (the unit a paper samples), the questions resampled
with replacement and the statistic recomputed (scipy.stats.bootstrap, percentile method, fixed seed, so an
interval is reproducible): `mat_interval`, `rate_interval` (mean_of_questions) and `speedup_interval`, paired: a
method and its baseline are resampled on the same questions, so what both find hard does not widen the ratio's
interval; `aggregate_speedup_interval` the same for the ratio of aggregate rates (ProPD's batches), each question
carrying an equal share of its batch's wall time; `phase_share_interval` a phase share (batch 1 only). `verdict`
decides a claim from an interval, never from the point alone.

At run.batch_size > 1 (records carry a `batch`): a record's wall_time is its row's latency (batch start until
the row left the batch) and the batch's wall time, phase times and occupancy are kept once per batch.
- throughput.aggregate_tokens_per_s: all new tokens / all batch wall time (what a server delivers);
- throughput.per_sequence_tokens_per_s: mean over rows of new tokens / the row's latency (what a user sees).
tokens_per_s.total is the aggregate rate and tokens_per_s.mean_of_questions the per-sequence one; at batch 1
the two pairs coincide with the definitions above.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from math import fsum  # sums of times exactly rounded: sum() of floats rounds otherwise from Python 3.12 on

from bench.core.timing import MODEL_PHASES

LEVEL = 0.95  # confidence level of every interval
RESAMPLES = 2000


def mat(records: list[dict]) -> float | None:
    steps = [a for r in records for a in r["accept_lengths"]]
    return sum(steps) / len(steps) if steps else None


def whole_steps(record: dict) -> list[int]:
    """A record's verification steps that were not cut: [0] is the prefill's token, and the last step may have been
    cut by EOS or the token limit (a chain that accepted everything would look rejected there)."""
    return record["accept_lengths"][1:-1]


def verification_mat(records: list[dict]) -> float | None:
    return mat([{"accept_lengths": whole_steps(r)} for r in records])


def question_rates(records: list[dict]) -> dict:
    """question_id -> tokens/s over all its turns."""
    tokens, wall = defaultdict(int), defaultdict(float)
    for r in records:
        tokens[r["question_id"]] += r["new_tokens"]
        wall[r["question_id"]] += r["wall_time"]
    return {q: tokens[q] / wall[q] for q in tokens if wall[q] > 0}


def batch_key(batch: dict) -> tuple:
    """A batch's identity among a run's records: its id with its wall time. A run resumed before f9d8143 could give
    a new batch a saved batch's id (ProPD Table 2's layer-4 top-100 run holds two batches 3)."""
    return batch["id"], batch["wall_time"]


def timed_regions(records: list[dict]) -> list[dict]:
    """The timed regions (wall_time, phase_times): one per record at batch 1, one per batch otherwise."""
    batches = {batch_key(r["batch"]): r["batch"] for r in records if r.get("batch")}
    return list(batches.values()) if batches else records


def tokens_per_s(records: list[dict]) -> dict:
    rates = question_rates(records)
    wall = fsum(r["wall_time"] for r in timed_regions(records))
    return {
        "mean_of_questions": fsum(rates.values()) / len(rates) if rates else None,
        "total": sum(r["new_tokens"] for r in records) / wall if wall > 0 else None,
    }


def phase_totals(records: list[dict]) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for r in timed_regions(records):
        for k, v in r["phase_times"].items():
            totals[k] += v
    return dict(totals)


def overhead_share(records: list[dict]) -> float | None:
    totals = phase_totals(records)
    if not totals or "generate" in totals:
        return None
    timed = fsum(totals.values())
    model = fsum(totals.get(p, 0.0) for p in MODEL_PHASES)
    return (timed - model) / timed if timed > 0 else None


def aggregate_speedup(records: list[dict], baseline: list[dict]) -> float | None:
    """Ratio of aggregate throughputs (all tokens / all timed wall time), over the questions in both runs. Each
    question carries its share of its batch's wall time (attributed_wall): when the runs share only some of their
    questions, a whole batch's time must not be charged to the few of its rows that are compared (with every
    question shared, the shares add up to the batches' wall time)."""
    common = {r["question_id"] for r in records} & {r["question_id"] for r in baseline}

    def rate(rs: list[dict]) -> float | None:
        wall = attributed_wall(rs)
        time = fsum(wall[q] for q in common)
        return sum(r["new_tokens"] for r in rs if r["question_id"] in common) / time if time > 0 else None

    mine, base = rate(records), rate(baseline)
    return mine / base if mine and base else None


def speedup(records: list[dict], baseline: list[dict]) -> float | None:
    """Ratio of mean per-question tokens/s; only questions present in both runs are compared."""
    mine, base = question_rates(records), question_rates(baseline)
    common = sorted(set(mine) & set(base), key=str)
    if not common:
        return None
    return (fsum(mine[q] for q in common) / len(common)) / (fsum(base[q] for q in common) / len(common))


def bootstrap_interval(samples: list[list[float]], statistic) -> list[float] | None:
    """[low, high] of `statistic(*samples, axis)` under a paired bootstrap of the samples' common index (one
    entry per question); None with fewer than 2 questions. A statistic that never varies gives [v, v]."""
    import numpy as np
    from scipy.stats import bootstrap

    data = [np.asarray(x, dtype=float) for x in samples]
    if len(data[0]) < 2:
        return None
    point = float(statistic(*data, axis=-1))
    if all(np.all(x == x[0]) for x in data):
        return [point, point]
    res = bootstrap(data, statistic, paired=True, vectorized=True, axis=-1, confidence_level=LEVEL,
                    n_resamples=RESAMPLES, method="percentile", rng=np.random.default_rng(0))
    return [float(res.confidence_interval.low), float(res.confidence_interval.high)]


def ratio_of_sums(num, den, axis=-1):
    return num.sum(axis) / den.sum(axis)


def ratio_of_means(num, den, axis=-1):
    return num.mean(axis) / den.mean(axis)


def mean(x, axis=-1):
    return x.mean(axis)


def mat_interval(records: list[dict]) -> list[float] | None:
    """MAT pooled over steps (as `mat`), questions resampled with all their steps."""
    tokens, steps = defaultdict(int), defaultdict(int)
    for r in records:
        tokens[r["question_id"]] += sum(r["accept_lengths"])
        steps[r["question_id"]] += len(r["accept_lengths"])
    qs = sorted(tokens, key=str)
    return bootstrap_interval([[tokens[q] for q in qs], [steps[q] for q in qs]], ratio_of_sums)


def rate_interval(records: list[dict]) -> list[float] | None:
    """tokens_per_s.mean_of_questions."""
    rates = question_rates(records)
    return bootstrap_interval([[rates[q] for q in sorted(rates, key=str)]], mean)


def speedup_interval(records: list[dict], baseline: list[dict]) -> list[float] | None:
    """`speedup`, paired over the questions in both runs."""
    mine, base = question_rates(records), question_rates(baseline)
    common = sorted(set(mine) & set(base), key=str)
    return bootstrap_interval([[mine[q] for q in common], [base[q] for q in common]], ratio_of_means)


def phase_share_interval(records: list[dict], phases, of_phase_sum: bool = False) -> list[float] | None:
    """Share of the timed wall time (of the summed phase times with `of_phase_sum`) spent in `phases` (phase_share
    summed over them), questions resampled with their time in those phases and their wall time. None at batch > 1:
    a batch's phase times are kept once per batch and cannot be split by question."""
    if any(r.get("batch") for r in records):
        return None
    spent, wall = defaultdict(float), defaultdict(float)
    for r in records:
        spent[r["question_id"]] += fsum(r["phase_times"].get(p, 0.0) for p in phases)
        wall[r["question_id"]] += fsum(r["phase_times"].values()) if of_phase_sum else r["wall_time"]
    qs = sorted(wall, key=str)
    if any(wall[q] <= 0 for q in qs):
        return None
    return bootstrap_interval([[spent[q] for q in qs], [wall[q] for q in qs]], ratio_of_sums)


def attributed_wall(records: list[dict]) -> dict:
    """question_id -> its share of the timed wall time: a record's own at batch 1, an equal share of its batch's
    at batch > 1 (the shares of a batch's rows add up to the batch's wall time)."""
    wall: dict = defaultdict(float)
    for r in records:
        b = r.get("batch")
        wall[r["question_id"]] += b["wall_time"] / b["size"] if b else r["wall_time"]
    return wall


def aggregate_speedup_interval(records: list[dict], baseline: list[dict]) -> list[float] | None:
    """`aggregate_speedup`'s interval, paired over the questions of both runs: each question carries its tokens and
    its share of its batch's wall time (attributed_wall), and the ratio of aggregate rates is recomputed."""
    wall_a, wall_b = attributed_wall(records), attributed_wall(baseline)
    tok_a, tok_b = defaultdict(int), defaultdict(int)
    for r in records:
        tok_a[r["question_id"]] += r["new_tokens"]
    for r in baseline:
        tok_b[r["question_id"]] += r["new_tokens"]
    common = sorted(set(tok_a) & set(tok_b), key=str)
    if any(wall_a[q] <= 0 or wall_b[q] <= 0 for q in common):
        return None
    return bootstrap_interval([[tok_a[q] for q in common], [wall_a[q] for q in common],
                               [tok_b[q] for q in common], [wall_b[q] for q in common]], ratio_of_rates)


def aggregate_rate_interval(records: list[dict]) -> list[float] | None:
    """tokens_per_s.total's interval: questions resampled with their tokens and their share of the wall time."""
    wall, tokens = attributed_wall(records), defaultdict(int)
    for r in records:
        tokens[r["question_id"]] += r["new_tokens"]
    qs = sorted(tokens, key=str)
    if any(wall[q] <= 0 for q in qs):  # a question timed at 0 s has no rate (speedup_interval's rule)
        return None
    return bootstrap_interval([[tokens[q] for q in qs], [wall[q] for q in qs]], ratio_of_sums)


def ratio_of_rates(tok_a, wall_a, tok_b, wall_b, axis=-1):
    return (tok_a.sum(axis) / wall_a.sum(axis)) / (tok_b.sum(axis) / wall_b.sum(axis))


def verdict(interval: list[float] | None, threshold: float, higher: bool = True) -> str:
    """"holds" when the whole interval is on the claimed side of `threshold` (above it when `higher`), "does
    not hold" when it is wholly on the other side, else (or without an interval) "undecided"."""
    if interval is None:
        return "undecided"
    low, high = interval if higher else (-interval[1], -interval[0])
    t = threshold if higher else -threshold
    return "holds" if low > t else "does not hold" if high < t else "undecided"


def acceptance_by_depth(records: list[dict]) -> list[float]:
    steps = [a for r in records for a in whole_steps(r)]
    deepest = max(steps, default=1) - 1
    return [sum(1 for a in steps if a - 1 >= d) / len(steps) for d in range(1, deepest + 1)]


def throughput(records: list[dict]) -> dict:
    regions = timed_regions(records)
    wall = fsum(r["wall_time"] for r in regions)
    rows = [r["new_tokens"] / r["wall_time"] for r in records if r["wall_time"] > 0]
    return {
        "batch_size": max((r["batch"]["size"] for r in records if r.get("batch")), default=1),
        "aggregate_tokens_per_s": sum(r["new_tokens"] for r in records) / wall if wall > 0 else None,
        "per_sequence_tokens_per_s": fsum(rows) / len(rows) if rows else None,
        "batch_wall_time": wall,
        "mean_occupancy": (fsum(sum(b["occupancy"]) / len(b["occupancy"]) for b in regions) / len(regions)
                           if regions and regions[0].get("occupancy") else None),
    }


def tree_nodes(records: list[dict]) -> dict:
    """Mean draft nodes per verification and the share of them a pruning forward dropped (ProPD's prune rate:
    1 - verified / drafted over all steps); None for methods that do not decode through the engine."""
    drafted = sum(sum(r.get("draft_nodes") or []) for r in records)
    verified = sum(sum(r.get("verified_nodes") or []) for r in records)
    steps = sum(len(r.get("draft_nodes") or []) for r in records)
    if steps == 0:
        return {"draft_nodes_mean": None, "prune_rate": None}
    return {"draft_nodes_mean": drafted / steps, "prune_rate": 1 - verified / drafted if drafted else 0.0}


def counter_totals(records: list[dict]) -> dict[str, float]:
    """Each proposer counter (Proposer.step_counters) summed over every step of every record."""
    totals: dict[str, float] = defaultdict(float)
    for r in records:
        for name, values in (r.get("counters") or {}).items():
            # Per-step lists of lists (draft forward sizes, run.record_steps's nodes) are records, not counts.
            if not any(isinstance(v, list) for v in values):
                totals[name] += sum(values)
    return dict(totals)


def summarize(records: list[dict]) -> dict:
    m = mat(records)
    totals = phase_totals(records)
    wall = fsum(r["wall_time"] for r in timed_regions(records))
    checked = [r["lossless"] for r in records if r.get("lossless") is not None]
    return {
        "n_questions": len({r["question_id"] for r in records}),
        "n_turns": len(records),
        "new_tokens": sum(r["new_tokens"] for r in records),
        "steps": sum(len(r["accept_lengths"]) for r in records),
        "mat": m,
        "accepted_draft_mean": None if m is None else m - 1,
        "intervals": {"level": LEVEL, "mat": mat_interval(records), "tokens_per_s": rate_interval(records)},
        "acceptance_by_depth": acceptance_by_depth(records),
        "tokens_per_s": tokens_per_s(records),
        "throughput": throughput(records),
        "wall_time": wall,
        "phase_times": totals,
        "phase_share": {k: v / wall for k, v in totals.items()} if wall > 0 else {},
        "phase_sum_over_wall": fsum(totals.values()) / wall if wall > 0 else None,
        "overhead_share": overhead_share(records),
        **tree_nodes(records),
        "counters": counter_totals(records),
        "lossless": lossless_counts(checked),
    }


def lossless_counts(checked: list[dict]) -> dict:
    """The records' losslessness checks (Runner.reference) counted: equal/checked, the three grades of
    bench.run.grading and `passed`. A record made before grading has no "grade": equal counts as identical, a
    divergence as a mismatch. passed: no mismatch, and in float32 no divergence at all (rounding there is too small
    to excuse one); None when nothing was checked."""
    grades = [c.get("grade") or ("identical" if c["equal"] else "mismatch") for c in checked]
    fp32_divergence = any(g != "identical" and c.get("dtype") == "float32" for c, g in zip(checked, grades))
    mismatch = grades.count("mismatch")
    return {
        "checked": len(checked),
        "equal": sum(1 for c in checked if c["equal"]),
        "identical": grades.count("identical"),
        "near_tie": grades.count("near-tie"),
        "mismatch": mismatch,
        "passed": None if not checked else mismatch == 0 and not fp32_divergence,
        "first_divergences": [c["first_divergence"] for c in checked if not c["equal"]],
    }


def lossless_text(counts: dict) -> str | None:
    """"equal/checked", with "(k near-tie, m mismatch)" when some differ and the counts are graded (a summary written
    before grading keeps its plain text); None when nothing was checked."""
    if not counts.get("checked"):
        return None
    text = f"{counts['equal']}/{counts['checked']}"
    if "near_tie" in counts and counts["equal"] < counts["checked"]:
        text += f" ({counts['near_tie']} near-tie, {counts['mismatch']} mismatch)"
    return text


def group_records(records: list[dict]) -> dict[str, list[dict]]:
    """Records by report group (the category where a record has no group; "all" without either)."""
    groups: dict[str, list] = defaultdict(list)
    for r in records:
        groups[r.get("group") or r.get("category") or "all"].append(r)
    return dict(groups)


def by_group(records: list[dict]) -> dict[str, dict]:
    """summarize per report group. At batch > 1 a batch may hold rows of several groups: each group is charged its
    rows' share of the batch's wall and phase times (the equal shares of attributed_wall), not the whole batch, so
    a group's aggregate rate is not understated and the groups' times add up to the run's."""
    return {g: summarize(charged_batches(rs)) for g, rs in group_records(records).items()}


def charged_batches(rows: list[dict]) -> list[dict]:
    """`rows` with each batch's wall and phase times scaled to the share of the batch's rows that are among them."""
    counts = Counter(batch_key(r["batch"]) for r in rows if r.get("batch"))

    def share(b: dict) -> dict:
        k = counts[batch_key(b)] / b["size"]
        return {**b, "wall_time": b["wall_time"] * k, "phase_times": {p: t * k for p, t in b["phase_times"].items()}}

    return [{**r, "batch": share(r["batch"])} if r.get("batch") else r for r in rows]


def first_divergence(output: list[int], reference: list[int]) -> int | None:
    """Index of the first differing token (length mismatch counts), None when identical."""
    for i, (a, b) in enumerate(zip(output, reference)):
        if a != b:
            return i
    return None if len(output) == len(reference) else min(len(output), len(reference))
