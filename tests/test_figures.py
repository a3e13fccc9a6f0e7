"""Token Recycling's figures (bench/report/token_recycling/): run selection and reduction, the Figure 4
component mapping, files, and errors."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bench.errors import HarnessError
from bench.report.__main__ import main
from bench.report.output import write
from bench.report.registry import paper_artifacts, resolve
from bench.report.select import MissingRunsError, RunSet, setting
from bench.report.token_recycling.auto import auto_table, forward_cost_curve, load_forward_cost
from bench.report.token_recycling.fig3 import fig3_points
from bench.report.token_recycling.fig4 import FIG4_COMPONENTS, component_shares, fig4_points, paper_fig4
from bench.report.token_recycling.table1 import build_token_recycling_table1
from bench.run.store import Run
from tests.fixtures.runs import Memory, bound, build, drawn
from tests.fixtures.tr_results import (
    AR_TOK_S,
    AUTO,
    FIG3A,
    FIG3B,
    FIG3C,
    MACHINE,
    MAX_NEW,
    MODEL,
    MT_BENCH,
    TR_SHARES,
    ResultsWriter,
    make_records,
    spec_bench_questions,
    tr_settings,
    write_auto,
    write_fig3,
    write_fixture_results,
)

REPO = Path(__file__).resolve().parents[1]
MAKE = {"tr_fig3a": "make reproduce-tr-fig3", "tr_fig3b": "make reproduce-tr-fig3", "tr_fig4": "make reproduce-tr-fig4",
        "tr_auto": "make reproduce-tr-auto"}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """The fixture's runs in memory, its forward-cost file in a temporary folder."""
    return write_fixture_results(Memory(tmp_path_factory.mktemp("fx") / "results"))


@pytest.fixture(scope="module")
def on_disk(tmp_path_factory):
    """The fixture written under a temporary folder, for the files and the CLI."""
    return write_fixture_results(tmp_path_factory.mktemp("fx") / "results")


def made(name: str, results: Path) -> list[Path]:
    """token_recycling/<name> built on the runs under results and written there, as the CLI does: its files."""
    report = resolve(f"token_recycling/{name}")[1].report(RunSet.read(results))
    write(report, results)
    return [results / f for f in report.files]


def fake(run_id, **meta) -> Run:
    base = {"run_id": run_id, "model": "m", "dataset": "mt_bench", "machine": "x", "max_new_tokens": 64}
    return Run(Path(run_id), {**base, **meta})


# ---------------------------------------------------------------- selection logic


def test_latest_per_keeps_the_last_run_and_skips_missing_x():
    runs = [fake("r1", method_settings={"tree_size": 40}), fake("r2", method_settings={"tree_size": 80}),
            fake("r3", method_settings={}), fake("r4", method_settings={"tree_size": 40})]
    got = RunSet(runs, Path(".")).latest_per(setting("tree_size"))
    assert {x: r.run_id for x, r in got.items()} == {40: "r4", 80: "r2"}
    # A default stands in for a missing setting (old runs have no tree_source: the paper's template).
    assert set(RunSet(runs, Path(".")).latest_per(setting("tree_source", "template"))) == {"template"}


def test_pin_takes_the_latest_runs_model_machine_and_length():
    runs = [fake("a"), fake("b", machine="y"), fake("c", max_new_tokens=128), fake("d"), fake("e", model="n")]
    pinned = RunSet(runs, Path("mem")).pin(lambda r: r.model == "m", drafters=False)
    assert [r.run_id for r in pinned.runs] == ["a", "d"] and (pinned.machine, pinned.max_new_tokens) == ("x", 64)
    assert pinned.notes == [("2 run(s) of other machines or max_new_tokens left out (compared: machine x, "
                            "max_new_tokens 64)")]
    assert RunSet([], Path("mem")).pin().runs == []


def test_pin_never_compares_two_builds_of_a_trained_part():
    heads = {"heads": "trained:h-1111aaaa"}
    runs = [fake("old", method_settings={"heads": "trained:h"}), fake("ar", method_settings={}),
            fake("new", method_settings=heads), fake("both", method_settings={**heads, "early_heads": "trained:e"}),
            fake("draft", method_settings={"draft_label": "eagle-x-trained-2222bbbb"})]
    pinned = RunSet(runs, Path("mem")).pin(lambda r: r.run_id == "ar", drafters=False)
    # the anchor (AR) uses no trained part: each part's build is the latest run's using it
    assert [r.run_id for r in pinned.runs] == ["ar", "new", "both", "draft"]
    assert pinned.notes == [("1 run(s) with other builds of the Medusa heads left out (compared: Medusa heads "
                             "trained:h-1111aaaa)")]
    old = RunSet(runs, Path("mem")).pin(lambda r: r.run_id == "old", drafters=False)  # the anchor's build first
    assert [r.run_id for r in old.runs] == ["old", "ar", "draft"]
    assert RunSet(runs[1:], Path("mem")).pin(drafters=False).notes == []  # one build each: nothing said


def test_pin_with_a_family_anchors_on_its_own_sweep_and_never_on_another_papers():
    runs = [fake("own", experiment="toy_table1"), fake("sibling", experiment="toy_fig2", max_new_tokens=128),
            fake("other", experiment="holistic", max_new_tokens=256)]
    mine = RunSet(runs, Path("mem"), experiments=("toy_table1",))
    pinned = mine.pin(lambda r: r.model == "m", family="toy", drafters=False)
    assert pinned.max_new_tokens == 64 and [r.run_id for r in pinned.runs] == ["own"]  # not the later runs
    assert RunSet(runs[1:], Path("mem"), experiments=("toy_table1",)).pin(family="toy",  # the family's sibling
                                                                         drafters=False).max_new_tokens == 128
    assert RunSet(runs[2:], Path("mem"), experiments=("toy_table1",)).pin(family="toy", drafters=False).runs == []
    hand = fake("hand", model="a", experiment=None)  # made by hand: no paper's, so it anchors (and its model)
    assert [r.run_id for r in RunSet([hand, fake("other", model="b", experiment="holistic")], Path("mem"))
            .pin(family="toy", drafters=False).runs] == ["hand"]
    two = [fake("own", model="a", experiment="toy_table1"), fake("sib", model="b", experiment="toy_fig2")]
    assert [r.run_id for r in RunSet(two, Path("mem"), experiments=("toy_table1",))  # the family's, of the model
            .pin(model="b", family="toy", drafters=False).runs] == ["sib"]
    assert RunSet([fake("x", experiment="toyota")], Path("mem")).pin(family="toy", drafters=False).runs == []


def test_latest_takes_the_artifacts_own_sweep_before_a_later_run_of_another():
    runs = [fake("own", experiment="toy_table1", batch_size=1), fake("fig", experiment="toy_fig6", batch_size=1),
            fake("own2", experiment="toy_table1", batch_size=2)]
    mine = RunSet(runs, Path("mem"), experiments=("toy_table1",))
    assert mine.latest(batch_size=1).run_id == "own"  # Figure 6's later batch-1 run does not shadow the table's
    assert mine.latest(lambda r: r.run_id == "fig").run_id == "fig"  # none of its own fits: the latest of any
    assert RunSet(runs, Path("mem")).latest(batch_size=1).run_id == "fig"  # no artifact: the latest run
    hand = RunSet([*runs, fake("hand", experiment=None, batch_size=1)], Path("mem"), experiments=("toy_table1",))
    assert hand.latest(batch_size=1).run_id == "hand"  # a later run made by hand is the table's own
    per = mine.latest_per(lambda r: r.batch_size)  # the same rule for each key of a figure's x axis
    assert {b: r.run_id for b, r in per.items()} == {1: "own", 2: "own2"}
    assert RunSet(runs, Path("mem")).latest_per(lambda r: r.batch_size)[1].run_id == "fig"


def test_fig3_uses_the_latest_run_per_x_in_plot_order(results):
    df, notes = fig3_points(results.runset())
    a = df[df["panel"] == "a"]
    assert list(a["x"]) == sorted(FIG3A)
    assert list(a["mat"]) == pytest.approx([FIG3A[x][0] for x in sorted(FIG3A)])  # not the superseded 6.0
    assert list(a["tokens_per_s"]) == pytest.approx([FIG3A[x][1] for x in sorted(FIG3A)])
    assert list(df[df["panel"] == "b"]["x"]) == sorted(FIG3B)
    c = df[df["panel"] == "c"]
    assert list(c["x"]) == ["first", "parallel", "last"]  # the paper's First, Cur, Last
    assert list(c["mat"]) == pytest.approx([FIG3C[u][0] for u in ("first", "parallel", "last")])
    assert set(df["model"]) == {MODEL} and set(df["machine"]) == {MACHINE}
    assert any("superseded" in n for n in notes)


def test_fig3_other_machine_is_left_out_and_model_filter():
    w = ResultsWriter(Memory())
    write_fig3(w)
    # Newer runs on another machine win the group; then only that machine's points are plotted.
    w.run("token_recycling", "mt_bench", make_records(MT_BENCH, 2.0, 30.0, TR_SHARES), experiment="tr_fig3a",
          method_settings=tr_settings(tree_size=40), machine="other/GPU")
    df, notes = fig3_points(w.root.runset())
    a = df[df["panel"] == "a"]
    assert list(a["x"]) == [40] and list(a["machine"]) == ["other/GPU"]
    assert any("left out" in n for n in notes)
    assert len(df[df["panel"] == "b"]) == len(FIG3B)  # panels choose their group independently
    with pytest.raises(MissingRunsError, match="model 'nope'"):
        fig3_points(w.root.runset(), model="nope")


# ---------------------------------------------------------------- Figure 4 mapping


def test_component_mapping_folds_prefill_into_model_forward():
    share = {"prefill": 0.1, "preprocess": 0.01, "draft": 0.02, "target_forward": 0.8, "verify": 0.04,
             "update": 0.03}
    c = component_shares(share)
    assert list(c) == [k for k, _, _ in FIG4_COMPONENTS] and set(c) == set(paper_fig4(bound("token_recycling/fig4", RunSet([], Path(".")))))
    assert c["model_forward"]["share"] == pytest.approx(0.9)
    assert c["model_forward"]["phases"] == "target_forward+prefill"
    assert c["retrieval"]["share"] == 0.02 and c["retrieval"]["label"] == "Retrieval"
    assert sum(v["share"] for v in c.values()) == pytest.approx(1.0)
    sep = component_shares(share, fold_prefill=False)
    assert sep["model_forward"]["share"] == pytest.approx(0.8) and sep["prefill"]["share"] == 0.1
    # An unmapped phase is never dropped silently.
    assert component_shares({**share, "generate": 0.5})["other"]["share"] == 0.5


def test_paper_fig4_numbers():
    paper = paper_fig4(bound("token_recycling/fig4", RunSet([], Path("."))))
    assert paper["model_forward"] == 90.1 and paper["verify"] == 5.2 and paper["retrieval"] == 1.6
    assert sum(paper.values()) == pytest.approx(100.0)


def test_fig4_points(results):
    df, _ = fig4_points(bound("token_recycling/fig4", results))
    row = df.set_index("component")
    assert row.loc["model_forward", "ours_percent"] == pytest.approx(
        100 * (TR_SHARES["target_forward"] + TR_SHARES["prefill"]))
    assert row.loc["retrieval", "ours_percent"] == pytest.approx(100 * TR_SHARES["draft"])
    assert row.loc["model_forward", "paper_percent"] == 90.1
    # Every fixture question spends the same shares: each interval is a point around ours.
    assert row.loc["retrieval", ["ours_percent_lo", "ours_percent_hi"]].tolist() == pytest.approx(
        [100 * TR_SHARES["draft"]] * 2)
    assert df.attrs["prefill_percent"] == pytest.approx(100 * TR_SHARES["prefill"])
    sep, _ = fig4_points(bound("token_recycling/fig4", results), fold_prefill=False)
    assert math.isnan(sep.set_index("component").loc["prefill", "paper_percent"])


# ---------------------------------------------------------------- tree=auto


def test_auto_table_rows_speedups_and_forward_cost(results):
    df, curve, notes = auto_table(results.runset())
    assert list(df["method"]) == ["ar", "token_recycling", "token_recycling"]
    assert list(df["tree_source"].iloc[1:]) == ["template", "auto"]
    t = df.set_index("tree_source")
    assert t.loc["auto", "predicted_mat"] == 3.5 and math.isnan(t.loc["template", "predicted_mat"])
    assert t.loc["auto", "predicted_speedup_vs_ar"] == pytest.approx(3.5 / 1.6)
    assert t.loc["auto", "mat"] == pytest.approx(AUTO["auto"][0])
    assert t.loc["auto", "speedup_vs_ar"] == pytest.approx(AUTO["auto"][1] / AR_TOK_S)
    assert t.loc["template", "speedup_vs_ar"] == pytest.approx(AUTO["template"][1] / AR_TOK_S)
    assert t.loc["template", "forward_cost_ratio"] == pytest.approx(2.0)  # T(81)/T(1) = 40/20
    assert t.loc["auto", "forward_cost_ratio"] == pytest.approx(1.6)  # T(49)/T(1) = 32/20
    assert curve["ratio"].iloc[0] == 1.0 and not notes


def test_forward_cost_selection_and_normalisation(tmp_path):
    w = ResultsWriter(tmp_path)
    w.forward_cost([1, 8], [10.0, 20.0])
    w.forward_cost([1, 8], [10.0, 30.0], machine="elsewhere")
    newer = w.forward_cost([2, 8], [10.0, 20.0])  # same model and machine, created later: wins
    cached = tmp_path / "cache" / "forward_cost"
    cost = load_forward_cost(cached, MODEL, MACHINE)
    assert cost["path"] == str(newer)
    assert list(forward_cost_curve(cost)["ratio"]) == [1.0, 2.0]  # no n=1: relative to the smallest n
    assert load_forward_cost(cached, MODEL, "nowhere") is None


def test_auto_falls_back_to_the_curve_recorded_in_the_auto_run(tmp_path):
    runs = Memory(tmp_path)  # a folder without a forward-cost file
    write_auto(ResultsWriter(runs), forward_cost=False)
    df, curve, notes = auto_table(runs.runset())
    assert curve is not None
    assert not notes and "method_settings.forward_cost_ms" in df.attrs["forward_cost"]
    assert df.set_index("tree_source").loc["auto", "forward_cost_ratio"] == pytest.approx(1.6)


def test_auto_without_forward_cost_or_ar(tmp_path):
    w = ResultsWriter(Memory(tmp_path))
    for source, (mat, tok_s) in AUTO.items():
        w.run("token_recycling", "mt_bench", make_records(MT_BENCH, mat, tok_s, TR_SHARES), experiment="tr_auto",
              method_settings=tr_settings(tree_source=source))
    df, curve, notes = auto_table(w.root.runset())
    assert curve is None and any("forward-cost" in n for n in notes) and any("no ar run" in n for n in notes)
    assert list(df["tree_source"]) == ["template", "auto"] and df["speedup_vs_ar"].isna().all()
    assert df["forward_cost_ratio"].isna().all()
    files = build("token_recycling/auto", w.root).files
    assert {Path(f).name for f in files} == {"tr_auto.png", "tr_auto.csv", "tr_auto.md"}


# ---------------------------------------------------------------- files and errors


def test_figures_write_png_and_csv_atomically(on_disk):
    results = on_disk
    written = made("fig3", results) + made("fig4", results) + made("auto", results)
    names = {p.name for p in written}
    assert names == {"tr_fig3.png", "tr_fig3.csv", "tr_fig3.md", "tr_fig4.png", "tr_fig4.csv", "tr_fig4.md",
                     "tr_auto.png", "tr_auto.csv", "tr_auto_forward_cost.csv", "tr_auto.md"}
    for p in written:
        assert p.parent == results / "figures" and p.stat().st_size > 0
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list((results / "figures").glob(".*"))  # no temp files left behind
    csv = pd.read_csv(results / "figures" / "tr_fig3.csv")
    assert set(csv["panel"]) == {"a", "b", "c"} and len(csv) == len(FIG3A) + len(FIG3B) + len(FIG3C)
    md = (results / "figures" / "tr_auto.md").read_text()
    assert "| 3.75" in md and "n48-d5-auto" in md


def test_partial_fig3_still_draws_and_says_what_is_missing():
    w = ResultsWriter(Memory())
    for size in (40, 80):
        w.run("token_recycling", "mt_bench", make_records(MT_BENCH, *FIG3A[size], TR_SHARES),
              experiment="tr_fig3a", method_settings=tr_settings(tree_size=size))
    df, notes = fig3_points(w.root.runset())
    assert set(df["panel"]) == {"a"}
    assert any("panel (b)" in n and MAKE["tr_fig3b"] in n for n in notes)
    assert drawn(build("token_recycling/fig3", w.root), "figures/tr_fig3.png")


@pytest.mark.parametrize("name, experiment", [("fig3", "tr_fig3a"), ("fig4", "tr_fig4"), ("auto", "tr_auto")])
def test_missing_runs_name_the_experiment_and_make_target(tmp_path, name, experiment):
    w = ResultsWriter(tmp_path)
    # Runs of other experiments or methods never stand in.
    w.run("ar", "mt_bench", make_records(MT_BENCH, 1.0, 10.0, TR_SHARES), experiment=experiment)
    w.run("token_recycling", "mt_bench", make_records(MT_BENCH, 3.0, 10.0, TR_SHARES), experiment="table1")
    with pytest.raises(MissingRunsError) as err:
        made(name, tmp_path)
    assert isinstance(err.value, HarnessError) and isinstance(err.value, ValueError)
    msg = str(err.value)
    assert experiment in msg and MAKE[experiment] in msg and "\n" not in msg
    assert not (tmp_path / "figures").exists()


def test_cli_prints_paths_and_one_line_errors(on_disk, tmp_path, capsys):
    results = on_disk
    assert main(["tr_fig4", "--results", str(results)]) == 0
    out = capsys.readouterr().out  # the figure's markdown: its notes and the run it shows
    assert out.startswith("Token Recycling Figure 4, ours:") and "\nRuns: " in out
    assert (results / "figures" / "tr_fig4.png").is_file() and (results / "figures" / "tr_fig4.csv").is_file()
    assert main(["tr_fig4", "--results", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bench.report: error: ") and len(err.strip().splitlines()) == 1
    assert "make reproduce-tr-fig4" in err


def test_cli_unknown_figure_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["no_such_figure"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and "no_such_figure" in err


def test_cli_module_exit_code(tmp_path):
    p = subprocess.run([sys.executable, "-m", "bench.report", "token_recycling/auto", "--results", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, check=False)
    assert p.returncode == 1 and p.stderr.startswith("bench.report: error: ")
    assert len(p.stderr.strip().splitlines()) == 1 and "make reproduce-tr-auto" in p.stderr


def test_fixture_fills_table1(results):
    df = build_token_recycling_table1(bound("token_recycling/table1", results)).set_index("label")
    assert not df.attrs["notes"]
    for label in ("hf_generate", "ar", "pld", "lookahead", "rest", "token_recycling", "token_recycling[shuffle]"):
        assert not math.isnan(df.loc[label, "specbench_speedup"]) and not math.isnan(df.loc[label, "mbpp_mat"])
    tr = df.loc["token_recycling"]
    assert tr["math"] > tr["mt"] > tr["rag"]  # per-category speeds differ by construction


def test_experiment_labels_are_the_papers_and_each_is_read_by_an_artifact():
    """Labels are paper-scoped (another paper's `table1` never fills ours) and every sweep's label is one an
    artifact reads."""
    read = {e for a in paper_artifacts("token_recycling").values() for e in a.experiments}
    for path in sorted((REPO / "conf" / "experiment" / "token_recycling").glob("*.yaml")):
        label = yaml.safe_load(path.read_text())["run"]["experiment"]
        assert label.startswith("tr_") and label in read, path.name


def test_table1_reads_its_own_label_and_the_legacy_one():
    """Runs made before the label was scoped (evidence/) carry `table1`; both fill Table 1, other papers' do not."""
    def run(method, experiment, mat, tok_s):
        meta = {"run_id": f"{method}-{experiment}", "method": method, "dataset": "spec_bench", "model": MODEL,
                "machine": MACHINE, "max_new_tokens": MAX_NEW, "experiment": experiment}
        return Run.of(meta, make_records(spec_bench_questions(), mat, tok_s, None))

    runs = RunSet([run("hf_generate", "table1", 1.0, 10.0), run("token_recycling", "tr_table1", 2.5, 20.0),
                   run("ar", "holistic", 1.0, 5.0)], REPO / "nowhere")
    df = build_token_recycling_table1(bound("token_recycling/table1", runs)).set_index("label")
    assert df.loc["token_recycling", "specbench_speedup"] == pytest.approx(2.0)
    assert df.loc["token_recycling", "specbench_run_id"] == "token_recycling-tr_table1"
    assert "ar" not in df.index  # our extra row shows only when Table 1 ran it


def test_a_baseline_pairs_only_with_runs_of_its_graph_mode_settings():
    """Compiled against compiled, on the same static cache (the runner's rule, bench.run.store.latest_baseline)."""
    from bench.report.select import paired_baseline

    def run(run_id, method, **meta):
        return Run.of({"run_id": run_id, "method": method, "model": "m", "dataset": "d", "machine": "x",
                       "max_new_tokens": 8, "graphs": True, **meta}, [{"question_id": 1, "turn": 0}])

    plain, compiled = run("plain", "ar", graph_capacity=512), run("compiled", "ar", graph_capacity=512,
                                                                   graph_compile="default")
    tr = run("tr", "token_recycling", graph_capacity=512)
    assert paired_baseline([plain, compiled], tr, "ar") is plain
    assert paired_baseline([compiled], tr, "ar") is None
    assert paired_baseline([plain], run("tr2", "token_recycling", graph_capacity=1024), "ar") is None
