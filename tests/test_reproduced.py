"""REPRODUCED.md is generated from results/ only: each paper's tables with machine, date, git sha, command."""

from __future__ import annotations

from bench.report.reproduced import reproduced_page
from tests.fixtures.dyspec_results import write_full
from tests.fixtures.tr_results import write_fixture_results


def test_page_names_every_paper_its_runs_and_their_provenance(tmp_path):
    results = write_full(write_fixture_results(tmp_path / "results"))
    out = tmp_path / "REPRODUCED.md"
    md = reproduced_page(str(results), str(out))
    assert out.read_text() == md and md.startswith("# What the harness reproduced")
    assert "### `token_recycling/table1`: `make reproduce-tr-table1 LIMIT=5`" in md
    assert "### `dyspec/table`: `make draft && make reproduce-dyspec-table1 LIMIT=10`" in md
    assert "Machine: fixture/CPU/2t. Measured: 2026-01-01. Git: 0000000000." in md  # TR fixture provenance
    assert "Machine: fixture/GPU. Measured: 2026-01-01. Git: unknown. Runs: 24." in md
    assert "Runs: 24. Run settings: " in md  # what the runs were given, beside the recipe's command
    assert "Token Recycling Table 1, ours (paper)" in md and "DySpec Table 1, ours (paper)" in md


def test_page_without_runs_says_so(tmp_path):
    md = reproduced_page(str(tmp_path / "results"), str(tmp_path / "page.md"))
    # Tables show the paper's numbers alone; ProPD's figures have none to show.
    assert md.count("No runs under") == 5
    assert md.count("Not measured: no complete ar/bpd/medusa/propd runs") == 1
    assert md.count("Not measured: nothing for ProPD Figure 3") == 1
