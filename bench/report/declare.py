"""What a declaration is: an artifact (`Artifact`, its options, the paper labels it covers, its make recipes and
page sections) and a paper (`Paper`, whose `declare` makes its artifacts); docs/adding_a_paper.md. The registry
(bench/report/registry.py) finds them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.cost.replay import Setting
from bench.errors import HarnessError
from bench.report.select import DEFAULT_MODEL, RunSet


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
    build: Callable  # (RunSet, **options) -> Report
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
    paper: str = ""  # its paper's package, filled in by Paper.declare or the registry

    @property
    def full_name(self) -> str:
        return f"{self.paper}/{self.name}" if self.paper else self.name

    @property
    def arguments(self) -> tuple[Option, ...]:
        """Its options, the common ones first (the CLI's flags, the notebooks' SPECREPRO_<OPTION>)."""
        return (*(COMMON[c] for c in self.common), *self.options)

    def bind(self, runs: RunSet) -> RunSet:
        """The runs as its build reads them: with its experiments (RunSet.own) and its published numbers
        (RunSet.paper), each paper CSV read here and nowhere else."""
        folder = Path(sys.modules[self.build.__module__].__file__).with_name("paper_tables")  # beside its module
        if missing := [name for name in self.paper_csv if not (folder / name).is_file()]:
            raise HarnessError(f"{self.full_name}: paper_csv {', '.join(missing)} not in {folder}")
        return runs.bound(self.experiments, {name: pd.read_csv(folder / name) for name in self.paper_csv})

    def report(self, runs: RunSet, **options):
        """Its build on `runs` (bound to it): a Report."""
        return self.build(self.bind(runs), **options)


@dataclass(frozen=True)
class Paper:
    """One paper, declared once in its package (`PAPER = Paper(...)`): what the page, the claims, the projection,
    the make targets and the notebooks read of it; `declare` makes its artifacts (docs/adding_a_paper.md)."""

    name: str  # its package under bench/report/
    title: str  # REPRODUCED.md's heading of its section
    contents: tuple[str, ...]  # its artifacts in order of appearance: the page's summary rows (then any other Cover)
    claimed: tuple[str, ...]  # its own method(s): their speedup over AR is its claim (bench.report.claims)
    setting: Setting | None = None  # its hardware, where the page projects (bench.page.projected)
    settings: dict = field(default_factory=dict)  # a content label -> its own Setting, where it differs
    model: str = DEFAULT_MODEL  # the model its reports show without --model or runs
    # What its make targets share: the target's name, a sweep's command (experiment=<paper>/<sweep>), the targets
    # built first, what the page adds to the command it shows ("LIMIT=16"), the experiment label of an artifact's
    # runs (from its name), and its artifacts' common options and drafters.
    target: str = "reproduce-{paper}-{name}"
    sweep: str = "$(PY) -m bench.run $(SWEEP) experiment={paper}/{sweep} $(RUN_ARGS)"
    needs: tuple[str, ...] = ()
    shown: str = ""
    experiment: str = ""
    common: tuple[str, ...] = ("model",)
    per_drafter: bool = False
    needs_runs: bool = True

    def setting_of(self, label: str | None = None) -> Setting | None:
        return self.settings.get(label) or self.setting

    def step(self, sweep: str) -> str:
        """A recipe's line running one of its sweeps (conf/experiment/<paper>/<sweep>, overrides after it)."""
        return self.sweep.format(paper=self.name, sweep=sweep)

    def make(self, name: str) -> str:
        """The make command that produces its artifact `name` (what an empty cell names)."""
        return "make " + self.target.format(paper=self.name, name=name)

    def declare(self, name: str, help: str, build: Callable, rank: int, recipe: str, *sweeps: str,
                cover: str | None = None, steps: tuple[str, ...] = (), needs: tuple[str, ...] | None = None,
                shown: str | None = None, experiments: tuple[str, ...] | None = None, **more) -> Artifact:
        """Its artifact `name`: one make target runs `steps`, a sweep of each of `sweeps`, then the report; the page
        shows that target with `shown` (default the paper's)."""
        steps = (*steps, *map(self.step, sweeps),
                 f"$(PY) -m bench.report {self.name}/{name} --model $(MODEL)")
        if experiments is None:
            experiments = (self.experiment.format(name=name),) if self.experiment else ()
        more = {"common": self.common, "per_drafter": self.per_drafter, "needs_runs": self.needs_runs, **more}
        return Artifact(name, help, build, covers=(Cover(cover),) if cover else (), rank=rank, experiments=experiments,
                        recipes=(Recipe(self.target.format(paper=self.name, name=name), recipe, steps,
                                        self.needs if needs is None else needs),),
                        shown=(Shown(self.make(name) + (self.shown if shown is None else shown)),),
                        paper=self.name, **more)
