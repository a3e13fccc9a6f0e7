"""The docs cannot drift from the code: every doc's names checked by tests/doc_names.py (what it reads, there), and
that checker shown to report each planted error and accept what exists."""

from __future__ import annotations

import re

import pytest

from bench.paths import PROJECT
from tests.doc_names import GENERATED, docs, problems


@pytest.mark.parametrize("doc", docs(), ids=lambda p: p.relative_to(PROJECT).as_posix())
def test_doc_names_only_what_exists(doc):
    assert problems(doc.read_text(), doc) == []


def test_docs_folder_and_front_door():
    assert (PROJECT / "docs" / "README.md").is_file()
    assert len((PROJECT / "README.md").read_text().splitlines()) <= 150


def papers_table_figures(readme: str) -> dict[str, list[str]]:
    """Each paper row of the README's "The four papers" table: the decimal figures of its last cell (what was
    measured here), which the page of record states."""
    rows = [line for line in readme.split("## The four papers", 1)[1].split("\n## ", 1)[0].splitlines()
            if line.startswith("| [")]
    return {row.split("]")[0][3:]: re.findall(r"\d+\.\d+", row.rstrip(" |").rsplit("|", 1)[1]) for row in rows}


def test_the_front_door_s_paper_figures_are_reproduced_md_s():
    # The paper table summarises REPRODUCED.md: once a sitting re-measures an artifact and the page regenerates,
    # a figure the README still quotes from the old runs fails here (it happened: ProPD's row outlived its runs).
    # Each figure is looked up in its paper's own section, not in the page's thousands; one can still match by
    # chance, so this catches a stale row rather than every stale figure (four of that row's seven).
    sections = {part.split(" (", 1)[0].split(":", 1)[0]: part
                for part in (PROJECT / "REPRODUCED.md").read_text().split("\n## ")[1:]}
    figures = papers_table_figures((PROJECT / "README.md").read_text())
    assert set(figures) == {"Token Recycling", "DySpec", "ProPD", "Post-use & Pre-cut"} <= set(sections)
    stale = {paper: [f for f in found if not re.search(rf"(?<![\d.]){re.escape(f)}(?![\d])", sections[paper])]
             for paper, found in figures.items()}
    assert not any(stale.values()), stale


def test_papers_table_figures_reads_the_last_cell():
    readme = ("## The four papers\n\n| paper | targets | here |\n|---|---|---|\n"
              "| [A](a.md) | `make a-1.5` | holds: 2.04x at 1, 0.51-0.82x |\n\n## Layout\n| [B](b.md) | 9.9 |\n")
    assert papers_table_figures(readme) == {"A": ["2.04", "0.51", "0.82"]}


def test_generated_roots_are_ignored_by_git():
    ignored = (PROJECT / ".gitignore").read_text().split()
    for root in GENERATED:
        # "data/cache" (no slash) also ignores a symlink of that name, e.g. a worktree's link to the main cache.
        assert root in ignored or root.rstrip("/") in ignored or f"{root}*" in ignored, root


PLANTED = """
# Planted

Read `bench/core/no_such_file.py` and conf/experiment/no_such_paper/, import `bench.core.no_such_module` and
`bench.core.kv.no_such_name`, then run `make no-such-target`, `make demo MODEL=no-such-model`,
`python -m bench.run method=no_such_method experiment=token_recycling/table1 run.no_such_key=1`,
`python -m bench.no_such_entry`, `python -m bench.report no_such/artifact`, `reproduce-no-such-paper`, see `no_such_helper.py`,
`tests/test_kv.py::test_no_such_test` and `results/figures/no_such_figure.png`, set `SPECREPRO_NO_SUCH`,
follow [a link](no_such.md) and [an anchor](#no-such-heading).
"""
PLANTED_GOOD = """
# Planted

Read `bench/core/engine.py`, conf/experiment/dyspec/ and `conf/experiment/<paper>/*.yaml`, import
`bench.core.kv.new_cache`, run `make demo`, `make reproduce-<paper>-<artifact> MODEL=smollm2-135m`,
`python -m bench.run method=pld experiment=dyspec/table1 dataset=c4,openwebtext run.limit=3 tree@method.tree=tr_2_2_2`,
`python -m bench.report dyspec/table`, see `draft_proposer.py`, `results/figures/tr_fig{3,4}.png` and
`results/runs/<run_id>/summary.json`, set `SPECREPRO_RESULTS`, follow [the front door](../README.md) and
[this page](#planted).
"""


def test_checker_reports_each_planted_error():
    found = "\n".join(problems(PLANTED, PROJECT / "docs" / "planted.md"))
    for bad in ("bench/core/no_such_file.py", "conf/experiment/no_such_paper/", "bench.core.no_such_module",
                "no_such_name", "no-such-target", "MODEL=no-such-model", "method=no_such_method",
                "experiment=token_recycling/table1", "run.no_such_key", "python -m bench.no_such_entry",
                "no_such/artifact", "reproduce-no-such-paper", "no_such_helper.py", "test_no_such_test", "no_such_figure",
                "SPECREPRO_NO_SUCH", "no_such.md", "#no-such-heading"):
        assert bad in found, f"{bad} not reported; reported:\n{found}"


def test_checker_accepts_what_exists():
    assert problems(PLANTED_GOOD, PROJECT / "docs" / "planted.md") == []
