"""The artifacts of issue 30 item 5 on hand-made runs (tests/fixtures/step_results.py): ProPD Figure 6, DySpec
Figures 2 and 5 and Table 4's selection, Post-use & Pre-cut Figure 2; expected values by hand."""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd
import pytest

from bench.report.dyspec.fig2 import build_fig2 as dyspec_build_fig2
from bench.report.dyspec.fig2 import dyspec_fig2
from bench.report.dyspec.fig5 import build_fig5, dyspec_fig5
from bench.report.dyspec.tables import build_dyspec_table
from bench.report.holistic.fig2 import build_fig2 as holistic_build_fig2
from bench.report.holistic.fig2 import holistic_fig2
from bench.report.propd.fig6 import build_fig6, fig6_run, propd_fig6
from bench.report.registry import produce, resolve
from bench.report.select import MissingRunsError, RunSet
from bench.run.store import Run
from tests.fixtures.dyspec_results import Writer, write_full
from tests.fixtures.runs import Memory, bound, build, frame
from tests.fixtures.step_results import holistic_run, write_step_results

REPORTS = {"propd/fig6": propd_fig6, "dyspec/fig2": dyspec_fig2, "dyspec/fig5": dyspec_fig5,
           "holistic/fig2": holistic_fig2}


@pytest.fixture
def results():
    return write_step_results(Memory())


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_registered_and_written(tmp_path, name):
    results = write_step_results(tmp_path / "results")
    assert resolve(name)[1].build is REPORTS[name]
    md = produce(resolve(name)[1], results)
    stem = name.replace("/", "_")
    for ext in ("png", "csv", "md"):
        assert (results / "figures" / f"{stem}.{ext}").stat().st_size > 0
    assert md == (results / "figures" / f"{stem}.md").read_text() and "Runs: " in md


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_no_runs_names_the_make_target(name):
    with pytest.raises(MissingRunsError, match=f"make reproduce-{name.replace('/', '-')}"):
        build(name, Memory())


def test_propd_fig6_estimate_from_hit_rates(results):
    df = build_fig6(fig6_run(results.runset()))
    a = df[df["part"] == "a"].set_index(["head", "k"])["value"]
    assert a[(1, 1)] == 0.6 and a[(2, 2)] == 0.4
    b = df[df["part"] == "b"]
    assert b["path"].tolist() == ["1", "2", "1-1"] and b["value"].round(6).tolist() == [0.6, 0.3, 0.18]
    assert df.attrs["estimated"] == pytest.approx(2.08) and df.attrs["mat"] == pytest.approx(2.0)
    md = propd_fig6(results.runset()).markdown
    assert "estimated acceptance length 2.08" in md and "inside the measured MAT's interval: does not hold" in md


def test_dyspec_fig2_bins_tested_nodes_only(results):
    df = dyspec_build_fig2(results.runset())
    assert sorted(df["temperature"].unique()) == [0.0, 0.6]
    t0 = df[df["temperature"] == 0.0].set_index("bin_low")
    # 3 questions x 2 steps: nodes 0 (0.95) and 2 (0.85) accepted, 1 (0.05) and 3 (0.15) rejected; node 4 (0.75,
    # under the rejected node 1) was never tested
    assert t0.loc[0.9, "rate"] == 1 and t0.loc[0.8, "rate"] == 1 and t0.loc[0.0, "rate"] == 0
    assert t0.loc[0.1, "rate"] == 0 and t0.loc[0.7, "nodes"] == 0 and t0["nodes"].sum() == 24
    # sampling tries siblings in drafting order and stops at the first accepted: nodes 1 and 3, after accepted
    # siblings 0 and 2, were never tested at T 0.6 (they counted as rejected)
    t6 = df[(df["temperature"] == 0.6) & (df["nodes"] > 0)]
    assert set(t6["bin_low"]) == {0.8, 0.9} and t6["nodes"].sum() == 12 and set(t6["rate"]) == {1.0}
    # at T 0.6 only accepted nodes were tested here: one rate, nothing rises
    assert df.attrs["verdicts"] == {0.0: "holds", 0.6: "undecided"}


def test_dyspec_fig5_prefers_table4_run(results):
    df = build_fig5(bound("dyspec/fig5", results))
    assert df.attrs["run_id"] == "dyspec-b768" and df["tree_size"].tolist() == [500, 600, 555] * 2
    assert df["accepted"].tolist() == [4, 5, 3] * 2
    md = dyspec_fig5(bound("dyspec/fig5", results)).markdown
    assert "551.67" in md and "551.79" in md and "71.8%" in md


def test_holistic_fig2_parts(results):
    df = holistic_build_fig2(results.runset())
    a = df[df["part"] == "a"]
    assert a["lambda_star"].tolist() == [2, 2, 2, 2]  # 2 questions x the iterations before the last
    b = df[df["part"] == "b"].set_index("measure")["value"]
    # discarded phrases (4, 3), (7, 8), (4, 3): (7, 8) is committed after iteration 2; (4, 3) and (7, 8) are
    # drafted again
    assert b["at_target"] == pytest.approx(2 / 6) and b["at_draft"] == pytest.approx(4 / 6)
    c = df[(df["part"] == "c") & (df["nodes"] > 0)].set_index("bin_low")["rate"]
    assert c.to_dict() == {0.1: 0.0, 0.3: 0.0, 0.7: 1.0, 0.9: 1.0} and df.attrs["rises"] == "holds"


def test_holistic_fig2_without_step_records():
    runs = Memory()
    holistic_run(runs, record_steps=False, run_id="sd-plain")
    report = build("holistic/fig2", runs)
    assert "Not measured: no vanilla SD run with run.record_steps=true" in report.markdown
    assert "Runs: sd-plain." in report.markdown
    assert set(frame(report, "figures/holistic_fig2.csv")["part"]) == {"a"}


def test_step_figures_from_evidence_without_token_ids(results, tmp_path):
    """The committed evidence keeps no token ids (bench/page/evidence.py): DySpec Figure 2 and part (c) of
    Post-use & Pre-cut Figure 2 read the same numbers from it; part (b), which compares tokens, has none."""
    from bench.page.evidence import write_run

    evidence = tmp_path / "evidence"
    for run in results.runs:
        write_run(run, evidence / "runs")
    assert "step_tokens" not in gzip.decompress(next((evidence / "runs").glob("*/turns.jsonl.gz")).read_bytes()).decode()
    pd.testing.assert_frame_equal(dyspec_build_fig2(RunSet.read(evidence)),
                                  dyspec_build_fig2(results.runset()))
    full, kept = holistic_build_fig2(results.runset()), holistic_build_fig2(RunSet.read(evidence))
    for part in ("a", "c"):
        pd.testing.assert_frame_equal(kept[kept["part"] == part], full[full["part"] == part], check_dtype=False)
    assert kept[kept["part"] == "b"]["value"].isna().all() and kept.attrs["rises"] == "holds"
    assert "(b) not measured from this folder: it keeps no token ids" in holistic_fig2(RunSet.read(evidence)).markdown
    assert "(b) not measured" not in holistic_fig2(results.runset()).markdown


def test_dyspec_table4_selects_its_variant():
    root = write_full(Memory())
    w = Writer(root, start=pd.Timestamp("2026-01-02").to_pydatetime())
    b768 = w.run("dyspec", "c4", 0.0, variant="b768")
    t4 = build_dyspec_table(bound("dyspec/table", root), paper_table=4)
    row = t4[(t4["dataset"] == "c4") & (t4["temperature"] == 0.0)]
    assert row["dyspec_run_id"].item() == b768 and row["ar_run_id"].notna().item()
    assert row["dyspec_speedup"].notna().item() and row["dyspec_accepted_paper"].item() == 16.04
    assert t4[t4["dataset"] == "openwebtext"]["dyspec_run_id"].isna().all()  # no b768 run there
    t1 = build_dyspec_table(bound("dyspec/table", root), paper_table=1)  # Table 1 keeps the budget-64 runs
    assert t1[(t1["dataset"] == "c4") & (t1["temperature"] == 0.0)]["dyspec_run_id"].item() != b768


def test_propd_fig6_keeps_its_own_run_beside_a_later_propd_run_of_other_heads():
    # a later sweep of another artifact, with heads built again, must not anchor Figure 6 and so leave its run out
    def run(run_id, experiment, heads, machine):
        return Run(Path(run_id), {"run_id": run_id, "model": "m", "dataset": "mt_bench", "machine": machine,
                                  "max_new_tokens": 128, "method": "propd", "experiment": experiment, "batch_size": 1,
                                  "temperature": 0.0, "method_settings": {"hit_rates": [[0.5]], "heads": heads}})
    own, later = run("own", "propd_fig6", "trained:h-1111aaaa", "x"), run("later", "propd_table3", "trained:h-2222bbbb", "y")
    assert fig6_run(RunSet([own, later], Path("mem"), experiments=("propd_fig6",))).run_id == "own"
    assert fig6_run(RunSet([later], Path("mem"), experiments=("propd_fig6",))).run_id == "later"  # none of its own
