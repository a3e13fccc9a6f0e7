"""The registry of the declarations (each paper package's `PAPER`, each report module's `ARTIFACT`: declare.py),
found lazily (a paper's modules load when one of its artifacts is asked for); docs/reports.md."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace
from pathlib import Path

from bench.errors import HarnessError
from bench.report.declare import Artifact, Paper
from bench.report.output import write
from bench.report.select import RunSet

PACKAGE = "bench.report"


def produce(artifact: Artifact, results_dir: str | Path, **options) -> str | list[Path]:
    """Build the artifact on the runs under results_dir and write it there; returns the markdown it shows, else the
    paths it wrote (what the CLI prints)."""
    return write(artifact.report(RunSet.read(results_dir), **options), results_dir)


class UnknownArtifact(HarnessError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def generic() -> dict[str, Artifact]:
    """The artifacts of no paper (bench/report/generic.py)."""
    return {a.name: a for a in importlib.import_module("bench.report.generic").ARTIFACTS}


def papers() -> list[str]:
    """The paper packages under bench/report/ (by folder; none is imported)."""
    package = importlib.import_module(PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.ispkg)


def declared(module) -> tuple[Artifact, ...]:
    one = getattr(module, "ARTIFACT", None)
    return (one,) if one is not None else tuple(getattr(module, "ARTIFACTS", ()))


def paper(name: str) -> Paper:
    """The declaration of one paper (its package's PAPER)."""
    if not name.isidentifier() or name not in papers():
        raise UnknownArtifact(f"no paper {name!r} (papers: {', '.join(papers())})")
    return importlib.import_module(f"{PACKAGE}.{name}").PAPER


def paper_artifacts(name: str) -> dict[str, Artifact]:
    """name -> artifact of one paper, in rank order (then module order): imports the paper's modules."""
    package = importlib.import_module(f"{PACKAGE}.{paper(name).name}")
    found = [replace(a, paper=name) for m in pkgutil.iter_modules(package.__path__)
             for a in declared(importlib.import_module(f"{package.__name__}.{m.name}"))]
    return {a.name: a for a in sorted(found, key=lambda a: a.rank)}


def aliases() -> dict[str, str]:
    """Old names that keep working: the generic module's ALIASES."""
    return importlib.import_module("bench.report.generic").ALIASES


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
