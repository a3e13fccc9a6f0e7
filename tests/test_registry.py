"""Adding an artifact touches its report module (and its experiment YAML) only: a module dropped into a paper's
package is found by the CLI, gets its make targets, its REPRODUCED.md section and summary row, and its notebook
section, with no other file edited (docs/adding_a_paper.md)."""

from __future__ import annotations

import importlib
import shutil
import sys
import textwrap

import pytest

from bench.paths import PROJECT
from bench.report import registry
from bench.report.__main__ import main
from bench.report.makefile import makefile, targets

TOY = textwrap.dedent('''
    """A toy table: how many runs the results folder holds, beside the paper's number."""
    from bench.report.output import Report
    from bench.report.propd import PAPER
    from bench.report.select import footer

    def toy_table(runs, model=None):
        paper = runs.paper()["runs"].iloc[0]
        return Report.tables("toy", {"md": "\\n".join([f"{len(runs.own().runs)} runs ({paper})",
                                                        *footer("Ours: toy.", runs.runs)])})

    ARTIFACT = PAPER.declare("toy", "a toy table -> tables/toy.md", toy_table, 99, "the toy's runs, then the table",
                             "toy", cover="Figure 8", paper_csv=("toy_paper.csv",))
''')


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """bench/report/propd/toy.py and its paper CSV, as if added to the package (its folder joins the package's
    path); nothing else is edited or patched."""
    (tmp_path / "toy.py").write_text(TOY)
    (tmp_path / "paper_tables").mkdir()
    (tmp_path / "paper_tables" / "toy_paper.csv").write_text("runs\n7\n")
    package = importlib.import_module("bench.report.propd")
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    yield registry.paper_artifacts("propd")["toy"]
    sys.modules.pop("bench.report.propd.toy", None)


def test_the_cli_finds_it(toy, tmp_path, capsys):
    assert "propd/toy" in registry.names() and toy.full_name == "propd/toy" and toy.experiments == ("propd_toy",)
    (tmp_path / "results" / "runs").mkdir(parents=True)
    assert main(["propd/toy", "--results", str(tmp_path / "results")]) == 0
    assert capsys.readouterr().out.startswith("0 runs (7)")  # its paper CSV, read for it
    assert (tmp_path / "results" / "tables" / "toy.md").is_file()


def test_a_declared_paper_csv_that_is_not_there_is_one_error_line(toy, tmp_path, capsys):
    (tmp_path / "paper_tables" / "toy_paper.csv").unlink()
    (tmp_path / "results" / "runs").mkdir(parents=True)
    assert main(["propd/toy", "--results", str(tmp_path / "results")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("bench.report: error: propd/toy: paper_csv toy_paper.csv not in") and "\n" not in err


def test_make_gets_its_targets(toy):
    text = makefile()
    assert "reproduce-propd-toy: setup heads  ## the toy's runs, then the table\n" in text
    assert "\t$(PY) -m bench.run $(SWEEP) experiment=propd/toy $(PROPD_ARGS)\n" in text
    assert targets()["reproduce-propd/toy"] == "propd/toy"  # make reproduce A=propd/toy


def test_the_page_and_the_notebook_get_its_sections(toy, monkeypatch):
    from bench.page import reproduced
    from bench.report import notebook

    rows = [(paper, c.label, name) for paper, c, name in reproduced.coverage() if paper == "propd"]
    assert rows[-1] == ("propd", "Figure 8", "toy")  # a label the paper's contents do not name: after them
    assert [s.command for s in toy.shown] == ["make reproduce-propd-toy LIMIT=16"]
    assert list(registry.paper_artifacts("propd"))[-1] == "toy"  # rank 99: the page's last ProPD section
    shown = []
    monkeypatch.setattr(notebook, "section", lambda artifact, options: shown.append(artifact.name))
    notebook.sections("propd")
    assert shown[-1] == "toy"


def test_its_experiment_yaml_composes_with_its_label(toy, tmp_path):
    """Its YAML, dropped into a copy of conf/, composes and labels its runs with the artifact's experiment."""
    from hydra import compose, initialize_config_dir

    conf = tmp_path / "conf"
    shutil.copytree(PROJECT / "conf", conf)
    (conf / "experiment" / "propd" / "toy.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /method: propd\n\nrun:\n  experiment: propd_toy\n")
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        config = compose("config", overrides=["experiment=propd/toy"])
    assert config.run.experiment in toy.experiments and config.method.name == "propd"


def test_the_docs_check_names_it(toy):
    from tests.test_declarations import listed_everywhere

    assert "propd/toy" in {name for name, _ in listed_everywhere()}  # so a doc without it fails the check


def test_every_declared_recipe_has_a_unique_target():
    found = [r.target for a in registry.every() for r in a.recipes]
    assert len(found) == len(set(found)) and "reproduce-propd-table1" in found
