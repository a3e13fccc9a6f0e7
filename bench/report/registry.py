"""The artifact declarations (`ARTIFACT = Artifact(...)` in each report module) and their registry, found lazily (a
paper's modules load when one of its artifacts is asked for); docs/reports.md."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.errors import HarnessError
from bench.report.output import write
from bench.report.select import RunSet

PACKAGE = "bench.report"


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    kwargs: dict = field(default_factory=dict)


def option(*flags: str, **kwargs) -> Option:
    """An argparse option of one artifact: option("--dataset", help="...")."""
    return Option(flags, kwargs)


# The options many artifacts share, named in Artifact.common.
COMMON = {
    "model": option("--model", default=None, help="default: the model of the most recent matching run"),
    "paper_size": option("--paper-size", default=None, help="the paper's rows to compare with; default: the runs'"),
    "draft": option("--draft", default=None, help="the drafter whose runs to show: eagle, trained or a full name "
                    "(eagle:<id>, trained:<id>); default: that of the most recent draft-model run"),
}


@dataclass(frozen=True)
class Cover:
    """One of the paper's artifacts (a summary row of REPRODUCED.md) an artifact of ours reproduces."""

    label: str  # the paper's name for it: "Table 1", "Figure 7"
    options: dict = field(default_factory=dict)  # shown by the section whose options include these
    offline: str | None = None  # why it cannot be measured offline (the hub, hardware), when it cannot


@dataclass(frozen=True)
class Recipe:
    """A make target that produces an artifact's runs and then the artifact (generated into the Makefile)."""

    target: str  # "reproduce-propd-table1"
    help: str  # its `make help` line
    steps: tuple[str, ...]  # recipe lines, with the Makefile's variables ($(PY), $(SWEEP), $(MODEL), ...)
    needs: tuple[str, ...] = ()  # make targets built first (setup always): heads, draft, datastore, tree-stats


@dataclass(frozen=True)
class Shown:
    """A section of REPRODUCED.md: the artifact built with `options`; `command` is the recipe the page shows."""

    command: str
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Artifact:
    name: str  # the part after the slash: "table1"
    help: str  # one line: what it shows -> what it writes
    build: Callable  # (RunSet, **options) -> Report; with `folder`: (results folder, **options) -> text or paths
    covers: tuple[Cover, ...] = ()  # the paper's artifacts it reproduces (REPRODUCED.md's summary)
    recipes: tuple[Recipe, ...] = ()  # its make targets; the first is `make reproduce A=<paper>/<name>`
    shown: tuple[Shown, ...] = ()  # its sections of REPRODUCED.md, in order
    rank: int = 0  # sections of a paper's page in rank order
    experiments: tuple[str, ...] = ()  # the experiment labels its runs carry (conf/experiment/<paper>/)
    paper_csv: tuple[str, ...] = ()  # its published numbers (bench/report/<paper>/paper_tables/)
    options: tuple[Option, ...] = ()
    common: tuple[str, ...] = ("model", "paper_size")  # the common CLI options its build takes
    needs_runs: bool = True  # the CLI stops early when <results>/runs does not exist
    per_drafter: bool = False  # REPRODUCED.md shows it once per drafter of the evidence
    baseline: str = "ar"  # the method its speeds are relative to (its projection on the paper's setting pairs with it)
    folder: bool = False  # a store-level tool (evidence, reproduced): build takes the results folder itself
    paper: str = ""  # filled in by the registry

    @property
    def full_name(self) -> str:
        return f"{self.paper}/{self.name}" if self.paper else self.name

    @property
    def arguments(self) -> tuple[Option, ...]:
        """Its options, the common ones first (the CLI's flags, the notebooks' SPECREPRO_<OPTION>)."""
        return (*(COMMON[c] for c in self.common), *self.options)


def produce(artifact: Artifact, results_dir: str | Path, **options) -> str | list[Path]:
    """Build the artifact on the runs under results_dir and write it there; returns the markdown it shows, else the
    paths it wrote (what the CLI prints)."""
    if artifact.folder:
        return artifact.build(str(results_dir), **options)
    return write(artifact.build(RunSet.read(results_dir), **options), results_dir)


class UnknownArtifact(HarnessError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def generic() -> dict[str, Artifact]:
    """The artifacts of no paper (bench/report/generic.py)."""
    return {a.name: a for a in importlib.import_module(f"{PACKAGE}.generic").ARTIFACTS}


def papers() -> list[str]:
    """The paper packages under bench/report/ (by folder; none is imported)."""
    package = importlib.import_module(PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.ispkg)


def declared(module) -> tuple[Artifact, ...]:
    one = getattr(module, "ARTIFACT", None)
    return (one,) if one is not None else tuple(getattr(module, "ARTIFACTS", ()))


def paper_artifacts(paper: str) -> dict[str, Artifact]:
    """name -> artifact of one paper, in rank order (then module order): imports the paper's modules."""
    if not paper.isidentifier() or paper not in papers():
        raise UnknownArtifact(f"no paper {paper!r} (papers: {', '.join(papers())})")
    package = importlib.import_module(f"{PACKAGE}.{paper}")
    found = [replace(a, paper=paper) for m in pkgutil.iter_modules(package.__path__)
             for a in declared(importlib.import_module(f"{package.__name__}.{m.name}"))]
    return {a.name: a for a in sorted(found, key=lambda a: a.rank)}


def aliases() -> dict[str, str]:
    """Old names that keep working: the generic module's ALIASES."""
    return importlib.import_module(f"{PACKAGE}.generic").ALIASES


def names() -> list[str]:
    """Every artifact name (imports every paper's report modules)."""
    return sorted(generic()) + [f"{p}/{a}" for p in papers() for a in paper_artifacts(p)]


def every() -> list[Artifact]:
    """Every artifact: the generic ones, then each paper's in rank order."""
    return [*generic().values(), *(a for p in papers() for a in paper_artifacts(p).values())]


def resolve(name: str) -> tuple[str, Artifact]:
    """(canonical name, artifact) of a name or an alias; UnknownArtifact names what there is."""
    name = aliases().get(name, name)
    if name in generic():
        return name, generic()[name]
    paper, slash, artifact = name.partition("/")
    if slash:
        found = paper_artifacts(paper)
        if artifact in found:
            return name, found[artifact]
        raise UnknownArtifact(f"{paper} has no artifact {artifact!r} (has: {', '.join(found)})")
    raise UnknownArtifact(f"unknown report {name!r} (see --list)")
