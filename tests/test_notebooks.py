"""Every notebooks/*.py (Jupytext py:percent) runs as a plain script on a synthetic results dir, reading only.

No Jupyter kernel is needed: py:percent files are valid Python. SPECREPRO_RESULTS points at the fixture.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.tr_results import write_fixture_results

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.py"))
# notebook -> files it must leave under the results dir
EXPECTED = {
    "tr_table1.py": ["tables/token_recycling_table1.md", "tables/token_recycling_table1.csv",
                     "tables/token_recycling_table1.tex"],
    "tr_fig3.py": ["figures/tr_fig3.png", "figures/tr_fig3.csv"],
    "tr_fig4.py": ["figures/tr_fig4.png", "figures/tr_fig4.csv"],
    "tr_auto.py": ["figures/tr_auto.png", "figures/tr_auto.csv", "figures/tr_auto.md",
                   "figures/tr_auto_forward_cost.csv"],
}


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Run all notebooks at once (each pays the torch/pandas import), each on its own copy of the fixture."""
    procs = {}
    for nb in NOTEBOOKS:
        results = write_fixture_results(tmp_path_factory.mktemp(nb.stem) / "results")
        env = {**os.environ, "SPECREPRO_RESULTS": str(results), "MPLBACKEND": "Agg"}
        env.pop("SPECREPRO_MODEL", None)
        runs_before = sorted(p.name for p in (results / "runs").iterdir())
        procs[nb.name] = (results, runs_before, subprocess.Popen(
            [sys.executable, str(nb)], cwd=tmp_path_factory.getbasetemp(), env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    out = {}
    for name, (results, runs_before, p) in procs.items():
        stdout, _ = p.communicate(timeout=300)
        out[name] = (results, runs_before, p.returncode, stdout)
    return out


def test_every_notebook_is_covered():
    assert {nb.name for nb in NOTEBOOKS} == set(EXPECTED)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_jupytext_percent_format(nb):
    text = nb.read_text()
    assert text.startswith("# ---\n# jupyter:\n#   jupytext:")
    assert "format_name: percent" in text and "\n# %%\n" in text and "\n# %% [markdown]\n" in text


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_runs_and_writes_its_files(executed, name):
    results, runs_before, rc, stdout = executed[name]
    assert rc == 0, stdout
    for rel in EXPECTED[name]:
        path = results / rel
        assert path.is_file() and path.stat().st_size > 0, f"{name} did not write {rel}"
        assert str(path) in stdout  # the notebook says what it wrote
    assert sorted(p.name for p in (results / "runs").iterdir()) == runs_before  # read only: no new runs
    assert not list(results.glob("*/.*"))  # no temp files left behind


def test_table1_notebook_shows_ours_beside_the_paper(executed):
    _, _, _, stdout = executed["tr_table1.py"]
    assert "ours (paper)" in stdout and "(110.06)" in stdout  # the paper's 7B Token Recycling tok/s
