"""REPRODUCED.md is built from the committed evidence folder alone: byte for byte the same from any copy of it, no
machine path, no long line, a summary of every paper artifact first, each section's settings read from its runs."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from bench.page.evidence import build_evidence
from bench.page.reproduced import LINE_MAX, absolute_paths, coverage, reproduced_page
from bench.paths import project_path
from tests.fixtures.dyspec_results import write_full
from tests.fixtures.holistic_results import write_holistic_results
from tests.fixtures.propd_results import write_propd_results
from tests.fixtures.tr_results import write_fixture_results


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every paper's fixture runs (ProPD's given run.limit=4, against a recipe saying LIMIT=16), their evidence
    folder and the page built from it."""
    root = tmp_path_factory.mktemp("reproduced")
    results = root / "work" / "results"
    write_fixture_results(results)
    write_full(results)
    write_propd_results(results, overrides={"run.limit": "4"})
    write_holistic_results(results)
    evidence = root / "work" / "evidence"
    build_evidence(str(results), str(evidence))
    page = reproduced_page(None, str(root / "REPRODUCED.md"), str(evidence))
    return root, results, evidence, page


def test_evidence_holds_summaries_configs_and_turns_without_token_ids(built):
    _, results, evidence, _ = built
    runs = sorted((evidence / "runs").iterdir())
    assert runs and all(sorted(p.name for p in d.iterdir()) == ["config.yaml", "summary.json", "turns.jsonl.gz"]
                        for d in runs)
    packed = (runs[0] / "turns.jsonl.gz").read_bytes()
    turn = json.loads(gzip.decompress(packed).decode().splitlines()[0])
    assert packed[4:8] == bytes(4)  # no timestamp in the gzip header: the same records give the same bytes
    assert "accept_lengths" in turn and "question_id" in turn and "output_ids" not in turn
    assert (results / "runs" / runs[0].name / "records.jsonl").is_file()  # the results' copy keeps its records
    assert (evidence / ".gitignore").read_text().split() == ["tables/", "figures/"]


@pytest.mark.slow  # the committed page rebuilt from evidence/ stays in make test
def test_the_page_is_the_same_from_a_copy_of_the_evidence(built, tmp_path):
    root, _, evidence, page = built
    assert (root / "REPRODUCED.md").read_text() == page
    again = reproduced_page(None, str(tmp_path / "again.md"), str(evidence))
    copy = tmp_path / "elsewhere" / "evidence"
    shutil.copytree(evidence, copy, ignore=shutil.ignore_patterns("tables", "figures", "runs.csv"))
    moved = reproduced_page(None, str(tmp_path / "moved.md"), str(copy))
    assert again == page and moved == page
    assert (copy / "runs.csv").read_bytes() == (evidence / "runs.csv").read_bytes()


def test_no_machine_path_and_no_long_line(built):
    root, _, evidence, page = built
    assert not absolute_paths(page), absolute_paths(page)[:3]
    assert str(root) not in page and "/tmp" not in page
    assert max(len(line) for line in page.splitlines()) <= LINE_MAX
    assert "Runs: 20" not in page  # run-id lists go to evidence/runs.csv
    rows = (evidence / "runs.csv").read_text().splitlines()
    assert rows[0] == "artifact,run_id,method,dataset,machine,created,git_sha,git_dirty" and len(rows) > 100


def test_summary_lists_every_artifact_with_a_status(built):
    page = built[3]
    summary = page.split("## Summary", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in summary.splitlines() if line.startswith("| ") and "paper |" not in line]
    rows = coverage()
    assert len(lines) == len(rows)
    for (paper, cover, artifact), line in zip(rows, lines, strict=True):
        assert line.startswith(f"| {paper} | {cover.label} | ")
        assert (artifact is None) == (" | no target | " in line), line
    assert "| dyspec | Table 2 | not measurable offline" in summary
    assert "| token_recycling | Table 1 | measured | 3-12 |" in summary
    # Claims carry a verdict decided from a paired interval; the reports' own claims are listed with theirs.
    assert "| propd | Table 3 | measured | 8 | Claim (2) 'ProPD's gain over Medusa': holds |" in summary
    assert "Claim 'ProPD fastest of the four in every measured setting': holds |" in summary
    assert "Claim 'Q_updated > Q_init > vanilla SD': undecided |" in summary
    assert re.search(r"\| propd \| Table 1 \| measured \| 8 \| propd faster than AR: holds in \d+ of \d+ ", summary)


def test_settings_are_the_runs_not_the_recipes(built):
    page = built[3]
    propd = page.split("### `propd/table1`", 1)[1].split("\n### ", 1)[0]
    assert "LIMIT=16" not in page
    assert "Run settings: run.limit=4." in propd and "Prompts per cell: 8." in propd
    assert "Machine: fixture/CPU/2t. Measured: 2026-02-01. Git: 1111111111. Runs: 10." in propd


def test_a_dirty_tree_is_named_per_run(tmp_path):
    results = write_fixture_results(tmp_path / "results")
    for summary_file in (results / "runs").glob("*/summary.json"):  # every AR run measured on a dirty tree
        summary = json.loads(summary_file.read_text())
        if summary["method"] == "ar":
            summary["provenance"] = {**summary.get("provenance", {}), "git_sha": "2" * 40, "git_dirty": True}
            summary_file.write_text(json.dumps(summary))
    build_evidence(str(results), str(tmp_path / "evidence"))
    page = reproduced_page(None, str(tmp_path / "page.md"), str(tmp_path / "evidence"))
    rows = (tmp_path / "evidence" / "runs.csv").read_text().splitlines()
    dirty = [r.split(",") for r in rows if r.endswith(",True") and r.startswith("token_recycling/table1,")]
    assert dirty and all(r[2] == "ar" and r[6] == "2222222222" for r in dirty)
    text = " ".join(page.split())  # a long settings line is wrapped
    assert f"({len(dirty)} of 14 runs from a dirty tree, named in `evidence/runs.csv`)" in text


def test_page_without_evidence_says_so(tmp_path):
    md = reproduced_page(None, str(tmp_path / "page.md"), str(tmp_path / "none"))
    assert "No runs in `evidence/` yet" in md and "Run settings:" not in md  # the paper's numbers alone
    assert "| token_recycling | Table 1 | not measured | — | — |" in md
    assert not absolute_paths(md)


def test_an_evidence_folder_that_is_not_there_is_one_error_line(tmp_path, capsys):
    from bench.page.__main__ import main

    out = tmp_path / "page.md"
    assert main(["reproduced", "--evidence", str(tmp_path / "evidnce"), "--out", str(out)]) == 1
    assert capsys.readouterr().err == f"bench.page: error: no evidence folder {str(tmp_path / 'evidnce')!r}\n"
    assert not out.exists()


def test_committed_page_is_rebuilt_from_committed_evidence(tmp_path):
    """A fresh clone's `make reproduced` writes the committed REPRODUCED.md byte for byte (once evidence/ holds
    runs; until the first `make evidence reproduced` there is nothing to compare)."""
    evidence = project_path("evidence")
    if not (evidence / "runs").is_dir():
        pytest.skip("no runs committed in evidence/ yet")
    copy = tmp_path / "evidence"
    shutil.copytree(evidence, copy, ignore=shutil.ignore_patterns("tables", "figures"))
    page = reproduced_page(None, str(tmp_path / "REPRODUCED.md"), str(copy))
    assert page == project_path("REPRODUCED.md").read_text()


def test_a_notebook_regenerates_its_paper_from_the_evidence(built, tmp_path):
    """Notebooks read the evidence folder as a results folder (SPECREPRO_RESULTS=evidence)."""
    copy = tmp_path / "evidence"
    shutil.copytree(built[2], copy, ignore=shutil.ignore_patterns("tables", "figures"))
    env = {**os.environ, "SPECREPRO_RESULTS": str(copy), "MPLBACKEND": "Agg"}
    env.pop("SPECREPRO_MODEL", None)
    done = subprocess.run([sys.executable, str(project_path("notebooks/token_recycling.py"))], cwd=tmp_path, env=env,
                          text=True, capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("tables/token_recycling_table1.md", "figures/tr_fig3.png", "figures/tr_fig4.png",
                 "figures/tr_auto.md", "figures/tr_auto_forward_cost.csv"):
        assert (copy / name).is_file(), name
    assert "error:" not in done.stderr, done.stderr
