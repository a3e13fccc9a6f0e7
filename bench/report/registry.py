"""The artifact registry: names `<paper>/<artifact>` (plus the generic `runs`), resolved lazily.

The part before the slash names the package `bench.report.<paper>`, imported only when one of its artifacts is
asked for. That package's `__init__.py` holds `ARTIFACTS = {"table1": Artifact("module:function", ...)}`;
the function's module is imported only when the artifact runs. Adding a paper touches no file here.

An artifact's function takes the results dir first, then keyword options: the common ones it names in
`common` (`model`, `paper_size`) and its own `options` (argparse flags). Options the user did not give are
not passed, so the function's defaults apply. It returns the markdown it wrote (printed as is) or the paths
it wrote (printed one per line); bad input is a HarnessError (one `error:` line).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.errors import HarnessError

PACKAGE = "bench.report"


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    kwargs: dict = field(default_factory=dict)


def option(*flags: str, **kwargs) -> Option:
    """An argparse option of one artifact: option("--dataset", help="...")."""
    return Option(flags, kwargs)


@dataclass(frozen=True)
class Artifact:
    target: str  # "package.module:function"
    help: str
    options: tuple[Option, ...] = ()
    common: tuple[str, ...] = ("model", "paper_size")  # the common CLI options the function takes
    needs_runs: bool = True  # the CLI stops early when <results>/runs does not exist

    def load(self) -> Callable:
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)


GENERIC = {
    "runs": Artifact("bench.report.runs:runs_table",
                     "latest run per method (MAT, tok/s, speedups) -> tables/runs.md",
                     options=(option("--dataset", help="only runs on this dataset"),
                              option("--max-new-tokens", type=int, help="only runs with this limit"))),
    "draft_sd": Artifact("bench.report.draft_sd:draft_sd_table",
                         "sd at draft length 4/8/12 with the model's draft, beside AR -> tables/draft_sd.{md,csv,tex}",
                         common=("model",)),
    "reproduced": Artifact("bench.report.reproduced:reproduced_page",
                           "REPRODUCED.md from evidence/ only (a summary, then every paper's tables with their runs)",
                           options=(option("--out", help="default: REPRODUCED.md at the project root"),
                                    option("--evidence", help="the evidence folder (default evidence/)")),
                           common=(), needs_runs=False),
    "evidence": Artifact("bench.report.evidence:build_evidence",
                         "copy the runs REPRODUCED.md uses from --results into evidence/ (summaries, configs, "
                         "records without token ids)",
                         options=(option("--out", help="default: evidence/ at the project root"),),
                         common=()),
}
# Names from before the paper packages; they keep working.
ALIASES = {
    "token_recycling_table1": "token_recycling/table1",
    "tr_fig3": "token_recycling/fig3",
    "tr_fig4": "token_recycling/fig4",
    "tr_auto": "token_recycling/auto",
    "dyspec_table": "dyspec/table",
    "dyspec_time_breakdown": "dyspec/time_breakdown",
    "dyspec_table5": "dyspec/table5",
}


class UnknownArtifact(HarnessError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def papers() -> list[str]:
    """The paper packages under bench/report/ (by folder; none is imported)."""
    package = importlib.import_module(PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.ispkg)


def paper_artifacts(paper: str) -> dict[str, Artifact]:
    if not paper.isidentifier() or paper not in papers():
        raise UnknownArtifact(f"no paper {paper!r} (papers: {', '.join(papers())})")
    return getattr(importlib.import_module(f"{PACKAGE}.{paper}"), "ARTIFACTS", {})


def names() -> list[str]:
    """Every artifact name (imports each paper's small __init__, not its modules)."""
    return sorted(GENERIC) + [f"{p}/{a}" for p in papers() for a in paper_artifacts(p)]


def resolve(name: str) -> tuple[str, Artifact]:
    """(canonical name, artifact) of a name or an alias; UnknownArtifact names what there is."""
    name = ALIASES.get(name, name)
    if name in GENERIC:
        return name, GENERIC[name]
    paper, slash, artifact = name.partition("/")
    if slash:
        found = paper_artifacts(paper)
        if artifact in found:
            return name, found[artifact]
        raise UnknownArtifact(f"{paper} has no artifact {artifact!r} (has: {', '.join(found)})")
    raise UnknownArtifact(f"unknown report {name!r} (see --list)")
