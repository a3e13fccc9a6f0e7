"""gpu-check's graph part off a GPU: a failed stage is recorded and the rest goes on, a replay's profile is reduced to
kernels, busy time and gaps; and graph-mode runs keep to their own AR baseline and out of the papers' reports."""

from __future__ import annotations

from types import SimpleNamespace


def test_graph_part_records_a_failed_stage_and_goes_on(monkeypatch):
    """gpu-check's graph part (bench.check.graph_check) on a lease: a stage that fails (a capture, a compile) is
    recorded with its error and the later stages still run."""
    from bench.check import graph_check

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    monkeypatch.setattr(graph_check, "forward_curve", broken)
    monkeypatch.setattr(graph_check, "ar_three_ways", lambda *a, **k: {"graph_tok_s": 1.0})
    monkeypatch.setattr(graph_check, "speedups", lambda *a, **k: {"ar": {"tok_s": 1.0}})
    monkeypatch.setattr(graph_check, "graph_waits", lambda *a: {"ar": {"host_waits_per_step": 1.0}})
    monkeypatch.setattr(graph_check.method_check, "prompts", lambda bundle, n: [[1, 2, 3]] * n)
    sizes = SimpleNamespace(cost_models=(("m", None),), method_shape=None, method_dtype="float32", cost_sizes=(1,),
                            reps=1, speedup_prompts=1, hf_shapes=(), timed_new=2, timed_reps=1, speedup=("ar",),
                            speedup_reps=1)
    bundle = SimpleNamespace(name="m", model=SimpleNamespace(config=SimpleNamespace(vocab_size=8)), heads=object())
    saved = []
    out = graph_check.run_graphs(sizes, None, None, bundle, progress=lambda o: saved.append(dict(o)))
    assert out["errors"]["t_n m"]["error"].startswith("RuntimeError: CUDA error") and out["t_n"] == []
    assert out["ar"] == {"m": {"graph_tok_s": 1.0}} and out["speedup"] == {"ar": {"tok_s": 1.0}}
    assert len(saved) == 4 and set(out["seconds"]) == {"t_n m", "ar m", "speedup", "waits"}  # no scratch: no auto tree


def test_graph_runs_keep_to_their_own_baseline_and_out_of_reports():
    """A graph-mode run's speedup is against graph-mode AR, an eager run's against eager AR; reports select eager
    runs (the papers' regime) unless asked for graph-mode ones."""
    from bench.report.select import where
    from bench.run.store import Run, latest_baseline

    def run(method, graphs, rid):
        return Run.of({"run_id": rid, "method": method, "model": "m", "dataset": "d", "max_new_tokens": 8,
                       "machine": "x", "temperature": 0.0, "batch_size": 1, **({"graphs": True} if graphs else {})},
                      [])

    runs = [run("ar", False, "1"), run("ar", True, "2"), run("token_recycling", True, "3"),
            run("token_recycling", False, "4")]
    assert latest_baseline(runs, runs[2].meta, "ar").run_id == "2"
    assert latest_baseline(runs, runs[3].meta, "ar").run_id == "1"
    assert [r.run_id for r in where(runs)] == ["1", "4"] and [r.run_id for r in where(runs, graphs=True)] == ["2", "3"]
    # graph runs attending over static caches of other sizes are not measured alike
    runs[1].meta["graph_capacity"], runs[2].meta["graph_capacity"] = 448, 512
    assert latest_baseline(runs, runs[2].meta, "ar") is None
    runs[1].meta["graph_capacity"] = 512
    assert latest_baseline(runs, runs[2].meta, "ar").run_id == "2"


def test_a_replay_profile_counts_kernels_their_time_and_the_gaps():
    """gpu-check's graph part profiles a replay: kernels per replay, their summed device time and their span (the
    rest of the span is gaps between kernels: what fewer, fused kernels would save). Host events are not kernels."""
    from bench.check.replay_profile import kernel_summary
    from bench.core.step_profile import Event

    ms = 1_000_000
    events = [Event("cudaGraphLaunch", 0, ms, True, 1, 0),  # two replays of two kernels, 1 ms gaps
              Event("gemv", 2 * ms, 4 * ms, False, 2, 1), Event("norm", 5 * ms, 6 * ms, False, 3, 1),
              Event("gemv", 7 * ms, 9 * ms, False, 4, 1), Event("norm", 10 * ms, 11 * ms, False, 5, 1)]
    assert kernel_summary(events, reps=2) == {"kernels": 2.0, "busy_ms": 3.0, "span_ms": 4.5,
                                              "top": {"gemv": 2.0, "norm": 1.0}}
    assert kernel_summary(events[:1], reps=2)["kernels"] == 0  # a CPU: no device events
    # the table: beside the width's unprofiled time; a profile without kernels says so rather than print zeros
    from bench.check.replay_profile import replay_lines

    row = {"model": "m", "n": 1, "graph_ms": 3.1, "replay": {"graph": {**kernel_summary(events, 2), "context": 512},
                                                             "graph_wide": kernel_summary(events[:1], 2)}}
    assert replay_lines([row]) == [
        ("- m, n=1, graph: a replay after 512 cached runs 2 kernels, busy 3.0 of its 4.5 ms profiled (the rest: "
         "gaps between kernels, and the profiler's own); 3.1 ms unprofiled"),
        "- m, n=1, graph_wide: a replay: the profiler saw no kernels"]
