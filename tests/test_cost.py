"""The cost model (bench/cost/profiles.py) and the step replay (bench/cost/replay.py): the roofline's regimes, its error
against the papers' published AR baselines, the profile's interpolation, and a record replayed onto a profile."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from bench.cost.profiles import (
    Hardware,
    ModelShape,
    Profile,
    baselines,
    fit_layer_overhead,
    load_profile,
    roofline_ms,
    roofline_profile,
)
from bench.cost.replay import (
    batched_ms,
    draft_steps,
    forwards_priced,
    replay_s,
    replayed,
    rest_s,
    run_error,
    target_ms,
    target_steps,
)
from bench.errors import HarnessError
from bench.paths import PROJECT


def test_shapes_count_the_published_parameters():
    # Llama-2-7B: 6.74e9 parameters, of which the input embedding (32000 x 4096) is not read in full.
    assert ModelShape.load("llama-2-7b").read_params == pytest.approx(6.74e9 - 32000 * 4096, rel=0.01)
    assert ModelShape.load("llama-2-70b").read_params == pytest.approx(68.98e9 - 32000 * 8192, rel=0.01)


def test_one_token_is_memory_bound_and_a_large_tree_compute_bound():
    shape, hw = ModelShape.load("llama-2-7b"), dataclasses.replace(Hardware.load("a100-80gb"), layer_overhead_ms=0)
    one = roofline_ms(shape, hw, "float16", 1, 512)
    assert one == pytest.approx(shape.read_params * 2 / 2039e9 * 1000, rel=0.03)  # the weights (and cache) over the bandwidth
    assert roofline_ms(shape, hw, "float16", 64, 512) < 1.1 * one  # a 64-node tree costs about one token: flat
    assert roofline_ms(shape, hw, "float16", 1024, 512) > 4 * one  # past the ridge FLOPs decide


def test_a_roofline_prefill_scores_only_the_prompts_last_token():
    shape, hw = ModelShape.load("llama-3.1-8b"), dataclasses.replace(Hardware.load("a100-80gb"), layer_overhead_ms=0)
    prompt = 2048  # compute-bound: the output projection over every prompt token is 6% of Llama-3's FLOPs
    every, last = (roofline_ms(shape, hw, "float16", prompt, 0, scored=s) for s in (None, 1))
    head = 2 * shape.vocab_size * shape.hidden_size * (prompt - 1)
    flops = 2 * shape.read_params * prompt + 4 * shape.num_hidden_layers * shape.hidden_size * prompt ** 2
    assert 1 - last / every == pytest.approx(head / flops, rel=1e-6)
    p = roofline_profile("llama-3.1-8b", "a100-80gb")
    # priced at its length, not extrapolated along the grid's last n (which misses attention's square)
    assert p.prefill(prompt) == pytest.approx(roofline_ms(shape, Hardware.load("a100-80gb"), "float16", prompt, 0,
                                                          scored=1))
    assert p.prefill(1) == pytest.approx(p.cost(1, 0))  # one token: the same forward


def test_roofline_is_within_15_percent_of_every_published_ar_baseline():
    rows = baselines()
    assert len(rows) == 6
    worst = max(rows, key=lambda r: abs(r["error"]))
    assert abs(worst["error"]) <= 0.15, worst
    offloaded = next(r for r in rows if "offloaded" in r["baseline"])
    assert abs(offloaded["error"]) <= 0.05  # 70B streamed over PCIe: 5.6 s per token


def test_the_fitted_overhead_is_the_hardware_files_and_each_row_holds_without_its_own_baseline():
    rows = baselines()
    on_device = [r for r in rows if not r["offloaded"]]
    assert round(fit_layer_overhead(on_device), 2) == Hardware.load("a100-80gb").layer_overhead_ms == 0.36
    assert len(on_device) == 5 and all(abs(r["leave_one_out"]) <= 0.15 for r in on_device)
    # a fit over rows the overhead explains exactly gives that overhead back
    exact = [{**r, "published_ms": r["roofline_ms"] - r["overhead_ms"] + 0.5 * r["layers"]} for r in on_device]
    assert fit_layer_overhead(exact) == pytest.approx(0.5)


def test_the_committed_baselines_table_is_what_the_code_computes():
    """docs/cost_model.md quotes evidence/projection/baselines.json (`python -m bench.cost.profiles`)."""
    committed = json.loads((PROJECT / "evidence/projection/baselines.json").read_text())
    assert committed["rows"] == json.loads(json.dumps(baselines()))


def test_unknown_names_are_one_error():
    with pytest.raises(HarnessError, match="no hardware entry 'tpu'"):
        Hardware.load("tpu")
    with pytest.raises(HarnessError, match="no peak for int4"):
        roofline_profile("llama-2-7b", "a100-40gb", "int4")


def grid_profile() -> Profile:
    """T = 10 + n ms at context 0, 20 + 2n at context 100."""
    ns, cs = [1, 2, 4, 8], [0, 100]
    return Profile("toy", "measured", "m", "here", "float32", ns, cs, [[10 + n for n in ns], [20 + 2 * n for n in ns]])


def test_profile_interpolates_in_n_and_context_and_extends_past_the_grid():
    p = grid_profile()
    assert p.cost(4, 0) == pytest.approx(14) and p.cost(4, 100) == pytest.approx(28)
    assert p.cost(3, 0) == pytest.approx(13) and p.cost(4, 50) == pytest.approx(21)
    assert p.cost(16, 0) == pytest.approx(26)  # past the last n: the last segment's slope
    assert p.cost(4, 400) == pytest.approx(28)  # past the last context: flat
    assert p.cost(np.array([1, 8]), np.array([0, 100])).tolist() == pytest.approx([11, 36])


def test_profile_round_trips_through_its_file(tmp_path):
    p = roofline_profile("smollm2-135m", "h100-sxm", "bfloat16")
    assert Profile.read(p.save(tmp_path / "p.json")) == p


RECORD = {"prompt_tokens": 100, "accept_lengths": [1, 3, 2], "verified_nodes": [7, 3], "wall_time": 1.0,
          "phase_times": {"prefill": 0.2, "target_forward": 0.5, "draft": 0.25}}


def test_steps_are_the_prefill_then_each_verification_after_what_was_committed():
    n, context = target_steps(RECORD)
    assert n.tolist() == [100, 8, 4] and context.tolist() == [0, 101, 104]


def own_profile() -> Profile:
    """This record's own costs: T(100, 0) = 200 ms (the prefill), T(n <= 8, ~100) = 250 ms."""
    return Profile("own", "measured", "m", "here", "float32", [8, 100], [0, 104], [[250, 200], [250, 250]])


def test_replay_on_the_machines_own_costs_gives_back_the_wall_time():
    p = own_profile()
    assert target_ms(RECORD, p) == pytest.approx(200 + 250 + 250)
    assert rest_s(RECORD) == pytest.approx(0.3)  # drafting and the untimed rest, as measured
    assert replay_s(RECORD, p) == pytest.approx(1.0)
    assert run_error([RECORD, RECORD], p) == pytest.approx(0.0, abs=1e-9)


def test_a_batched_forward_is_its_rows_tokens_at_once_plus_each_further_rows_cache():
    p = grid_profile()  # T = 10 + n at context 0, 20 + 2n at context 100
    assert batched_ms(p, 4, 100, 3) == pytest.approx((20 + 2 * 12) + 2 * ((20 + 2) - (10 + 1)))
    assert batched_ms(p, 4, 100, 1) == pytest.approx(p.cost(4, 100))


def test_a_batch_is_replayed_whole_and_its_rows_keep_their_share():
    p = grid_profile()
    phases = {"prefill": 0.04, "target_forward": 0.1, "draft": 0.06}
    batch = {"id": 7, "size": 2, "wall_time": 0.5, "phase_times": phases}
    a = {"prompt_tokens": 2, "accept_lengths": [1, 2, 1], "verified_nodes": [3, 1], "wall_time": 0.5, "batch": batch}
    b = {"prompt_tokens": 4, "accept_lengths": [1, 1], "verified_nodes": [2], "wall_time": 0.25, "batch": batch}
    # Prefill: 2 rows padded to 4 prompt tokens. Step 1: both rows, 4 nodes wide (a's 3 + root), mean context
    # (3 + 5) / 2; step 2: row a alone, 2 wide, context 5. The rest of the batch (0.5 - 0.14 s) as measured.
    steps_ms = batched_ms(p, 4, 4, 2) + p.cost(2, 5)
    wall = (p.prefill(8) + steps_ms) / 1000 + 0.36
    out = replayed([a, b], p)
    assert [r["batch"]["wall_time"] for r in out] == pytest.approx([wall, wall])
    assert [r["wall_time"] for r in out] == pytest.approx([wall, wall / 2])  # each row scaled like its batch
    assert replayed([a, b], p, rest=False)[0]["batch"]["wall_time"] == pytest.approx(wall - 0.36)
    # A batch of one row is the batch-1 replay of the same record.
    one = {**a, "wall_time": 0.5, "phase_times": phases}
    solo = replayed([{**one, "batch": {**batch, "size": 1}}], p)[0]
    assert solo["batch"]["wall_time"] == pytest.approx(replay_s({k: v for k, v in one.items() if k != "batch"}, p))


def test_an_untimed_loops_forwards_are_priced_and_never_more_than_its_wall_time():
    p = own_profile()
    untimed = {k: v for k, v in RECORD.items() if k != "phase_times"}  # HF's generate: one opaque phase
    priced = forwards_priced([untimed], p)[0]["phase_times"]
    assert priced["prefill"] == pytest.approx(0.2) and priced["target_forward"] == pytest.approx(0.5)
    fast = forwards_priced([{**untimed, "wall_time": 0.35}], p)[0]["phase_times"]
    assert fast["prefill"] + fast["target_forward"] == pytest.approx(0.35)
    assert forwards_priced([RECORD], p)[0] is RECORD  # timed records as they are


def test_a_profiles_own_prefill_curve_prices_the_prefill_and_nothing_else(tmp_path):
    # A prefill scores one token, a verification every token: a measured profile keeps the prefill apart.
    p = dataclasses.replace(own_profile(), prefill_ns=[50, 150], prefill_ms=[50.0, 150.0])
    assert p.prefill(100) == pytest.approx(100) and own_profile().prefill(100) == pytest.approx(200)
    assert target_ms(RECORD, p) == pytest.approx(100 + 250 + 250)
    assert Profile.read(p.save(tmp_path / "p.json")) == p


def test_the_prefill_is_measured_as_the_engine_prefills(smollm):
    from bench.models.forward_cost import measure_prefill

    seconds = measure_prefill(smollm, (4, 16), reps=1)
    assert list(seconds) == [4, 16] and all(s > 0 for s in seconds.values())


def test_a_replay_without_the_drafts_cost_misses_the_validation_limit():
    # What the validation (at most 15% off) catches: the target's forwards alone leave out the 0.25 s of drafting.
    assert abs(target_ms(RECORD, own_profile()) / 1000 / RECORD["wall_time"] - 1) > 0.15


DRAFTED = {**RECORD, "phase_times": {**RECORD["phase_times"], "draft_forward": 0.2},
           "counters": {"draft_calls": [3, 2], "draft_tokens": [6, 4]}}


def test_draft_forwards_are_the_recorded_sizes_at_each_steps_context():
    exact = {**DRAFTED, "counters": {**DRAFTED["counters"], "draft_sizes": [[101, 2, 4], [3, 4]]}}
    n, context = draft_steps(exact)
    assert n.tolist() == [101, 2, 4, 3, 4] and context.tolist() == [101, 101, 101, 104, 104]


def test_older_records_spread_a_steps_drafted_tokens_over_its_calls_after_the_catch_up():
    # The first step catches up the prompt and the prefill's token; a later one what the step before committed.
    n, context = draft_steps(DRAFTED)
    assert n.tolist() == [101, 3, 3, 3, 4] and context.tolist() == [101, 101, 101, 104, 104]
    assert draft_steps(RECORD) is None  # no draft model: nothing to replay


def test_a_draft_profile_replaces_the_measured_draft_forwards():
    target, draft = own_profile(), Profile("d", "measured", "d", "here", "float32", [1, 128], [0], [[1.0, 1.0]])
    no_draft = replay_s(DRAFTED, target)
    assert replay_s(DRAFTED, target, draft) == pytest.approx(no_draft - 0.2 + 5 * 0.001)
    assert replay_s(RECORD, target, draft) == pytest.approx(replay_s(RECORD, target))  # nothing drafted: as before


def test_every_paper_declares_a_setting_whose_profiles_load():
    from bench.report.registry import paper, papers

    for name in papers():
        setting = paper(name).setting_of()
        assert setting is not None and setting.label, name
        for profile in filter(None, (setting.target, setting.draft)):
            assert load_profile(profile).ms, profile
    assert "offloaded" in paper("dyspec").setting_of("Table 4").target
