"""Every report artifact, run through the one CLI on the fixture results, writes byte for byte what the reports
wrote before they moved into bench/report/ (tests/fixtures/golden_reports/, made with the old bench/report.py,
bench/figures.py and bench/dyspec_table5.py on the same fixture; the results path is written `<results>`).
Where a report changes on purpose (issue 30 added intervals to the cells), regenerate them with
`UPDATE_GOLDEN=1 pytest tests/test_report_golden.py` and review the diff before committing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.report.__main__ import main
from bench.report.registry import aliases, names
from tests.fixtures.dyspec_results import write_full
from tests.fixtures.tr_results import write_fixture_results

GOLDEN = Path(__file__).parent / "fixtures" / "golden_reports"
# New names, and some old ones (aliases); the golden files were written in this order by the old CLIs.
CALLS = [
    ["runs"],
    ["token_recycling/table1"],
    ["dyspec/table", "--paper-table", "1"],
    ["dyspec_table", "--paper-table", "2"],
    ["dyspec/table", "--paper-size", "70B"],
    ["dyspec/time_breakdown"],
    ["token_recycling/fig3"],
    ["tr_fig4"],
    ["token_recycling/auto"],
    ["dyspec/table5", "--sizes", "64,128", "--trees-per-size", "3", "--fig-sizes", "64", "--prefixes", "0,64"],
]


@pytest.fixture(scope="module")
def produced(tmp_path_factory) -> dict[str, bytes]:
    results = tmp_path_factory.mktemp("golden") / "results"
    write_fixture_results(results)
    write_full(results)
    for call in CALLS:
        assert main([*call, "--results", str(results)]) == 0, call
    files = [*(results / "tables").iterdir(), *(results / "figures").glob("*.csv"),
             *(results / "figures").glob("*.md")]
    out = {f.name: f.read_bytes().replace(str(results).encode(), b"<results>") for f in files}
    if os.environ.get("UPDATE_GOLDEN"):
        for name, data in out.items():
            (GOLDEN / name).write_bytes(data)
    return out


# Added after the move, so they have no golden file: tests/test_propd_report.py ProPD's artifacts (every cell checked by hand on tests/fixtures/propd_results.py),
# tests/test_draft_sd_report.py `draft_sd`, tests/test_projection.py `project`, tests/test_holistic_report.py the Post-use & Pre-cut tables.
NEW = {"draft_sd", "project", *(f"propd/{a}" for a in ("table1", "table2", "table3", "fig3", "fig7")),
       *(f"holistic/{a}" for a in ("table1", "table3", "table4", "table9", "table10", "fig4", "fig5", "settings")),
       "dyspec/fig2", "dyspec/fig5", "propd/fig6", "holistic/fig2"}  # tests/test_step_figures.py


def test_every_artifact_is_called():
    called = {aliases().get(c[0], c[0]) for c in CALLS}
    assert called == set(names()) - NEW


def test_the_same_files_as_before(produced):
    assert sorted(produced) == sorted(p.name for p in GOLDEN.iterdir())


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.iterdir()))
def test_byte_identical(produced, name):
    assert produced.get(name) == (GOLDEN / name).read_bytes(), name
