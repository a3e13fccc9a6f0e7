"""Nothing about the papers' artifacts is kept by hand where it can go stale unnoticed: every list the README, the
docs, the notebooks and the page keep of them is checked against the declarations (each paper's `PAPER` and its
modules' `ARTIFACT`s), so a new artifact fails here until each list names it (docs/adding_a_paper.md)."""

from __future__ import annotations

import re

import pytest

from bench.paths import PROJECT
from bench.report.registry import paper, paper_artifacts, papers


def listed_everywhere() -> list[tuple[str, str | None]]:
    """(full name, make target) of every paper's artifact; the target is its first recipe's (None: it has none)."""
    return [(a.full_name, a.recipes[0].target if a.recipes else None)
            for p in papers() for a in paper_artifacts(p).values()]


def readme_row(name: str) -> str:
    """The README's paper-table row of paper `name` (the row linking its docs/papers/ page)."""
    rows = [line for line in (PROJECT / "README.md").read_text().splitlines()
            if line.startswith("|") and f"(docs/papers/{name}.md)" in line]
    assert len(rows) == 1, f"README.md: no single paper-table row links docs/papers/{name}.md"
    return rows[0]


@pytest.mark.parametrize("name", papers())
def test_the_readme_row_names_every_make_target(name):
    row = readme_row(name)
    missing = [t for a, t in listed_everywhere() if a.startswith(f"{name}/") and t and f"`make {t}`" not in row]
    assert not missing, f"README.md's {name} row lacks {missing}"


@pytest.mark.parametrize("name", papers())
def test_the_docs_name_every_artifact(name):
    reports, page = (PROJECT / "docs" / "reports.md").read_text(), (PROJECT / "docs" / "papers" / f"{name}.md").read_text()
    mine = [(a, t) for a, t in listed_everywhere() if a.startswith(f"{name}/")]
    assert not [a for a, _ in mine if f"`{a}`" not in reports], "docs/reports.md's list of artifacts"
    assert not [a for a, t in mine if a not in page and (t is None or t not in page)], f"docs/papers/{name}.md"


@pytest.mark.parametrize("name", papers())
def test_a_notebook_per_paper_shows_its_declarations(name):
    """Its sections come from the declarations (bench.report.notebook.sections), not from a list of its own."""
    text = (PROJECT / "notebooks" / f"{name}.py").read_text()
    assert re.search(rf"sections\(\"{name}\"\)", text)


def test_every_content_label_is_covered_or_said_to_have_no_target():
    """A paper's contents name its items in order; each artifact's Cover labels one of them (or is appended)."""
    for name in papers():
        labels = {c.label for a in paper_artifacts(name).values() for c in a.covers}
        assert labels <= set(paper(name).contents), f"{name}: covers outside its contents {labels - set(paper(name).contents)}"


def test_the_notebook_test_expects_every_artifacts_files():
    """tests/test_notebooks.py lists the files each notebook must write: every artifact's (its help's `-> <file>`)
    is there, or is named with the reason the fixture cannot make it."""
    from tests.test_notebooks import EXPECTED, NOT_ON_THE_FIXTURE

    missing = []
    for name in papers():
        for a in paper_artifacts(name).values():
            written = re.search(r"->\s*(\S+)", a.help)
            stem = written.group(1).split(".")[0].replace("{N}", "") if written else None
            files = EXPECTED.get(f"{name}.py", [])  # a new paper's notebook: its files go there (or the reason)
            if not any(f.startswith(stem or "?") for f in files) and a.full_name not in NOT_ON_THE_FIXTURE:
                missing.append(a.full_name)
    assert not missing, (f"tests/test_notebooks.py's EXPECTED lacks {missing}: add the files each writes there, or "
                         "the artifact to NOT_ON_THE_FIXTURE with the reason the fixture has no runs for it")
