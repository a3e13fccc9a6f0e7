"""Phase shares measured on a GPU (issue 40, defect 6): every report that shows them refuses a CUDA run made without
run.sync_phases=true (bench.report.phase_timing, deciding by bench.core.timing.phases_exact), the breakdown
artifacts read their own synced runs, and the engine benchmark states how each figure was timed. Synthetic runs
only: a run's device is its summary's provenance, so a "CUDA run" here is a fixture run relabelled."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace

import pytest

from bench.core.timing import phases_exact
from bench.errors import HarnessError
from bench.perf import engine_bench
from bench.report.dyspec.time_breakdown import build_dyspec_time_breakdown
from bench.report.runs import runs_table
from bench.report.token_recycling.fig4 import fig4_points
from bench.run.store import Run
from tests.fixtures import dyspec_results, holistic_results
from tests.fixtures.runs import Memory, bound, build, frame
from tests.fixtures.tr_results import MT_BENCH, TR_SHARES, ResultsWriter, make_records, tr_settings


def timed_on(run: Run, device: str, sync_phases: bool) -> Run:
    """Relabel a fixture run (in memory) as timed on `device` with or without phase syncs (what the runner
    records)."""
    run.meta["sync_phases"] = sync_phases
    run.meta["provenance"] = {**run.provenance, "device": device}
    return run


def test_phases_are_exact_on_a_cpu_and_on_a_gpu_only_when_synced():
    assert phases_exact("cpu", False) and phases_exact("cpu", True)
    assert not phases_exact("cuda:0", False) and not phases_exact("cuda", None)
    assert phases_exact("cuda:1", True)
    assert phases_exact(None, False)  # a summary from before provenance recorded the device


def tr_fig4_run(w: ResultsWriter) -> Run:
    return w.run("token_recycling", "mt_bench", make_records(MT_BENCH, 3.0, 17.0, TR_SHARES), experiment="tr_fig4",
                 method_settings=tr_settings())


def test_tr_fig4_refuses_an_unsynced_cuda_run():
    w = ResultsWriter(Memory())
    run = timed_on(tr_fig4_run(w), "cuda:0", False)
    with pytest.raises(HarnessError, match=f"refuses run\\(s\\) {run.run_id}: timed on cuda:0 without "
                                           "run.sync_phases=true.*make reproduce-tr-fig4"):
        fig4_points(bound("token_recycling/fig4", w.root))
    timed_on(run, "cuda:0", True)
    df, _ = fig4_points(bound("token_recycling/fig4", w.root))
    assert df.set_index("component").at["model_forward", "ours_percent"] == pytest.approx(100 * (0.858 + 0.03))
    timed_on(run, "cpu", False)  # a CPU's phases are exact without syncs
    assert len(fig4_points(bound("token_recycling/fig4", w.root))[0]) == len(df)


def test_dyspec_breakdown_prefers_its_own_synced_runs_and_refuses_unsynced_cuda_ones():
    root = dyspec_results.write_full(Memory())
    w = dyspec_results.Writer(root, start=datetime(2026, 2, 1))
    # Table 1's AR on c4 at T=0 timed on a GPU without phase syncs: refused, naming Figure 4's own sweep.
    table1_ar = timed_on(root.run(w.run("ar", "c4", 0.0)), "cuda:0", False)
    with pytest.raises(HarnessError, match=f"{table1_ar.run_id}.*make reproduce-dyspec-fig4"):
        build_dyspec_time_breakdown(root.runset())
    # Figure 4's own run of that cell (variant `breakdown`, synced) takes its place, older or not.
    own = dyspec_results.Writer(root, start=datetime(2026, 1, 15))
    rid = own.run("ar", "c4", 0.0, variant="breakdown", phases={"prefill": 0.25, "target_forward": 0.5, "update": 0.25})
    timed_on(root.run(rid), "cuda:0", True)
    df = build_dyspec_time_breakdown(root.runset(), dataset="c4", temperature=0.0).set_index("method")
    assert df.loc["ar", "run_ids"] == rid and df.loc["ar", "target_forward"] == pytest.approx(0.75)


def test_holistic_table9_reads_its_synced_run_and_the_speed_tables_never_do():
    root = holistic_results.write_table1(holistic_results.write_ladder(Memory()))
    timed_on(root.run("ours"), "cuda:0", False)  # Table 1's "ours" (precut, lambda 24), unsynced on a GPU
    with pytest.raises(HarnessError, match="holistic/table9 refuses run\\(s\\) ours.*make reproduce-holistic-table9"):
        build("holistic/table9", root, model="m")
    holistic_results.write_run(root, "ours_synced", "holistic", seconds=2.5, level="precut", length=24, calls=3,
                               drafted=3)
    timed_on(root.run("ours_synced"), "cuda:0", True)
    data = frame(build("holistic/table9", root, model="m"), "tables/holistic_table9.csv").set_index("component")
    assert data.at["target_forward", "run_id"] == "ours_synced"
    assert data.at["target_forward", "ms"] == pytest.approx(1e3 * 0.4 * 2.5 / 4)
    assert "ours_synced" not in build("holistic/table3", root, model="m").files["tables/holistic_table3.csv"]


def test_runs_table_withholds_the_overhead_of_an_unsynced_cuda_run():
    w = ResultsWriter(Memory())
    run = timed_on(tr_fig4_run(w), "cuda:0", False)
    md = runs_table(w.root.runset()).markdown
    row = next(line for line in md.splitlines() if "token_recycling" in line)
    assert row.split("|")[-3].strip() == "—"  # overhead, then lossless
    assert f"Overhead withheld for {run.run_id}: timed on cuda:0 without run.sync_phases=true" in md
    timed_on(run, "cuda:0", True)
    md = runs_table(w.root.runset()).markdown
    row = next(line for line in md.splitlines() if "token_recycling" in line)
    assert "withheld" not in md and row.split("|")[-3].strip() == "0.11"  # 1 - (prefill + target_forward)


def test_engine_bench_states_each_figures_timing_mode(capsys):
    synced, plain = (SimpleNamespace(timer=SimpleNamespace(sync=s)) for s in (True, False))
    assert engine_bench.timing_mode(synced) == "phases synced"
    assert engine_bench.timing_mode(synced, plain) == "phases synced vs ends synced"
    engine_bench.print_goals({"tr_overhead_share": 0.2, "ar_vs_hf_generate": 1.01,
                              "timing_modes": {"tr_overhead_share": "phases synced",
                                               "ar_vs_hf_generate": "ends synced vs ends synced"}})
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "[phases synced]: MISSED" in lines["tr_overhead_share"]
    assert "[ends synced vs ends synced]: met" in lines["ar_vs_hf_generate"]
