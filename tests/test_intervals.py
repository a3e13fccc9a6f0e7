"""Bootstrap intervals over questions (bench.metrics): reproducible, around the point estimate, paired for
speedups, about 95% coverage, and the verdict of a claim read from the interval."""

from __future__ import annotations

import random

import pytest

from bench import metrics


def records(rates: dict, accepts=(1, 2, 3)) -> list[dict]:
    return [{"question_id": q, "new_tokens": 100, "wall_time": 100 / r, "accept_lengths": list(accepts)}
            for q, r in rates.items()]


def test_intervals_are_reproducible_and_contain_the_point():
    rng = random.Random(0)
    recs = records({q: rng.uniform(10, 30) for q in range(25)}, accepts=(1, 2, 4, 1))
    for r in recs[::3]:
        r["accept_lengths"] = [1, 3, 3]
    low, high = metrics.rate_interval(recs)
    assert low < metrics.tokens_per_s(recs)["mean_of_questions"] < high
    assert metrics.rate_interval(recs) == [low, high]  # fixed seed
    m_low, m_high = metrics.mat_interval(recs)
    assert m_low < metrics.mat(recs) < m_high


def test_constant_statistic_and_too_few_questions():
    assert metrics.mat_interval(records({0: 5.0, 1: 9.0}, accepts=(1, 1, 1))) == [1.0, 1.0]  # AR's MAT
    assert metrics.rate_interval(records({0: 5.0})) is None


def test_speedup_is_paired_over_common_questions():
    rng = random.Random(1)
    base = {q: rng.uniform(5, 50) for q in range(30)}  # questions differ tenfold in speed
    method = {q: 1.5 * r for q, r in base.items()}
    low, high = metrics.speedup_interval(records(method), records(base))
    assert low == pytest.approx(1.5) and high == pytest.approx(1.5)  # unpaired, the spread would swamp it
    method[99] = 1000.0  # a question the baseline lacks is left out
    assert metrics.speedup_interval(records(method), records(base)) == pytest.approx([1.5, 1.5])


def test_coverage_is_near_the_level():
    rng = random.Random(2)
    covered = 0
    for _ in range(60):
        recs = records({q: rng.gauss(20, 4) for q in range(40)})
        low, high = metrics.rate_interval(recs)
        covered += low <= 20 <= high
    assert 0.85 <= covered / 60 <= 1.0


@pytest.mark.parametrize("interval,threshold,higher,want", [
    ([1.1, 1.4], 1.0, True, "holds"), ([0.7, 0.95], 1.0, True, "does not hold"), ([0.9, 1.2], 1.0, True, "undecided"),
    ([0.7, 0.95], 1.0, False, "holds"), (None, 1.0, True, "undecided"),
])
def test_verdict_reads_the_interval(interval, threshold, higher, want):
    assert metrics.verdict(interval, threshold, higher) == want


def batched(rates: dict, size: int) -> list[dict]:
    """Records decoded `size` rows at a time: a batch's wall time is its slowest row's."""
    out = records(rates)
    for start in range(0, len(out), size):
        rows = out[start:start + size]
        batch = {"id": start, "size": len(rows), "wall_time": max(r["wall_time"] for r in rows)}
        for r in rows:
            r["batch"] = batch
    return out


def test_aggregate_speedup_interval_holds_the_batched_ratio():
    rng = random.Random(2)
    base = {q: rng.uniform(5, 50) for q in range(24)}
    method = {q: r * rng.uniform(1.2, 2.0) for q, r in base.items()}
    mine, theirs = batched(method, 4), batched(base, 4)
    low, high = metrics.aggregate_speedup_interval(mine, theirs)
    assert low < metrics.aggregate_speedup(mine, theirs) < high  # the shares add up to the batches' wall time
    same = batched({q: 2 * r for q, r in base.items()}, 4)
    assert metrics.aggregate_speedup_interval(same, theirs) == pytest.approx([2.0, 2.0])


def test_an_aggregate_rate_with_a_question_timed_at_zero_has_no_interval():
    recs = records({1: 10.0, 2: 20.0})
    recs[1]["wall_time"] = 0.0
    assert metrics.aggregate_rate_interval(recs) is None  # was [x, inf]
