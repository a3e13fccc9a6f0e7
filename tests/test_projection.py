"""`python -m bench.report project --profile ...` (bench/report/runs.py): runs made in memory replayed on a
roofline profile, by hand; bad profile names are one error line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cost.profiles import load_profile, roofline_profile
from bench.report.__main__ import main
from bench.report.runs import project_table
from bench.report.select import RunSet
from bench.run.store import Run

AR = {"question_id": 1, "turn": 0, "prompt_tokens": 100, "new_tokens": 10, "accept_lengths": [1] * 10,
      "verified_nodes": [0] * 9, "wall_time": 1.0, "phase_times": {"prefill": 0.1, "target_forward": 0.8}}
TR = {"question_id": 1, "turn": 0, "prompt_tokens": 100, "new_tokens": 10, "accept_lengths": [1, 4, 5],
      "verified_nodes": [9, 9], "wall_time": 0.5, "phase_times": {"prefill": 0.1, "target_forward": 0.3}}


@pytest.fixture(autouse=True)
def rest_as_measured(monkeypatch):
    """These tables' arithmetic keeps each step's rest as measured: no step costs (tests/test_host_cost.py prices
    it for a GPU's host)."""
    monkeypatch.setattr("bench.cost.replay.step_costs_at", lambda *a: None)


def run(run_id: str, method: str, record: dict) -> Run:
    meta = {"run_id": run_id, "method": method, "model": "smollm2-135m", "dataset": "mt_bench", "machine": "here",
            "max_new_tokens": 10, "created": f"2026-01-01T00:00:0{len(run_id)}"}
    return Run.of(meta, [record])


def test_projected_speedup_is_the_replayed_rates_ratio():
    runs = RunSet([run("a", "ar", AR), run("tr", "token_recycling", TR)], Path("mem"))
    md = project_table(runs, "llama-2-7b@a100-80gb").markdown
    p = roofline_profile("llama-2-7b", "a100-80gb")
    ar_s = (p.cost(100, 0) + sum(p.cost(1, 101 + i) for i in range(9))) / 1000 + 0.1  # + the rest measured here
    tr_s = (p.cost(100, 0) + p.cost(10, 101) + p.cost(10, 105)) / 1000 + 0.1
    row = next(line for line in md.splitlines() if "| token_recycling" in line)
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[4:] == ["20.0", "2.00", f"{10 / tr_s:.1f}", f"{ar_s / tr_s:.2f}"]
    assert "Projected on llama-2-7b-a100-80gb-float16 (roofline" in md and "not a measurement" in md


def test_profile_names():
    assert load_profile("llama-2-70b@a100-40gb:bfloat16+offloaded").hardware == "A100 40GB (offloaded)"
    for bad in ("llama-2-7b", "nope@a100-40gb", "llama-2-7b@nope", "missing.json"):
        with pytest.raises(Exception, match="profile|no shapes entry|no hardware entry"):
            load_profile(bad)


def test_cli_bad_profile_is_one_error_line(tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    assert main(["project", "--results", str(tmp_path), "--profile", "llama-2-7b@tpu"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bench.report: error: no hardware entry 'tpu'") and err.count("\n") == 1


# -- the committed validation (make validate-projection, docs/cost_model.md) ------------------------------------

EVIDENCE = Path(__file__).resolve().parents[1] / "evidence" / "projection"


def committed():
    """The validation runs, the profiles measured (before the first method's question and after each, in order),
    the schedule (which method's question lay between profiles k and k + 1) and their mean."""
    from bench.cost.profiles import Profile
    from bench.run.store import load_runs

    measured = [Profile(**p) for p in json.loads((EVIDENCE / "profiles.json").read_text())]
    schedule = json.loads((EVIDENCE / "schedule.json").read_text())
    return load_runs(EVIDENCE), measured, schedule, Profile.read(EVIDENCE / "profile.json")


def test_committed_validation_is_what_the_replay_gives():
    import numpy as np

    from bench.cost.replay import label, next_to, validate

    runs, measured, schedule, mean = committed()
    assert {r.method for r in runs} == {"ar", "pld", "token_recycling", "sd", "eagle2"} and len(runs) == 6
    assert len(measured) == len(schedule) + 1
    # Interleaved: question by question, every method in turn, each of its prompt-turns from that one question.
    assert {(name, q) for name, q in schedule} == {(label(r), x["question_id"]) for r in runs for x in r.records}
    assert [name for name, _ in schedule[: len(runs)]] == [label(r) for r in runs]
    np.testing.assert_allclose(mean.ms, np.mean([p.ms for p in measured], axis=0))
    table = validate(runs, next_to(schedule, measured))
    stored = json.loads((EVIDENCE / "validation.json").read_text())
    assert {m: round(row["median"], 6) for m, row in table.items()} == {m: round(row["median"], 6)
                                                                         for m, row in stored.items()}


def test_committed_validation_meets_its_goals():
    from bench.cost.replay import misses, next_to, validate

    runs, measured, schedule, _ = committed()
    assert misses(validate(runs, next_to(schedule, measured))) == []


def test_leaving_out_the_drafts_cost_doubles_the_draft_methods_errors(monkeypatch):
    from bench.cost import replay

    runs, measured, schedule, _ = committed()
    profile = replay.next_to(schedule, measured)
    full = replay.validate(runs, profile)
    # The drafting phases counted as if the profile's target forwards covered them: they drop out of the replay.
    monkeypatch.setattr(replay, "TARGET_PHASES", (*replay.TARGET_PHASES, "draft", "draft_forward"))
    without = replay.validate(runs, profile)
    for method in ("sd", "eagle2"):
        assert without[method]["median"] > max(0.15, 1.5 * full[method]["median"]), method
    assert without["ar"]["median"] == pytest.approx(full["ar"]["median"], rel=0.05)  # AR drafts (next to) nothing


def test_batched_runs_are_projected_batch_by_batch_with_their_aggregate_rate():
    from bench.cost.replay import Setting, batched_ms
    from bench.page.projected import projected_table

    def batched(run_id: str, method: str, record: dict, wall: float) -> Run:
        phases = {k: 2 * v for k, v in record["phase_times"].items()}  # the two rows' prefill and forwards together
        batch = {"id": 0, "size": 2, "wall_time": wall, "phase_times": phases}
        rows = [{**record, "question_id": q, "phase_times": {}, "batch": batch} for q in (1, 2)]
        r = run(run_id, method, record)
        return Run.of({**r.meta, "batch_size": 2}, rows)

    setting = Setting("Llama-2-7B on an A100 80GB", "llama-2-7b@a100-80gb")
    md = projected_table([batched("a", "ar", AR, 2.0), batched("tr", "token_recycling", TR, 1.0)], setting)
    p = roofline_profile("llama-2-7b", "a100-80gb")
    ar_s = (p.prefill(200) + sum(batched_ms(p, 1, 101 + i, 2) for i in range(9))) / 1000 + 0.2
    tr_s = (p.prefill(200) + batched_ms(p, 10, 101, 2) + batched_ms(p, 10, 105, 2)) / 1000 + 0.2
    row = [c.strip() for c in next(x for x in md.splitlines() if "| token_recycling" in x).split("|")[1:-1]]
    assert [c.split(" [")[0] for c in row[:6]] == ["token_recycling", "mt_bench", "0", "2", "2.00",
                                                    f"{ar_s / tr_s:.2f}"]  # the rows' tokens over the batches' time
    assert "| B " in md and "each batch is replayed whole" in md


def test_a_batch_priced_with_batch_1s_step_costs_is_named_under_its_table(monkeypatch):
    """Where a method has no step costs measured at a run's batch size (step_costs_at falls back to batch 1's), the
    table says at which batch sizes; where every method has them, it says nothing."""
    from bench.cost.host import StepCosts
    from bench.cost.replay import Setting
    from bench.page.projected import projected_table

    def costs(batch: int) -> StepCosts:
        return StepCosts("here", {"1": 0, "n": 0}, {m: {"phases": {}} for m in ("ar", "token_recycling")}, batch)

    def batched(run_id: str, method: str, record: dict) -> Run:
        batch = {"id": 0, "size": 2, "wall_time": 1.0, "phase_times": record["phase_times"]}
        return Run.of({**run(run_id, method, record).meta, "batch_size": 2},
                      [{**record, "question_id": q, "phase_times": {}, "batch": batch} for q in (1, 2)])

    runs = [batched("a", "ar", AR), batched("tr", "token_recycling", TR)]
    setting = Setting("Llama-2-7B on an A100 80GB", "llama-2-7b@a100-80gb")
    monkeypatch.setattr("bench.cost.replay.step_costs_at", lambda t, m, b=1, _=False: costs(b))
    monkeypatch.setattr("bench.page.projected.step_costs_at", lambda t, m, b=1, _=False: costs(b))
    assert "no step costs measured at that batch" not in projected_table(runs, setting)
    fallback = lambda t, m, b=1, _=False: costs(b if m == "ar" else 1)
    monkeypatch.setattr("bench.cost.replay.step_costs_at", fallback)
    monkeypatch.setattr("bench.page.projected.step_costs_at", fallback)
    assert "At B = 2 some methods have no step costs measured at that batch size" in projected_table(runs, setting)


def test_a_batch_recorded_before_batched_drafting_is_named_under_its_table(monkeypatch):
    """A run at B > 1 whose summary has no `draft_rows_at_once` was recorded when every row drafted alone: it is
    priced with the step costs measured then, and its table says so; a run that records it is not named."""
    from bench.cost.host import StepCosts
    from bench.cost.replay import Setting
    from bench.page.projected import projected_table

    asked = []

    def costs(t, m, b=1, before=False):
        asked.append((m, b, before))
        return StepCosts("here", {"1": 0, "n": 0}, {m: {"phases": {}}}, b)

    monkeypatch.setattr("bench.cost.replay.step_costs_at", costs)
    monkeypatch.setattr("bench.page.projected.step_costs_at", costs)
    setting = Setting("Llama-2-7B on an A100 80GB", "llama-2-7b@a100-80gb")

    def batched(run_id: str, method: str, record: dict, **meta) -> Run:
        batch = {"id": 0, "size": 2, "wall_time": 1.0, "phase_times": record["phase_times"]}
        return Run.of({**run(run_id, method, record).meta, "batch_size": 2, **meta},
                      [{**record, "question_id": q, "phase_times": {}, "batch": batch} for q in (1, 2)])

    old = [batched("a", "ar", AR), batched("m", "medusa", TR)]
    assert "medusa at B > 1: recorded before a batch's rows drafted at once" in projected_table(old, setting)
    assert ("medusa", 2, True) in asked and ("medusa", 2, False) not in asked
    asked.clear()
    new = [batched("a", "ar", AR, draft_rows_at_once=False), batched("m", "medusa", TR, draft_rows_at_once=True)]
    assert "drafted at once" not in projected_table(new, setting)
    assert ("medusa", 2, False) in asked and ("medusa", 2, True) not in asked


def test_a_sections_projected_table_pairs_each_run_with_its_baseline_on_the_papers_setting():
    from bench.cost.replay import Setting
    from bench.page.projected import projected_table

    hf = {**AR, "phase_times": {"generate": 1.0}}  # HF's own loop: its target forwards are not timed apart
    batched = run("b4", "token_recycling", TR)
    batched.meta["batch_size"] = 4
    setting = Setting("Llama-2-7B on an A100 80GB", "llama-2-7b@a100-80gb")
    md = projected_table([run("a", "ar", AR), run("tr", "token_recycling", TR), run("hf", "hf_generate", hf),
                          batched], setting)
    p = roofline_profile("llama-2-7b", "a100-80gb")
    ar_s = (p.cost(100, 0) + sum(p.cost(1, 101 + i) for i in range(9))) / 1000 + 0.1
    tr_s = (p.cost(100, 0) + p.cost(10, 101) + p.cost(10, 105)) / 1000 + 0.1
    row = [c.strip() for c in next(x for x in md.splitlines() if "| token_recycling" in x).split("|")[1:-1]]
    assert row == ["token_recycling", "mt_bench", "0", "2.00", f"{ar_s / tr_s:.2f}", f"{0.1 / tr_s:.0%}"]
    # (no interval: 1 question)
    assert "Llama-2-7B on an A100 80GB" in md and "HF's own decode loop times no target forward apart" in md
    # HF's loop, as fast as AR here, has its forwards priced at this machine's fitted cost (AR's 0.9 s): the rest,
    # 0.1 s, is its loop's, so on the setting it is as fast as AR too.
    hf_row = [c.strip() for c in next(x for x in md.splitlines() if "| hf_generate" in x).split("|")[1:-1]]
    assert hf_row[3:] == ["1.00", "1.00", f"{0.1 / ar_s:.0%}"]
    assert "| ar " not in md and "| B " not in md  # the batch-4 run has no batch-4 AR to pair with



@pytest.mark.parametrize("text", ['{"ns": [1, ', "", '{"foo": 1}', "[1, 2]"])
def test_cli_malformed_profile_file_is_one_error_line(tmp_path, capsys, text):
    (tmp_path / "runs").mkdir()
    (tmp_path / "p.json").write_text(text)
    assert main(["project", "--results", str(tmp_path), "--profile", str(tmp_path / "p.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"bench.report: error: profile file '{tmp_path / 'p.json'}' is not a cost profile")
    assert err.count("\n") == 1


def test_a_runs_settings_label_names_what_tells_it_apart_not_where_its_results_went():
    # one sweep's runs written under two results folders (a run made again elsewhere) are alike: no `results=`
    from bench.page.projected import varied
    from bench.run.store import Run

    def run(rid, **overrides):
        return Run(Path(rid), {"run_id": rid, "method": "propd", "overrides": overrides})

    runs = [run("a", **{"method.prune_topk": 50, "paths.results": "/tmp/x"}),
            run("b", **{"method.prune_topk": 200, "paths.results": "/tmp/y"})]
    assert varied(runs) == {"a": "prune_topk=50", "b": "prune_topk=200"}
