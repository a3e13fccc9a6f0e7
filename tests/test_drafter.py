"""Runs of different drafters stay apart (bench/report/drafter.py): `drafter(run)` from a run's config or recorded
settings; DySpec's and Post-use & Pre-cut's reports show one drafter's runs (--draft, default the latest
draft-model run's) beside the shared AR baseline; REPRODUCED.md gets one section and summary row per drafter."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from bench.page.evidence import build_evidence
from bench.page.reproduced import reproduced_page
from bench.report.__main__ import main
from bench.report.drafter import choose, describe, drafter, present
from bench.report.dyspec.tables import build_dyspec_table, dyspec_table
from bench.report.holistic.table3 import holistic_table3
from bench.report.select import MissingRunsError
from bench.run.store import load_runs
from tests.fixtures.dyspec_results import DATASETS, Writer, write_full
from tests.fixtures.holistic_results import write_holistic_results, write_run
from tests.fixtures.runs import Memory, bound, frame, write

EAGLE = "eagle:fx-eagle"  # bench.models.eagle_draft.EagleDraft's name_or_path for head fx-eagle


def one_run(root: Path | Memory, name: str, method: str, settings: dict | None = None, config: str | None = None):
    write(root, [{"question_id": 0, "new_tokens": 1, "wall_time": 1.0, "accept_lengths": [1]}],
          {"run_id": name, "created": "2026-01-01T00:00:00", "method": method, "model": "m", "dataset": "d",
           "method_settings": settings or {}})
    if config is not None:  # the resolved config the runner writes (only the keys drafter reads)
        Path(root, "runs", name, "config.yaml").write_text(config)


def test_drafter_from_config_or_recorded_settings(tmp_path):
    eagle_cfg = "model:\n  draft:\n    source: eagle\n    id: d1\n    vocab: null\n  eagle:\n    id: head1\n"
    trained_cfg = "model:\n  draft:\n    source: trained\n    id: d1\n    vocab: 8192\n  eagle:\n    id: head1\n"
    one_run(tmp_path, "cfg_eagle", "sequoia", config=eagle_cfg)
    one_run(tmp_path, "cfg_trained", "dyspec", {"draft": "eagle:wrong"}, config=trained_cfg)  # config rules
    one_run(tmp_path, "name_eagle", "sd", {"draft": "eagle:head2"})
    one_run(tmp_path, "label_eagle", "holistic", {"draft_label": "eagle-head-3-trained-0123abcd"})
    one_run(tmp_path, "path_trained", "specinfer", {"draft": "data/cache/drafts/d2", "draft_label": "d2-4l-v8192"})
    one_run(tmp_path, "nothing", "ouroboros_g12")
    one_run(tmp_path, "ar", "ar", config=eagle_cfg)  # no draft model, whatever the config says
    one_run(tmp_path, "pld", "pld")
    got = {r.run_id: drafter(r) for r in load_runs(tmp_path)}
    assert got == {"cfg_eagle": "eagle:head1", "cfg_trained": "trained:d1", "name_eagle": "eagle:head2",
                   "label_eagle": "eagle:head-3", "path_trained": "trained:d2", "nothing": "trained",
                   "ar": None, "pld": None}
    assert describe("eagle:head1") == "EAGLE head head1" and describe("trained:d1") == "distilled d1"
    assert present(load_runs(tmp_path)) == ["trained", "trained:d1", "trained:d2", "eagle:head-3", "eagle:head1",
                                            "eagle:head2"]


def test_choose_defaults_to_the_latest_draft_model_run():
    store = Memory()
    one_run(store, "a_trained", "sd", {"draft": "drafts/d1"})
    one_run(store, "b_eagle", "sd", {"draft": EAGLE})
    one_run(store, "c_ar", "ar")  # the most recent run, but it has no drafter
    runs = sorted(store.runs, key=lambda r: r.run_id)
    for wanted, name, ids in ((None, EAGLE, ["b_eagle", "c_ar"]), ("trained", "trained:d1", ["a_trained", "c_ar"]),
                              (EAGLE, EAGLE, ["b_eagle", "c_ar"])):
        kept, got = choose(runs, wanted)
        assert got == name and [r.run_id for r in kept] == ids
    with pytest.raises(MissingRunsError, match="no runs with draft 'hub'.*trained:d1, eagle:fx-eagle"):
        choose(runs, "hub")


def two_drafters_dyspec(root: Path | Memory) -> Path | Memory:
    """Table 1's runs with the distilled draft, then (later) the same methods with the EAGLE head, 10x faster;
    AR only once."""
    root = write_full(root)
    w = Writer(root, start=datetime(2026, 2, 1))
    for d in DATASETS:
        for t in (0.0, 0.6):
            for m in ("dyspec", "sequoia", "specinfer"):
                w.run(m, d, t, latency=0.0005, draft=EAGLE)
    return root


def test_dyspec_table_per_drafter_with_the_shared_ar():
    root = two_drafters_dyspec(Memory())
    tables = {d: build_dyspec_table(bound("dyspec/table", root), draft=d) for d in (None, "trained", "eagle")}
    assert tables[None].attrs["drafter"] == EAGLE  # the latest draft-model run's
    for d, df in tables.items():
        own = d != "trained"
        for m in ("dyspec", "sequoia", "specinfer"):
            assert all(rid.endswith("-eagle") == own for rid in df[f"{m}_run_id"]), (d, m)
            assert list(df[f"{m}_latency_s"] == 0.0005) == [own] * len(df)
        assert df["ar_run_id"].tolist() == tables["trained"]["ar_run_id"].tolist()  # one AR baseline for both
    assert "draft: distilled fixture-draft-68m;" in dyspec_table(bound("dyspec/table", root), draft="trained").markdown
    assert "draft: EAGLE head fx-eagle;" in dyspec_table(bound("dyspec/table", root)).markdown


def eagle_ladder(root: Path | Memory) -> Path | Memory:
    """The Table 3 ladder at lambda 3 and 12 again, with the EAGLE head: every run twice as fast as the
    distilled draft's (tests/fixtures/holistic_results.py)."""
    for n, t_sd, t_cut in ((3, 2.0, 1.6), (12, 4.0, 1.5)):
        for lvl, t in (("sd", t_sd), ("reuse_draft", t_sd * 0.9), ("reuse_target", t_sd * 0.8), ("precut", t_cut)):
            write_run(root, f"eagle_{lvl}{n}", "holistic", seconds=t / 2, level=lvl, length=n,
                      settings={"draft": EAGLE})
    return root


def test_holistic_table_per_drafter_with_the_shared_ar():
    store = eagle_ladder(write_holistic_results(Memory())).runset()
    eagle, trained = (frame(holistic_table3(bound("holistic/table3", store), draft=d), "tables/holistic_table3.csv") for d in (None, "trained"))
    runs = {name: df.dropna(subset=["run_id"]) for name, df in (("eagle", eagle), ("trained", trained))}
    assert runs["eagle"]["run_id"].str.startswith("eagle_").all()
    assert not runs["trained"]["run_id"].str.startswith("eagle_").any()
    assert set(runs["eagle"]["ar_run_id"]) == set(runs["trained"]["ar_run_id"]) == {"ar"}  # one AR for both
    speed = {name: df.set_index(["level", "lambda"])["speedup"] for name, df in runs.items()}
    assert len(speed["eagle"]) == 8  # the ladder at lambda 3 and 12; Table 1's precut run at 24 is the distilled's
    assert (speed["eagle"] / speed["trained"]).dropna().tolist() == pytest.approx([2.0] * 8)
    assert "Ours: m, draft: EAGLE head fx-eagle, machine cpu" in holistic_table3(bound("holistic/table3", store)).markdown
    assert "Ours: m, draft: distilled (id not recorded), machine cpu" in holistic_table3(bound("holistic/table3", store), draft="trained").markdown


def test_cli_draft_option(tmp_path, capsys):
    root = two_drafters_dyspec(tmp_path / "results")
    assert main(["dyspec/table", "--paper-table", "1", "--draft", "trained", "--results", str(root)]) == 0
    assert "draft: distilled fixture-draft-68m" in capsys.readouterr().out
    assert main(["dyspec/time_breakdown", "--draft", "eagle", "--results", str(root)]) == 0
    assert "draft: EAGLE head fx-eagle" in capsys.readouterr().out
    assert main(["dyspec/table", "--draft", "hub", "--results", str(root)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bench.report: error: no runs with draft 'hub'")


@pytest.mark.slow  # the whole page over two drafters; the drafter choice is tested above
def test_page_has_one_section_per_drafter(tmp_path):
    results = eagle_ladder(write_holistic_results(two_drafters_dyspec(tmp_path / "results")))
    build_evidence(str(results), str(tmp_path / "evidence"))
    page = reproduced_page(None, str(tmp_path / "page.md"), str(tmp_path / "evidence"))
    assert page == reproduced_page(None, str(tmp_path / "again.md"), str(tmp_path / "evidence"))
    heads = [line for line in page.splitlines() if line.startswith("### `dyspec/table`")]
    assert heads == [  # each recipe makes its drafter's runs (Makefile DRAFT=eagle); no b768 run: AR alone
        "### `dyspec/table` (draft: distilled fixture-draft-68m): `make draft && make reproduce-dyspec-table1`",
        "### `dyspec/table` (draft: EAGLE head fx-eagle): `make eagle && make reproduce-dyspec-table1 DRAFT=eagle`",
        "### `dyspec/table`: `make draft && make reproduce-dyspec-table4`"]
    summary = page.split("## Summary", 1)[1].split("\n## ", 1)[0]
    for label in ("dyspec | Table 1", "holistic | Table 3"):
        rows = [line for line in summary.splitlines() if line.startswith(f"| {label}")]
        assert len(rows) == 2 and "(draft: distilled" in rows[0] and "(draft: EAGLE head fx-eagle)" in rows[1], rows
    table10 = [line for line in summary.splitlines() if line.startswith("| holistic | Table 10")]
    assert len(table10) == 1 and table10[0].startswith("| holistic | Table 10 | measured")  # one drafter ran it
    table3 = page.split("### `holistic/table3` (draft: EAGLE head fx-eagle)", 1)[1].split("\n### ", 1)[0]
    assert "draft: EAGLE head fx-eagle" in table3 and "distilled" not in table3
