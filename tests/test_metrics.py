"""bench.metrics: MAT, tokens/s, speedup, overhead share, first divergence and summarize."""

from __future__ import annotations

import pytest

from bench import metrics


def rec(qid, new_tokens, wall, accept=(1,), phases=None, lossless=None):
    return {
        "question_id": qid,
        "group": "g",
        "new_tokens": new_tokens,
        "wall_time": wall,
        "accept_lengths": list(accept),
        "phase_times": phases or {},
        "lossless": lossless,
    }


def test_mat_pooled_over_steps():
    assert metrics.mat([rec(1, 4, 1.0, [1, 3]), rec(2, 2, 1.0, [2])]) == pytest.approx(2.0)
    # step-weighted, not a mean of per-record means ((2 + 1) / 2 = 1.5)
    assert metrics.mat([rec(1, 4, 1.0, [1, 3]), rec(2, 3, 1.0, [1, 1, 1])]) == pytest.approx(7 / 5)
    assert metrics.mat([]) is None


def test_tokens_per_s_multi_turn():
    # question 1: two turns, (10 + 30) / (1 + 1) = 20 tok/s; question 2: 10 / 2 = 5 tok/s
    records = [rec(1, 10, 1.0), rec(1, 30, 1.0), rec(2, 10, 2.0)]
    tps = metrics.tokens_per_s(records)
    assert tps["mean_of_questions"] == pytest.approx(12.5)  # not mean of turns (10, 30, 5)
    assert tps["total"] == pytest.approx(50 / 4)
    records = [rec(1, 10, 1.0), rec(1, 30, 3.0), rec(2, 10, 2.0)]
    assert metrics.tokens_per_s(records)["mean_of_questions"] == pytest.approx((40 / 4 + 5) / 2)
    assert metrics.tokens_per_s(records)["total"] == pytest.approx(50 / 6)


def test_speedup_common_questions_only():
    mine = [rec(1, 40, 1.0), rec(2, 20, 1.0), rec(3, 1000, 1.0)]
    base = [rec(1, 10, 1.0), rec(2, 10, 1.0), rec(4, 1, 1.0)]
    assert metrics.speedup(mine, base) == pytest.approx(30 / 10)
    assert metrics.speedup([rec(5, 1, 1.0)], base) is None


def test_overhead_share():
    phases = {"prefill": 1.0, "target_forward": 5.0, "draft": 1.0, "verify": 0.5, "update": 0.5}
    assert metrics.overhead_share([rec(1, 1, 8.0, phases=phases)]) == pytest.approx(2 / 8)
    assert metrics.overhead_share([rec(1, 1, 8.0, phases={"generate": 8.0})]) is None
    assert metrics.overhead_share([]) is None


def test_first_divergence():
    assert metrics.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert metrics.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert metrics.first_divergence([1, 2], [1, 2, 3]) == 2
    assert metrics.first_divergence([1, 2, 3, 4], [1, 2]) == 2
    assert metrics.first_divergence([], []) is None


def test_summarize():
    ok = {"equal": True, "first_divergence": None}
    bad = {"equal": False, "first_divergence": 7}
    records = [
        rec(1, 4, 1.0, [1, 3], {"prefill": 0.2, "target_forward": 0.6, "draft": 0.2}, ok),
        rec(1, 2, 1.0, [2], {"target_forward": 1.0}, bad),
        rec(2, 3, 2.0, [1, 1, 1], {"target_forward": 2.0}),
    ]
    s = metrics.summarize(records)
    assert s["n_questions"] == 2 and s["n_turns"] == 3
    assert s["new_tokens"] == 9 and s["steps"] == 6
    assert s["mat"] == pytest.approx(1.5) and s["accepted_draft_mean"] == pytest.approx(0.5)
    assert s["lossless"] == {"checked": 2, "equal": 1, "identical": 1, "near_tie": 0, "mismatch": 1, "passed": False,
                             "first_divergences": [7]}  # ungraded records: a divergence counts as a mismatch
    assert s["phase_times"]["target_forward"] == pytest.approx(3.6)
    assert s["phase_sum_over_wall"] == pytest.approx(1.0)
    assert s["overhead_share"] == pytest.approx(0.2 / 4)


def test_acceptance_by_depth_counts_whole_verification_steps_only():
    # steps 3, 1, 4 (each record's prefill and its last step, which EOS or the limit may cut, dropped)
    recs = [{"accept_lengths": [1, 3, 1, 2]}, {"accept_lengths": [1, 4, 1]}, {"accept_lengths": [1, 2]}]
    assert metrics.acceptance_by_depth(recs) == [2 / 3, 2 / 3, 1 / 3]
    full = [{"accept_lengths": [1, 5, 5, 5, 5, 5, 5, 1]}]  # a chain of 4 accepted whole; the limit cut the last
    assert metrics.acceptance_by_depth(full) == [1.0] * 4 and metrics.verification_mat(full) == 5.0


def batched_records():
    """Two batches of two rows: latencies per row, one wall time, phase times and occupancy per batch."""
    b1 = {"id": 1, "size": 2, "wall_time": 4.0, "new_tokens": 30, "phase_times": {"target_forward": 3.0,
          "draft": 1.0}, "occupancy": [2, 2, 1]}
    b2 = {"id": 2, "size": 2, "wall_time": 2.0, "new_tokens": 12, "phase_times": {"target_forward": 2.0},
          "occupancy": [2, 2]}
    rec = {"group": "g", "accept_lengths": [1, 2], "phase_times": {}, "lossless": None}
    return [{**rec, "question_id": 1, "new_tokens": 20, "wall_time": 4.0, "batch": b1},
            {**rec, "question_id": 2, "new_tokens": 10, "wall_time": 2.0, "batch": b1},
            {**rec, "question_id": 3, "new_tokens": 6, "wall_time": 2.0, "batch": b2},
            {**rec, "question_id": 4, "new_tokens": 6, "wall_time": 1.0, "batch": b2}]


def test_batched_throughput_and_phases_count_each_batch_once():
    s = metrics.summarize(batched_records())
    t = s["throughput"]
    assert t["batch_size"] == 2 and t["batch_wall_time"] == 6.0
    assert t["aggregate_tokens_per_s"] == 42 / 6.0 == s["tokens_per_s"]["total"]
    assert t["per_sequence_tokens_per_s"] == (5.0 + 5.0 + 3.0 + 6.0) / 4 == s["tokens_per_s"]["mean_of_questions"]
    assert t["mean_occupancy"] == (5 / 3 + 2.0) / 2
    assert s["phase_times"] == {"target_forward": 5.0, "draft": 1.0} and s["wall_time"] == 6.0
    assert s["overhead_share"] == 1.0 / 6.0


def test_two_batches_under_one_id_are_both_timed():
    """Runs resumed before f9d8143 could number a new batch like a saved one (ProPD Table 2's layer-4 top-100 run
    holds two batches 3): each keeps its own wall and phase times, in the summary and in the replay."""
    from bench.cost.profiles import Profile
    from bench.cost.replay import replayed

    rows = [{**r, "batch": {**r["batch"], "id": 3}} for r in batched_records()]
    s = metrics.summarize(rows)
    assert s["wall_time"] == 6.0 and s["tokens_per_s"]["total"] == 42 / 6.0
    assert s["phase_times"] == {"target_forward": 5.0, "draft": 1.0}
    assert metrics.by_group(rows)["g"]["wall_time"] == 6.0
    for r in rows:
        r["accept_lengths"], r["prompt_tokens"] = [1] * r["new_tokens"], 8
    flat = Profile("flat", "measured", "m", "here", "float32", [1, 128], [0], [[1.0, 1.0]])
    walls = {r["batch"]["wall_time"] for r in replayed(rows, flat, rest=False)}
    assert len(walls) == 2  # replayed as two batches, not one of four rows


def test_groups_sharing_a_batch_are_charged_their_rows_share_of_it():
    """Rows 1 and 3 in group a, 2 and 4 in b: each group has one row of each batch and is charged half of each
    batch's time (it was charged all of it, which halved both groups' aggregate rates)."""
    rows = [{**r, "group": "ab"[i % 2]} for i, r in enumerate(batched_records())]
    groups = metrics.by_group(rows)
    a, b = groups["a"], groups["b"]
    assert a["wall_time"] == b["wall_time"] == 3.0
    assert a["tokens_per_s"]["total"] == (20 + 6) / 3.0 and b["tokens_per_s"]["total"] == (10 + 6) / 3.0
    assert a["phase_times"] == {"target_forward": 2.5, "draft": 0.5}
    whole = metrics.summarize(rows)
    assert a["wall_time"] + b["wall_time"] == whole["wall_time"]
    assert metrics.by_group(batched_records())["g"]["wall_time"] == whole["wall_time"]  # one group: the whole run


def test_aggregate_speedup_is_a_throughput_ratio():
    mine = batched_records()
    base = [{**r, "wall_time": 2 * r["wall_time"], "batch": {**r["batch"], "wall_time": 2 * r["batch"]["wall_time"]}}
            for r in mine]
    assert metrics.aggregate_speedup(mine, base) == 2.0
    assert metrics.speedup(mine, base) == 2.0


def test_aggregate_speedup_on_part_of_the_questions_charges_their_share_of_each_batch():
    """A baseline with only questions 1 and 3 (one row of each batch): the compared rows carry half of their
    batches' wall time, not all of it (which halved ProPD's batch-4 speedup against an 8-question AR run)."""
    mine = batched_records()
    base = [r for r in mine if r["question_id"] in (1, 3)]
    base = [{**r, "batch": {**r["batch"], "size": 1, "wall_time": r["batch"]["wall_time"] / 4}} for r in base]
    ours = (20 + 6) / (4.0 / 2 + 2.0 / 2)  # tokens of rows 1 and 3 over their shares of batches 1 and 2
    theirs = (20 + 6) / (4.0 / 4 + 2.0 / 4)
    assert metrics.aggregate_speedup(mine, base) == pytest.approx(ours / theirs) == pytest.approx(0.5)
    lo, hi = metrics.aggregate_speedup_interval(mine, base)
    assert lo <= metrics.aggregate_speedup(mine, base) <= hi


def test_phase_share_interval_over_questions():
    def rec(q, draft, wall):
        return {"question_id": q, "wall_time": wall, "phase_times": {"draft": draft, "verify": wall - draft}}

    same = [rec(0, 0.2, 1.0), rec(1, 0.4, 2.0)]  # a fifth of every question's time: a point
    assert metrics.phase_share_interval(same, ["draft"]) == pytest.approx([0.2, 0.2])
    lo, hi = metrics.phase_share_interval([rec(0, 0.1, 1.0), rec(1, 0.8, 2.0), rec(2, 0.3, 1.0)], ["draft"])
    assert lo < 1.2 / 4 < hi
    # of the summed phase times: a question whose phases tile half its wall time counts its phases only
    half = [{**r, "wall_time": 2 * r["wall_time"]} for r in same]
    assert metrics.phase_share_interval(half, ["draft"], of_phase_sum=True) == pytest.approx([0.2, 0.2])
    assert metrics.phase_share_interval(half, ["draft"]) == pytest.approx([0.1, 0.1])
    assert metrics.phase_share_interval([{**r, "batch": {"id": 0}} for r in same], ["draft"]) is None


def test_sums_of_times_are_exactly_rounded_so_reports_read_alike_on_every_python():
    """Ten turns of 0.1 s each: a left-to-right float sum gives 0.9999999999999999 s (Python 3.11's sum), Python 3.12's
    compensated sum 1.0, so the reports' full-precision cells differed by an ulp between the two. math.fsum is
    exactly rounded on both."""
    records = [rec(q, 1, 0.1) for q in range(10)]
    assert metrics.tokens_per_s(records)["total"] == 10.0
    assert metrics.summarize(records)["wall_time"] == 1.0
    assert metrics.throughput(records)["batch_wall_time"] == 1.0
    assert metrics.speedup(records, [rec(q, 1, 0.1) for q in range(10)]) == 1.0
