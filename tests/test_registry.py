"""Adding an artifact touches its report module (and its experiment YAML) only: a module dropped into a paper's
package is found by the CLI, gets its make targets, its REPRODUCED.md section and summary row, and its notebook
section, with no other file edited (docs/adding_a_paper.md)."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

from bench.report import registry
from bench.report.__main__ import main
from bench.report.makefile import makefile, targets

TOY = textwrap.dedent('''
    """A toy table: how many runs the results folder holds."""
    from bench.report.output import Report
    from bench.report.registry import Artifact, Cover, Recipe, Shown
    from bench.report.select import footer

    def toy_table(runs, model=None):
        return Report.tables("toy", {"md": "\\n".join([f"{len(runs.runs)} runs", *footer("Ours: toy.", runs.runs)])})

    ARTIFACT = Artifact("toy", "a toy table -> tables/toy.md", toy_table, covers=(Cover("Figure 8"),), rank=99,
                        recipes=(Recipe("reproduce-toy-table", "the toy's runs, then the table",
                                        ("$(PY) -m bench.run experiment=toy/table1 $(RUN_ARGS)",
                                         "$(PY) -m bench.report propd/toy --model $(MODEL)"), ("heads",)),),
                        shown=(Shown("make reproduce-toy-table"),), experiments=("toy_table1",), common=("model",))
''')


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """bench/report/propd/toy.py, as if added to the package (its folder joins the package's path)."""
    (tmp_path / "toy.py").write_text(TOY)
    package = importlib.import_module("bench.report.propd")
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    yield registry.paper_artifacts("propd")["toy"]
    sys.modules.pop("bench.report.propd.toy", None)


def test_the_cli_finds_it(toy, tmp_path, capsys):
    assert "propd/toy" in registry.names() and toy.full_name == "propd/toy"
    (tmp_path / "results" / "runs").mkdir(parents=True)
    assert main(["propd/toy", "--results", str(tmp_path / "results")]) == 0
    assert capsys.readouterr().out.startswith("0 runs")
    assert (tmp_path / "results" / "tables" / "toy.md").is_file()


def test_make_gets_its_targets(toy):
    text = makefile()
    assert "reproduce-toy-table: setup heads  ## the toy's runs, then the table\n" in text
    assert "\t$(PY) -m bench.run experiment=toy/table1 $(RUN_ARGS)\n" in text
    assert targets()["reproduce-propd/toy"] == "propd/toy"  # make reproduce A=propd/toy


def test_the_page_and_the_notebook_get_its_sections(toy, monkeypatch):
    from bench.report import notebook, reproduced

    package = importlib.import_module("bench.report.propd")
    monkeypatch.setattr(package, "CONTENTS", (*package.CONTENTS, "Figure 8"))  # a paper item with no target yet
    assert reproduced.coverage()[len(package.CONTENTS) - 1 + rows_before("propd")] == ("propd", toy.covers[0], "toy")
    assert [s.command for s in toy.shown] == ["make reproduce-toy-table"]
    assert list(registry.paper_artifacts("propd"))[-1] == "toy"  # rank 99: the page's last ProPD section
    shown = []
    monkeypatch.setattr(notebook, "section", lambda artifact, options: shown.append(artifact.name))
    notebook.sections("propd")
    assert shown[-1] == "toy"


def rows_before(paper: str) -> int:
    """Summary rows of the papers before `paper` (alphabetical)."""
    return sum(len(importlib.import_module(f"bench.report.{p}").CONTENTS) for p in registry.papers() if p < paper)


def test_every_declared_recipe_has_a_unique_target():
    found = [r.target for a in registry.every() for r in a.recipes]
    assert len(found) == len(set(found)) and "reproduce-propd-table1" in found
