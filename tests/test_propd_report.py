"""ProPD's reports (bench/report/propd/) on hand-made runs (tests/fixtures/propd_results.py): every number by hand,
the paper's beside ours, "—" with a reason, the regression fit, the claims reacting to the data; its experiments
compose (scripts/propd_iteration_time.py: tests/test_propd_iteration_time.py)."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest

from bench.page.evidence import build_evidence
from bench.page.reproduced import reproduced_page
from bench.paths import PROJECT
from bench.report.__main__ import main
from bench.report.output import Report
from bench.report.propd.common import switches
from bench.report.propd.fig3 import fit_line
from bench.report.propd.fig7 import fastest_claim, fig7_points
from bench.report.propd.table1 import table1_frame
from bench.report.propd.table2 import pruning_claim, table2_frame
from bench.report.propd.table3 import growth_claim, table3_frame
from bench.report.registry import paper_artifacts
from bench.report.select import MissingRunsError
from bench.run.store import Run
from tests.conftest import compose_cfg
from tests.fixtures.propd_results import (
    AR_RATE,
    OVER_AR,
    OVER_MEDUSA,
    TABLE2,
    PropdWriter,
    iteration_seconds,
    rate,
    write_propd_results,
)
from tests.fixtures.runs import Memory, bound, build, drawn, frame


def point(x: str) -> str:
    """A cell whose interval is a point: "1.59 [1.59, 1.59]"."""
    return f"{x} [{x}, {x}]"


@pytest.fixture
def results(tmp_path):
    """The fixture's runs in memory, its Figure 3 files under tmp_path/results."""
    return write_propd_results(Memory(tmp_path / "results"))


@pytest.fixture
def on_disk(tmp_path):
    """The fixture's runs and files written under tmp_path/results, for the CLI and REPRODUCED.md."""
    return write_propd_results(tmp_path / "results")


def report(name: str, results: Memory, **options) -> Report:
    """ProPD's artifact `name` built on the runs, nothing written (the CLI's test writes every one)."""
    return build(f"propd/{name}", results, **options)


def numbers(builder, results: Memory, **options) -> pd.DataFrame:
    """The numbers behind a table (its frame builder's DataFrame) on the runs."""
    return builder(bound(f"propd/{builder.__module__.rsplit('.', 1)[1]}", results), **options)[0]


def at(df, **where):
    mask = pd.Series(True, index=df.index)
    for k, v in where.items():
        mask &= df[k] == v
    return df[mask].iloc[0]


def cells(md: str, *lead: str) -> list[str]:
    """The stripped cells of the first markdown table row that starts with `lead`."""
    rows = ([c.strip() for c in line.split("|")[1:-1]] for line in md.splitlines() if line.startswith("|"))
    return next(r for r in rows if r[:len(lead)] == list(lead))


def written(rep: Report, folder: str, stem: str, exts) -> bool:
    """The report has each of these files, with something in it."""
    names = [f"{folder}/{stem}.{ext}" for ext in exts]
    return all(drawn(rep, n) if n.endswith(".png") else len(rep.files[n]) > 0 for n in names)


def test_table1_speedups_beside_the_paper(results):
    df = numbers(table1_frame, results)
    for b in (1, 2, 4, 8, 16):  # propd/ar = medusa/ar x both/medusa; the 999 tok/s runs are older or elsewhere
        assert at(df, batch_size=b)["speedup"] == pytest.approx(OVER_AR["medusa"][b] * OVER_MEDUSA[True, True][b])
        assert at(df, batch_size=b)["ar_tok_s"] == pytest.approx(AR_RATE[b])
    rep = report("table1", results)
    md = rep.markdown
    assert written(rep, "tables", "propd_table1", ("md", "csv", "tex"))
    # Every question of a fixture run has the same rate: the intervals are points.
    assert cells(md, "SmolLM2-135M (embedded), ours: speedup")[1:] == [point(x) for x in
                                                                       ("1.59", "1.68", "1.80", "1.90", "2.00")]
    assert cells(md, "ours: AR tok/s")[1:] == [point(f"{AR_RATE[b]:.1f}") for b in (1, 2, 4, 8, 16)]
    one = at(df, batch_size=1)  # the fixture's questions differ in MAT: a real interval around it
    assert one["propd_mat_lo"] < one["propd_mat"] < one["propd_mat_hi"]
    assert cells(md, "ours: ProPD MAT")[1] == f"{one['propd_mat']:.2f} [{one['propd_mat_lo']:.2f}, " \
                                              f"{one['propd_mat_hi']:.2f}]"
    assert cells(md, "Vicuna-7B (paper, A6000)")[1:] == ["1.95", "1.81", "1.51", "1.58", "1.39"]
    assert cells(md, "Vicuna-33B (paper, A100)")[-1] == "—"
    assert md.count("—") >= 1 and "33B has no batch-16 value" in md  # the paper's "/"
    assert "1 run(s) of other machines" in md and "at batch 16 decoded at most 8 rows together" in md


def test_table1_missing_batch_is_a_dash_with_its_reason():
    w = PropdWriter(Memory())
    w.run("ar", "mt_bench", 1, 10.0)
    w.run("propd", "mt_bench", 1, 15.0, combo=(True, True))
    md = report("table1", w.root).markdown
    assert cells(md, "SmolLM2-135M (embedded), ours: speedup")[1:] == [point("1.50"), "—", "—", "—", "—"]
    assert ("— BS=2, BS=4, BS=8, BS=16: no propd run with both switches on at that batch size on mt_bench "
            "(make reproduce-propd-table1).") in md


def test_table2_rows_and_the_paper(results):
    df = numbers(table2_frame, results)
    none = at(df, layer="none")
    assert none["mat"] == pytest.approx(2.5) and none["tok_s"] == pytest.approx(rate("medusa", 4))
    for (layer, k), (verified, steps, over) in TABLE2.items():
        row = at(df, layer=str(layer), top_k=k)
        assert row["prune_rate"] == pytest.approx(1 - verified / 100)
        assert row["mat"] == pytest.approx(60 / steps) and row["tok_s"] == pytest.approx(rate("medusa", 4) * over)
    rep = report("table2", results)
    md = rep.markdown
    assert written(rep, "tables", "propd_table2", ("md", "csv", "tex"))
    assert cells(md, "1", "50") == ["1", "50", "80.0% [80.0%, 80.0%] (79.0%)", f"{point('2.22')} (2.26)",
                                    f"{point('60.48')} (43.26)"]
    assert cells(md, "4", "200") == ["4", "200", "— (57.6%)", "— (2.49)", "— (41.94)"]
    assert cells(md, "w/o pruning") == ["w/o pruning", "—", "0.0% (—)", f"{point('2.50')} (2.46)",
                                        f"{point('43.20')} (28.43)"]
    assert ("— layer 4 top-200: no propd run with that layer and top-k (dynamic tree off) at batch 4 on mt_bench "
            "(make reproduce-propd-table2).") in md
    assert "ours: holds (layer 4, top-50: 75.0% of nodes pruned, MAT 2.40 vs 2.50 without pruning (-4.0%)" in md
    assert "paper: holds (layer 4, top-50: 74.0%" in md


def test_table2_claim_reacts_to_the_data(results):
    # A newer layer-4 top-50 run keeps the prune rate but loses a fifth of the accepted length.
    PropdWriter(results, start=datetime(2026, 3, 1)).run(
        "propd", "mt_bench", 4, 50.0, variant="prune-L4-k50", steps=30, verified=25, drafted=lambda n: [100] * n,
        settings={"prune": True, "dynamic": False, "prune_layer": 4, "prune_topk": 50})
    assert "ours: does not hold (layer 4, top-50: 75.0% of nodes pruned, MAT 2.00 vs 2.50" in report("table2", results).markdown
    assert pruning_claim({(4, 50): (0.3, 2.5)}, 2.5)[0] == "does not hold"  # keeps MAT, prunes too little
    assert pruning_claim({(1, 50): (0.8, 2.5)}, 2.5)[0] == "not measured"  # not the chosen point
    assert pruning_claim({(4, 50): (0.8, 2.5)}, None)[0] == "not measured"  # no run without pruning
    # Ours are decided from intervals: the prune rate's and the paired MAT ratio's.
    pts = {(4, 50): (0.8, 2.5)}
    assert pruning_claim(pts, 2.5, intervals=([0.7, 0.9], [0.97, 1.02]))[0] == "holds"
    assert pruning_claim(pts, 2.5, intervals=([0.45, 0.9], [0.97, 1.02]))[0] == "undecided"
    assert pruning_claim(pts, 2.5, intervals=([0.7, 0.9], [0.80, 0.90]))[0] == "does not hold"
    assert pruning_claim(pts, 2.5, intervals=(None, [0.97, 1.02]))[0] == "undecided"


def test_table3_ratios_switches_and_the_paper(results):
    df = numbers(table3_frame, results)
    for combo, name in (((False, False), "neither"), ((True, False), "pruning only"), ((False, True), "dynamic only"),
                        ((True, True), "both")):
        for b in (1, 2, 4, 8, 16):
            assert at(df, combo=name, batch_size=b)["ratio"] == pytest.approx(OVER_MEDUSA[combo][b]), (name, b)
    # The hand-run (no variant) is classified by its method_settings; Table 2's sweep is not "pruning only".
    assert at(df, combo="dynamic only", batch_size=8)["propd_run_id"].endswith("-propd-b8")
    assert "prune-L" not in at(df, combo="pruning only", batch_size=4)["propd_run_id"]
    rep = report("table3", results)
    md = rep.markdown
    assert written(rep, "tables", "propd_table3", ("md", "csv", "tex"))
    assert cells(md, "yes", "yes")[2:] == [f"{point(a)} ({b})" for a, b in (("1.06", "1.04"), ("1.20", "1.27"), (
        "1.50", "1.76"), ("1.90", "2.34"), ("2.50", "3.28"))] + ["1.29", "1.34"]
    assert cells(md, "no", "no")[-1] == "—"  # the paper's 33B baseline cell
    assert ("ours: holds (" + ", ".join(f"BS={b}: {point(x)}" for b, x in ((1, "1.06"), (2, "1.20"), (4, "1.50"), (
        8, "1.90"), (16, "2.50"))) + "); paper 7B: holds") in md


def test_table3_claim_reacts_to_the_data(results):
    later = PropdWriter(results, start=datetime(2026, 3, 1))
    later.run("propd", "mt_bench", 16, rate("medusa", 16) * 1.1, combo=(True, True), variant="ablation-both")
    assert ("ours: does not hold (" + ", ".join(f"BS={b}: {point(x)}" for b, x in ((1, "1.06"), (2, "1.20"), (
        4, "1.50"), (8, "1.90"), (16, "1.10"))) + ")") in report("table3", results).markdown
    assert growth_claim({1: 1.2, 2: None}) == ("not measured", "BS=1: 1.20")
    assert growth_claim({1: 1.0, 4: 1.0})[0] == "does not hold"  # flat is not growth
    # Decided from intervals: overlapping ends are undecided, a decisive fall does not hold.
    assert growth_claim({1: (1.0, [0.9, 1.1]), 4: (1.2, [1.05, 1.4])})[0] == "undecided"
    assert growth_claim({1: (1.0, [0.9, 1.1]), 4: (1.3, [1.2, 1.4])})[0] == "holds"
    assert growth_claim({1: (1.0, [0.9, 1.1]), 2: (2.0, [1.9, 2.1]), 4: (1.5, [1.4, 1.6])})[0] == "does not hold"


def test_fig7_panels_and_the_missing_dataset(results):
    df = numbers(fig7_points, results)
    assert at(df, dataset="alpaca", batch_size=4, method="bpd")["tok_s"] == pytest.approx(rate("bpd", 4))
    assert at(df, dataset="mt_bench", batch_size=16, method="propd")["tok_s"] == pytest.approx(
        rate("propd", 16, (True, True)))
    assert df[df["dataset"] == "chatgpt_prompts"]["tok_s"].isna().all()
    rep = report("fig7", results)
    md = rep.markdown
    assert written(rep, "figures", "propd_fig7", ("png", "csv", "md", "tex"))
    assert cells(md, "ChatGPT Prompts", "1")[2:] == ["—"] * 4
    assert cells(md, "Alpaca", "4")[2:] == [point(x) for x in ("36.0", "39.6", "43.2", "64.8")]
    assert "— chatgpt_prompts (every cell): no runs on chatgpt_prompts: not loadable offline" in md
    assert "ProPD fastest of the four in every measured setting: holds (10 of 10" in md


def test_fig7_claim_is_decided_from_paired_intervals():
    def cell(d, over):  # ProPD over ar, bpd, medusa: (low, high) each
        return [{"dataset": d, "batch_size": 1, "method": m, "tok_s": 1.0, "propd_over_lo": lo, "propd_over_hi": hi}
                for m, (lo, hi) in zip(("ar", "bpd", "medusa", "propd"), (*over, (None, None)), strict=True)]
    sure, close, slower = ((1.2, 1.5),) * 3, ((1.2, 1.5), (0.9, 1.1), (1.2, 1.5)), ((1.2, 1.5), (0.7, 0.9), (1.2, 1.5))
    assert ": holds (1 of 1" in fastest_claim(pd.DataFrame(cell("a", sure)))
    assert ": undecided (1 of 2" in fastest_claim(pd.DataFrame(cell("a", sure) + cell("b", close)))
    assert ": does not hold (0 of 2" in fastest_claim(pd.DataFrame(cell("a", close) + cell("b", slower)))


def test_fig7_without_runs_names_its_make_target():
    with pytest.raises(MissingRunsError, match="make reproduce-propd-fig7"):
        report("fig7", Memory())


def test_fit_line_on_exact_points():
    assert fit_line([1, 2, 3, 4], [3, 5, 7, 9]) == pytest.approx((1.0, 2.0, 1.0))
    b0, b1, r2 = fit_line([0, 1, 2], [0, 1, 0], w=[1, 0, 1])  # weight 0 drops the middle point
    assert (b0, b1, r2) == pytest.approx((0.0, 0.0, 1.0))
    b0, b1, r2 = fit_line([0, 1, 2, 3], [0, 2, 1, 3])
    assert b1 == pytest.approx(0.8) and b0 == pytest.approx(0.3) and r2 == pytest.approx(0.64)
    assert all(math.isnan(v) for v in fit_line([4, 4], [1, 2]))


def test_fig3_panels_fit_and_categories(results):
    rep = report("fig3", results)
    md = rep.markdown
    assert written(rep, "figures", "propd_fig3", ("png", "csv", "md", "tex"))
    assert written(rep, "figures", "propd_fig3_fit", ("csv",))
    fit = frame(rep, "figures/propd_fig3_fit.csv")
    for b in (1, 2, 4, 8, 16):
        row = fit[fit["batch_size"] == b].iloc[0]
        assert row["b0"] == pytest.approx(iteration_seconds(0, 0, 256)) and row["r2"] == pytest.approx(1.0)
        assert row["b1"] == pytest.approx(iteration_seconds(b, 1, 256) - iteration_seconds(b, 0, 256))
    assert cells(md, "2")[1] == "37.0"  # layer 2's top-1 accuracy
    # 60 tokens in 20 (medusa) and 21 (propd) steps; one question per category: no interval
    assert cells(md, "coding") == ["coding", "3.00", "2.86"]
    points = frame(rep, "figures/propd_fig3.csv")
    assert {"y_lo", "y_hi"} <= set(points.columns)
    assert set(points["panel"]) == {"a", "b", "c", "d"}
    assert sorted(points[points["panel"] == "c"]["x"].astype(int).unique()) == [64, 128, 256, 512, 768]


def test_fig3_c_shows_each_points_fastest_and_slowest_repeat_when_the_file_has_them(results):
    path = Path(results.folder, "propd", "iteration_time.json")
    assert "fastest, slowest" not in report("fig3", results).markdown  # a file from before: medians only
    data = json.loads(path.read_text())
    data["rows"] = [{**r, "min_seconds": 0.9 * r["seconds"], "max_seconds": 1.2 * r["seconds"]} for r in data["rows"]]
    path.write_text(json.dumps(data))
    rep = report("fig3", results)
    row = next(r for r in data["rows"] if r["batch"] == 1 and r["seq_len"] == 64)
    ms = [f"{1000 * k * row['seconds']:.2f}" for k in (1, 0.9, 1.2)]
    assert "median [fastest, slowest repeat]" in rep.markdown and f"{ms[0]} [{ms[1]}, {ms[2]}]" in rep.markdown
    points = frame(rep, "figures/propd_fig3.csv")
    assert (points[points["panel"] == "c"]["y_hi"] > points[points["panel"] == "c"]["y"]).all()


def test_fig3_without_files_says_which_panels_are_missing(results):
    Path(results.folder, "propd", "early_heads.json").unlink()
    md = report("fig3", results).markdown
    assert "— (a): no data (python scripts/early_heads_report.py (make reproduce-propd-fig3))." in md
    Path(results.folder, "propd", "iteration_time.json").unlink()
    with pytest.raises(MissingRunsError, match="make reproduce-propd-fig3"):
        report("fig3", Memory(results.folder))  # no runs, no files


def test_fig3_says_when_panel_a_scores_other_early_heads_than_d_pruned_with(results):
    path = Path(results.folder, "propd", "early_heads.json")
    # as scripts/early_heads_report.py writes it: the untrained heads' accuracy per k stays out of the footer
    path.write_text(json.dumps({**json.loads(path.read_text()), "build": "trained:early-aaaaaaaa",
                                "accuracy_untrained": {"2": [0.123456]}}))
    propd = [r for r in results.runs if r.method == "propd" and r.batch_size == 1 and r.dataset == "mt_bench"]

    def pruned_with(build):
        for r in propd:
            r.meta["method_settings"] = {**r.settings, "early_heads": build}

    pruned_with("trained:early-aaaaaaaa")
    md = report("fig3", results).markdown
    assert "(a) scores early heads" not in md and "0.123456" not in md and '"build": "trained:early-aaaaaaaa"' in md
    pruned_with("trained:early-bbbbbbbb")
    assert ("(a) scores early heads trained:early-aaaaaaaa, (d)'s propd run pruned with trained:early-bbbbbbbb"
            in report("fig3", results).markdown)


def test_switches_from_settings_first_then_variant():
    def run(**meta):
        return Run(Path("x"), {"method": "propd", **meta})

    assert switches(run(variant="ablation-prune")) == (True, False)
    assert switches(run(variant="ablation-prune", method_settings={"prune": False, "dynamic": True})) == (False, True)
    assert switches(run(variant="prune-L2-k100")) == (True, False)
    assert switches(run()) is None and switches(Run(Path("x"), {"method": "medusa"})) is None


def test_cli_lists_and_runs_every_propd_artifact(on_disk, capsys):
    assert main(["--list"]) == 0
    listed = capsys.readouterr().out.split()
    assert {f"propd/{a}" for a in ("table1", "table2", "table3", "fig3", "fig7")} <= set(listed)
    for name in ("table1", "table2", "table3", "fig3", "fig7"):
        assert main([f"propd/{name}", "--results", str(on_disk)]) == 0
        files = list(Path(on_disk).glob(f"*/propd_{name}.*"))  # md, csv and tex; a figure's png too
        assert len(files) >= 3 and all(p.stat().st_size > 0 for p in files), files
    assert main(["propd/table2", "--results", str(on_disk), "--batch-size", "2"]) == 0
    assert "at batch 2 per pruning layer" in capsys.readouterr().out


@pytest.mark.slow  # the whole page over the fixture; each artifact's section is tested above
def test_reproduced_page_has_every_propd_artifact(on_disk, tmp_path):
    build_evidence(str(on_disk), str(tmp_path / "evidence"))  # the page reads only the evidence folder
    md = reproduced_page(None, str(tmp_path / "REPRODUCED.md"), str(tmp_path / "evidence"))
    for name in ("table1", "table2", "table3", "fig7", "fig3"):
        assert f"### `propd/{name}`: `make reproduce-propd-{name}" in md
    assert "Machine: fixture/CPU/2t. Measured: 2026-02-01. Git: 1111111111." in md
    assert "ProPD Table 3, ours (paper's Vicuna-7B)" in md


def test_experiments_compose_with_their_switches():
    for variant, switch in (("ablation-none", (False, False)), ("ablation-prune", (True, False)),
                            ("ablation-dynamic", (False, True)), ("ablation-both", (True, True))):
        cfg = compose_cfg("experiment=propd/table3", f"run.variant={variant}", "run.batch_size=8")
        assert (cfg.method.prune, cfg.method.dynamic) == switch and cfg.run.batch_size == 8
    cfg = compose_cfg("experiment=propd/table2", "method.prune_layer=3", "method.prune_topk=150")
    assert cfg.run.variant == "prune-L3-k150" and cfg.run.batch_size == 4 and cfg.method.dynamic is False
    cfg = compose_cfg("experiment=propd/table1", "method=propd", "run.batch_size=16")
    assert cfg.method.prune and cfg.method.dynamic and cfg.run.experiment == "propd_table1"


def test_sweeps_run_ar_first_and_a_dataset_on_the_command_line_replaces_the_list():
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    def jobs(experiment, *cli):
        params = OmegaConf.load(PROJECT / "conf" / "experiment" / "propd" / f"{experiment}.yaml").hydra.sweeper.params
        overrides = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()] + list(cli))
        return BasicSweeper.split_arguments(overrides, None)[0]

    table1 = jobs("table1")
    assert [j[1] for j in table1[:4]] == ["method=ar", "method=propd", "method=ar", "method=propd"]
    fig7 = jobs("fig7", "dataset=alpaca")
    assert len(fig7) == 20 and {j[0] for j in fig7} == {"dataset=alpaca"} and fig7[0][2] == "method=ar"


def test_every_make_target_the_reports_name_exists():
    from bench.report.makefile import makefile
    from bench.report.propd import PAPER

    generated = makefile()  # what the Makefile includes
    phony = next(line for line in generated.splitlines() if line.startswith(".PHONY:")).split()
    for name, artifact in paper_artifacts("propd").items():
        target = artifact.recipes[0].target
        assert PAPER.make(name) == f"make {target}" and f"\n{target}: setup heads  ## " in generated, target
        assert target in phony and f"reproduce-propd/{name}" in phony


def test_a_later_run_of_another_paper_does_not_anchor_the_pool(results):
    """Without runs of Figure 7's own experiment, the pool is measured like the latest ProPD experiment's run: a
    later AR of another paper at other lengths (Post-use & Pre-cut's MT-Bench AR at 256 tokens) must not make it
    drop every ProPD run as measured otherwise."""
    results.runs = [r for r in results.runs if r.experiment != "propd_fig7"]
    before = numbers(fig7_points, results)
    assert before["tok_s"].notna().any()
    rid = PropdWriter(results, start=datetime(2030, 1, 1)).run("ar", "mt_bench", 1, 5.0, experiment="holistic")
    results.run(rid).meta["max_new_tokens"] = 256
    pd.testing.assert_frame_equal(numbers(fig7_points, results), before)
