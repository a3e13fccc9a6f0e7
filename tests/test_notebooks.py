"""Every notebooks/<paper>.py (Jupytext py:percent, a section per report artifact) runs as a plain script on a
synthetic results dir, reading only, and writes every artifact of its paper.

No Jupyter kernel is needed: py:percent files are valid Python. SPECREPRO_RESULTS points at the fixture, which
holds Token Recycling's, DySpec's, ProPD's and Post-use & Pre-cut's fixture runs (tests/fixtures/tr_results.py,
dyspec_results.py, propd_results.py with ProPD's two Figure 3 files, holistic_results.py, step_results.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.dyspec_results import write_full
from tests.fixtures.holistic_results import write_holistic_results
from tests.fixtures.propd_results import write_propd_results
from tests.fixtures.step_results import write_step_results
from tests.fixtures.tr_results import write_fixture_results

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.py"))
# notebook (relative to notebooks/) -> files it must leave under the results dir
EXPECTED = {
    "token_recycling.py": [*(f"tables/token_recycling_table1.{ext}" for ext in ("md", "csv", "tex")),
                           *(f"figures/tr_fig{n}.{ext}" for n in (3, 4) for ext in ("png", "csv", "md")),
                           "figures/tr_auto.png", "figures/tr_auto.csv", "figures/tr_auto.md",
                           "figures/tr_auto_forward_cost.csv"],
    "dyspec.py": ["tables/dyspec_table1.md", "tables/dyspec_table1.csv", "tables/dyspec_table1.tex",
                  "tables/dyspec_time_breakdown.md", "tables/dyspec_time_breakdown.csv",
                  "figures/dyspec_time_breakdown.png", "tables/dyspec_table5.md", "tables/dyspec_table5.csv",
                  "figures/dyspec_fig9_block_counts.png", "figures/dyspec_fig9_block_counts.csv",
                  "figures/dyspec_fig7_masks.png", *(f"tables/dyspec_table4.{ext}" for ext in ("md", "csv", "tex")),
                  *(f"figures/dyspec_fig{n}.{ext}" for n in (2, 5) for ext in ("png", "csv", "md"))],
    "propd.py": [*(f"tables/propd_table{n}.{ext}" for n in (1, 2, 3) for ext in ("md", "csv", "tex")),
                 *(f"figures/propd_fig7.{ext}" for ext in ("png", "csv", "md", "tex")),
                 *(f"figures/propd_fig3.{ext}" for ext in ("png", "csv", "md", "tex")), "figures/propd_fig3_fit.csv",
                 *(f"figures/propd_fig6.{ext}" for ext in ("png", "csv", "md"))],
    "holistic.py": [*(f"tables/holistic_table{n}.{ext}" for n in (1, 3, 4, 9, 10) for ext in ("md", "csv", "tex")),
                    *(f"figures/holistic_fig{n}.{ext}" for n in (2, 4, 5) for ext in ("png", "csv", "md"))],
}
# Artifacts the fixture has no runs for (their notebook section prints one `error:` line), and why.
NOT_ON_THE_FIXTURE = {"holistic/settings": "the settings sweep (experiment holistic_sweep) is not in the fixture"}
# Table 5's sweep, small (the notebook's defaults are the paper's sizes, 20 trees each).
TABLE5 = {"SPECREPRO_SIZES": "64,256", "SPECREPRO_TREES_PER_SIZE": "3", "SPECREPRO_FIG_SIZES": "64"}


def rel(nb: Path) -> str:
    return nb.relative_to(REPO / "notebooks").as_posix()


# The notebooks share one code path (bench.report.notebook.sections over each paper's declarations): make test runs
# Token Recycling's, make test-slow the other three.
SLOW = {"dyspec.py", "propd.py", "holistic.py"}


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """name -> (results, runs before, return code, output) of each notebook, run once on its own copy of the fixture."""
    out = {}

    def run(name: str):
        if name not in out:
            results = write_propd_results(write_full(write_fixture_results(tmp_path_factory.mktemp(name[:-3]) /
                                                                           "results")))
            write_holistic_results(results)
            # the figures of per-step records and hit rates: older than every other fixture run, of their models
            write_step_results(results, day="2025-12-01", models={"dyspec": "smollm2-135m", "propd": "smollm2-135m"})
            env = {**{k: v for k, v in os.environ.items() if not k.startswith("SPECREPRO_")},  # the user's choices
                   "SPECREPRO_RESULTS": str(results), "MPLBACKEND": "Agg", **TABLE5}
            runs_before = sorted(p.name for p in (results / "runs").iterdir())
            p = subprocess.run([sys.executable, str(REPO / "notebooks" / name)], cwd=tmp_path_factory.getbasetemp(),
                               env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
                               check=False)
            out[name] = (results, runs_before, p.returncode, p.stdout)
        return out[name]

    return run


def test_every_notebook_is_covered():
    assert {rel(nb) for nb in NOTEBOOKS} == set(EXPECTED)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=rel)
def test_jupytext_percent_format(nb):
    text = nb.read_text()
    assert text.startswith("# ---\n# jupyter:\n#   jupytext:")
    assert "format_name: percent" in text and "\n# %%\n" in text and "\n# %% [markdown]\n" in text


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(EXPECTED)])
def test_notebook_runs_and_writes_its_files(executed, name):
    results, runs_before, rc, stdout = executed(name)
    assert rc == 0, stdout
    for rel_path in EXPECTED[name]:
        path = results / rel_path
        assert path.is_file() and path.stat().st_size > 0, f"{name} did not write {rel_path}"
        assert str(path) in stdout  # the notebook says what it wrote
    assert sorted(p.name for p in (results / "runs").iterdir()) == runs_before  # read only: no new runs
    assert not list(results.glob("*/.*"))  # no temp files left behind


def test_token_recycling_notebook_shows_ours_beside_the_paper(executed):
    _, _, _, stdout = executed("token_recycling.py")
    assert "ours (paper)" in stdout and "(110.06)" in stdout  # the paper's 7B Token Recycling tok/s
    assert re.search(r" Model Forward +target_forward\+prefill +88.8 ", stdout)  # Figure 4, prefill folded in


@pytest.mark.slow
def test_dyspec_notebook_shows_ours_beside_the_paper(executed):
    _, _, _, stdout = executed("dyspec.py")
    assert "DySpec Table 1, ours (paper)" in stdout and "5.00 [5.00, 5.00] (7.30)" in stdout  # c4 T=0 ms/token
    assert "Tree construction (tree)" in stdout and "under 2%" in stdout  # Figure 4
    assert "(22.5)" in stdout  # Table 5: the paper's 256-node DFS tile count


@pytest.mark.slow
def test_propd_notebook_shows_ours_beside_the_paper(executed):
    _, _, _, stdout = executed("propd.py")
    assert "Vicuna-7B (paper, A6000)" in stdout and "SmolLM2-135M (embedded), ours: speedup" in stdout  # Table 1
    assert "80.0% [80.0%, 80.0%] (79.0%)" in stdout and "Claim (1)" in stdout and "ours: holds" in stdout  # Table 2
    assert "2.50 [2.50, 2.50] (3.28)" in stdout and "Claim (2)" in stdout  # Table 3, its interval a point
    assert "not loadable offline" in stdout  # Figure 7
    assert "R^2" in stdout and "Paper: early layers' heads are weak" in stdout  # Figure 3


@pytest.mark.slow
def test_holistic_notebook_shows_ours_beside_the_paper(executed):
    _, _, _, stdout = executed("holistic.py")
    assert "Ours (λ≤24)" in stdout and "0.80 (3.23)" in stdout  # Tables 1-2
    assert "Claim, reuse raises utilisation" in stdout and "(2.87)" in stdout  # Table 3
    assert "9.18/68.2%" in stdout  # Table 4: the paper's MAT + the bonus token it leaves out
    assert "Q_updated > Q_init > vanilla SD, from paired 95% intervals" in stdout  # Figure 4
    assert "best lambda differs between tasks: undecided" in stdout  # Figure 5: one question per run
    assert "M_d forward" in stdout and "(21)" in stdout  # Table 9
    assert "2.00 (2.42)" in stdout  # Table 10


def test_a_section_without_runs_is_one_line_and_the_rest_run(tmp_path):
    """A results dir holding only Token Recycling's Figure 4 run: the other sections say what is missing."""
    from tests.fixtures.tr_results import ResultsWriter, write_fig4

    write_fig4(ResultsWriter(tmp_path / "results"))
    env = {**os.environ, "SPECREPRO_RESULTS": str(tmp_path / "results"), "MPLBACKEND": "Agg"}
    env.pop("SPECREPRO_MODEL", None)
    p = subprocess.run([sys.executable, str(REPO / "notebooks" / "token_recycling.py")], cwd=tmp_path, env=env,
                       text=True, capture_output=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "results" / "figures" / "tr_fig4.png").is_file()
    assert "token_recycling/fig3: error: no complete token_recycling runs" in p.stderr
    assert "make reproduce-tr-fig3" in p.stderr
