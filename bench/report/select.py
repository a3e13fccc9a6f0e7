"""Which runs a report uses: `RunSet`, the one selection rule (docs/reports.md), its pieces and `footer`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.errors import HarnessError, MissingRunsError
from bench.report.drafter import choose
from bench.run.store import Run, load_runs, same_weights

DEFAULT_MODEL = "smollm2-135m"
GAP = "— "  # starts a footer line naming cells left empty, and why (the page's summary reads it)


def matches(value, wanted: str | Collection | None) -> bool:
    """None: anything; a string: that value; a collection: any of its values."""
    if wanted is None:
        return True
    return value == wanted if isinstance(wanted, str) else value in wanted


def where(runs: Iterable[Run], *, experiment: str | Collection | None = None,
          method: str | Collection | None = None, model: str | None = None,
          dataset: str | Collection | None = None, max_new_tokens: int | None = None, greedy: bool = False,
          batch_size: int | None = None, keep: Callable[[Run], object] | None = None,
          graphs: bool = False) -> list[Run]:
    """The runs with these labels (None: any), at temperature 0 if `greedy`, for which keep(run) is true; eager
    runs only (the papers' regime) unless `graphs`, then graph-mode runs only (run.graphs)."""
    return [r for r in runs if r.graphs == graphs and matches(r.experiment, experiment) and matches(r.method, method)
            and matches(r.model, model) and matches(r.dataset, dataset)
            and (max_new_tokens is None or r.max_new_tokens == max_new_tokens)
            and (not greedy or r.temperature == 0.0) and (batch_size is None or r.batch_size == batch_size)
            and (keep is None or keep(r))]


def setting(name: str, default=None) -> Callable[[Run], object]:
    return lambda r: r.settings.get(name, default)


def default_model(runs: list[Run], model: str | None = None, default: str = DEFAULT_MODEL) -> str:
    """`model`, else the model of the most recent run, else `default` (the paper's, Paper.model)."""
    return model or (runs[-1].model if runs else None) or default


def prompt_turns(run: Run) -> set[tuple]:
    return {(r.get("question_id"), r.get("turn", 0)) for r in run.records}


def sittings(run: Run) -> set[str]:
    """The boot ids a run was measured in: one, or a resumed run's several (provenance `boot_ids`); {} unrecorded."""
    prov = run.provenance
    return {b for b in prov.get("boot_ids") or [prov.get("boot_id")] if b}


def paired_baseline(runs: list[Run], run: Run, method: str) -> Run | None:
    """Of the `method` runs (default variant) measured like `run`, one that covers most of its prompt-turns (paired
    speedups are over the shared ones); among those, one measured on the same machine instance (boot id) where both
    say (a run resumed in another sitting has no single one: its baseline must span the same sittings), then the one
    measured nearest in time (then the latest): a machine label names a kind of machine, and two VMs of one kind
    need not be equally fast, so a baseline from the same sitting is the fair one. None if there is none."""
    alike = ("temperature", "batch_size", "model", "dataset", "machine", "max_new_tokens", "graphs")
    engine = ("graph_compile", "graph_capacity")  # graph mode's: compiled against compiled, as the runner pairs them
    found = [r for r in runs if r.method == method and r.variant is None
             and all(getattr(r, a) == getattr(run, a) for a in alike)
             and all(r.meta.get(a) == run.meta.get(a) for a in engine) and same_weights(r.meta, run.meta)]
    if not found:
        return None
    wanted, boots = prompt_turns(run), sittings(run)

    def fit(r):
        same_boot = bool(boots) and sittings(r) == boots
        return len(wanted & prompt_turns(r)), same_boot, -abs((r.created - run.created).total_seconds())

    return max(reversed(found), key=fit)  # max keeps the first: the latest of equals


# The trained parts a run can use, by the setting that names their build (a trained part's name ends in its build's
# digest since 2026-11-30, bench.models.built.report_digest): parts trained again under one id stop on a clock and
# are other weights, so one artifact never compares runs of two builds.
BUILT_PARTS = {"draft_label": "draft", "heads": "Medusa heads", "early_heads": "early heads"}


def builds(run: Run) -> dict[str, str]:
    """{setting: the build it names} for each trained part the run used (none for AR, PLD, ...)."""
    return {k: str(v) for k in BUILT_PARTS if (v := run.settings.get(k))}


def one_build(runs: list[Run], anchor: Run) -> tuple[list[Run], list[str]]:
    """The runs that used the same build of each trained part: the anchor's, else the latest run's using it (runs
    oldest first); and a note naming the parts whose other builds were left out, if any."""
    of = [builds(r) for r in runs]
    chosen = builds(anchor)
    for b in reversed(of):
        chosen = {**b, **chosen}
    parts = {k for b in of for k, v in b.items() if v != chosen[k]}
    if not parts:
        return runs, []
    kept = [r for r, b in zip(runs, of, strict=True) if all(chosen[k] == v for k, v in b.items())]
    named = [k for k in BUILT_PARTS if k in parts]
    return kept, [f"{len(runs) - len(kept)} run(s) with other builds of the {' or '.join(BUILT_PARTS[k] for k in named)}"
                  " left out (compared: " + ", ".join(f"{BUILT_PARTS[k]} {chosen[k]}" for k in named) + ")"]


# -- the one selection rule ------------------------------------------------------------------------------------

@dataclass
class RunSet:
    """The runs one report reads, read once from a results folder, then narrowed by `pin` to what one artifact
    compares, by the rule of docs/reports.md. `folder` is only named in messages and holds the measurement files
    an artifact reads beside its runs (`file`)."""

    runs: list[Run]  # oldest first
    folder: Path
    model: str | None = None
    drafter: str | None = None
    machine: str | None = None
    max_new_tokens: int | None = None
    dataset: str | None = None
    notes: list[str] = field(default_factory=list)
    experiments: tuple[str, ...] = ()  # the experiment labels of the artifact's own runs (Artifact.bind)
    published: dict = field(default_factory=dict)  # its paper CSVs: file name -> DataFrame (Artifact.bind)

    @classmethod
    def read(cls, folder: str | Path) -> RunSet:
        return cls(load_runs(folder) if Path(folder, "runs").is_dir() else [], Path(folder))

    def bound(self, experiments: tuple[str, ...], published: dict) -> RunSet:
        """A copy that knows an artifact's experiments and published numbers (Artifact.bind)."""
        return dataclasses.replace(self, experiments=tuple(experiments), published=dict(published),
                                   notes=list(self.notes))

    def own(self, **labels) -> RunSet:
        """The runs of the artifact's own experiments with these labels (`where`'s keywords)."""
        return self.where(experiment=self.experiments, **labels)

    def paper(self, name: str | None = None) -> pd.DataFrame:
        """One of the artifact's paper CSVs (default its first), as Artifact.bind read it."""
        name = name or next(iter(self.published), None)
        if name not in self.published:
            raise HarnessError(f"{name or 'a paper table'} is not among the artifact's paper_csv "
                               f"({', '.join(self.published) or 'none'}): declare it there")
        return self.published[name]

    def where(self, **labels) -> RunSet:
        """A copy holding the runs with these labels (`where`'s keywords)."""
        return dataclasses.replace(self, runs=where(self.runs, **labels), notes=list(self.notes))

    def pin(self, relevant: Callable[[Run], object] | None = None, *, model: str | None = None,
            draft: str | None = None, own: Callable[[Run], object] | None = None,
            same: tuple[str, ...] = ("machine", "max_new_tokens"), dataset: str | None = None,
            drafters: bool = True, family: str | None = None) -> RunSet:
        """The runs one artifact compares (`same`: the labels taken from the anchor, the latest run of `own`
        else of `relevant`; `drafters=False`: no draft-model runs). Empty without a relevant run. With `family`
        (an experiment prefix), `own` is the artifact's own experiments where a relevant run carries one, else
        any experiment of the family, else a run without an experiment label, and the model is that anchor's; no such
        run: empty (another paper's runs never anchor it). Runs of another build of a trained part (`builds`) than
        the anchor's (else the latest run's using it) are left out, with a note."""
        relevant = relevant or (lambda r: True)
        if family is not None:
            labels = set(self.experiments)

            def fits(r):
                return relevant(r) and model in (None, r.model)

            own = ((lambda r: r.experiment in labels) if any(fits(r) and r.experiment in labels for r in self.runs)
                   else (lambda r: r.experiment == family or str(r.experiment or "").startswith(f"{family}_")))
            anchor = self.latest(lambda r: fits(r) and own(r)) or self.latest(lambda r: fits(r) and not r.experiment)
            model = model or (anchor.model if anchor else None)
        runs = [r for r in self.runs if model is None or r.model == model]
        mine = [r for r in runs if relevant(r)]
        if not mine:
            return dataclasses.replace(self, runs=[], model=model, dataset=dataset, notes=list(self.notes))
        model = mine[-1].model if model is None else model
        runs = [r for r in runs if r.model == model]
        runs, chosen = choose(runs, draft) if drafters else (runs, None)
        mine = [r for r in runs if relevant(r)]
        # with a family, only its runs anchor, else one made by hand (no experiment label): never another paper's
        anchor = ([r for r in mine if own is not None and own(r)]
                  or ([r for r in mine if not r.experiment] if family else mine) or [None])[-1]
        if anchor is None:
            return dataclasses.replace(self, runs=[], model=model, drafter=chosen, dataset=dataset,
                                       notes=list(self.notes))
        key = tuple(getattr(anchor, a) for a in same)
        kept = [r for r in runs if tuple(getattr(r, a) for a in same) == key]
        dropped = sum(1 for r in mine if tuple(getattr(r, a) for a in same) != key)
        notes = [f"{dropped} run(s) of other {' or '.join(LEFT_OUT.get(a, a) for a in same)} left out (compared: "
                 + ", ".join(f"{a} {v}" for a, v in zip(same, key, strict=True)) + ")"] if dropped else []
        kept, left = one_build(kept, anchor)
        notes += left
        return dataclasses.replace(self, runs=kept, model=model, drafter=chosen, dataset=dataset,
                                   machine=anchor.machine, max_new_tokens=anchor.max_new_tokens,
                                   notes=[*self.notes, *notes])

    def latest(self, keep: Callable[[Run], object] | None = None, **labels) -> Run | None:
        """The most recent run with these labels (`where`'s keywords) for which keep(run) is true; None if there is
        none. The one "latest" rule: a cell of a table is the latest run that fits it (`own_first`)."""
        found = self.own_first([r for r in (self.where(**labels).runs if labels else self.runs)
                                if keep is None or keep(r)])
        return found[-1] if found else None

    def latest_per(self, x_of: Callable[[Run], object], **labels) -> dict:
        """x -> the latest run with that x (and these labels), by `latest`'s rule; runs whose x is None are skipped.
        `Run.key` with batch_size=1: the latest batch-1 run per (model, method, variant, dataset, temperature)."""
        per: dict = {}
        for r in self.where(**labels).runs if labels else self.runs:
            if (x := x_of(r)) is not None:
                per.setdefault(x, []).append(r)
        return {x: self.own_first(found)[-1] for x, found in per.items()}

    def own_first(self, found: list[Run]) -> list[Run]:
        """`found` (oldest first) less other sweeps' runs where a run of the artifact's own sweep is among them
        (Figure 6's later batch-1 run never shadows Table 1's own); runs made by hand (no experiment label) stay."""
        if any(r.experiment in self.experiments for r in found):
            return [r for r in found if not r.experiment or r.experiment in self.experiments]
        return found

    def baseline(self, run: Run | None, method: str) -> Run | None:
        """paired_baseline; None without a run."""
        return paired_baseline(self.runs, run, method) if run is not None else None

    def paired(self, keep: Callable[[Run], object] | None = None, baseline: str = "ar",
               **labels) -> tuple[Run | None, Run | None]:
        """(the latest run that fits, its `baseline` run measured like it), None where there is none."""
        run = self.latest(keep, **labels)
        return run, self.baseline(run, baseline)

    def drafter_of(self, model: str | None = None, draft: str | None = None) -> str | None:
        """The drafter an artifact shows: `draft`, else that of the latest draft-model run (of `model`)."""
        return self.pin(model=model, draft=draft, same=()).drafter

    def sweep(self, experiment: str, method: str, same: tuple[str, ...], model: str | None = None,
              make: str | None = None) -> tuple[RunSet, RunSet, list[str]]:
        """One sweep of a grid: (its `method` runs of the latest one's `same` labels, every run of those labels (its
        baselines), notes on the runs left out); with `make`, none is a MissingRunsError naming it."""
        group = self.pin(lambda r: r.experiment == experiment and r.method == method, model=model, same=same,
                         drafters=False)
        mine = group.where(experiment=experiment, method=method)
        if make and not mine.runs:
            raise self.missing_sweep(method, [experiment], model, make)
        return mine, group, [f"{experiment}: {n}" for n in group.notes]

    def missing(self, what: str, make: str) -> MissingRunsError:
        return MissingRunsError(f"no complete {what} under {Path(self.folder, 'runs')} (produced by `{make}`)")

    def missing_sweep(self, method: str, experiments: Iterable[str], model: str | None, make: str
                      ) -> MissingRunsError:
        """No `method` runs (of `model`) with any of these experiments."""
        of_model = f" of model '{model}'" if model else ""
        named = " / ".join(repr(e) for e in experiments)
        return self.missing(f"{method} runs{of_model} with experiment {named}", make)

    def file(self, *parts: str) -> Path:
        """A measurement file beside the runs (e.g. propd/early_heads.json)."""
        return Path(self.folder, *parts)


@dataclass
class Cells:
    """An artifact's cells: the runs they used (its footer's Runs line) and why a cell is empty, one line per
    reason (`empty`); `make` fills them, `why` says why a dataset may have no runs at all."""

    p: RunSet
    make: str
    why: dict = field(default_factory=dict)  # dataset -> why it may have no runs (said instead of a bare "no run")
    used: list = field(default_factory=list)
    missing: dict = field(default_factory=dict)  # cell -> reason

    def take(self, run: Run | None) -> Run | None:
        self.used.append(run)
        return run

    def gap(self, name: str, dataset: str, what: str) -> None:
        """Cell `name` is empty: no `what` on the dataset, or no runs there at all."""
        if any(r.dataset == dataset for r in self.p.runs):
            self.missing[name] = f"no {what} on {dataset} ({self.make})"
        elif note := self.why.get(dataset):
            self.missing[name] = f"no runs on {dataset}: {note}"
        else:
            self.missing[name] = f"no runs on {dataset} ({self.make})"

    def empty(self) -> list[str]:
        """"— a, b: reason." per reason, its cells in table order."""
        reasons: dict[str, list[str]] = {}
        for name, reason in self.missing.items():
            reasons.setdefault(reason, []).append(name)
        return [f"{GAP}{', '.join(names)}: {reason}." for reason, names in reasons.items()]


LEFT_OUT = {"machine": "machines", "max_new_tokens": "max_new_tokens", "dataset": "datasets", "model": "models"}


def footer(ours: str, used: Iterable[Run | None] | Mapping[str, str], lines: Iterable[str] = (),
           notes: Iterable[str] = (), claims: Iterable[str] = (), named: tuple[str, str] = ("=", ", ")) -> list[str]:
    """Every report's footer: the first line ("Ours: ..."), the report's own lines, the run ids (REPRODUCED.md reads
    them; `used`: runs, or {row label: run id(s)} written with the `named` separators), claims, then notes."""
    if isinstance(used, Mapping):
        ids = named[1].join(f"{k}{named[0]}{v}" for k, v in used.items())
    else:
        ids = ", ".join(dict.fromkeys(r.run_id for r in used if r is not None))  # once each, in order
    return [ours, *lines, f"Runs: {ids or 'none'}.", *claims, *(f"Note: {n}." for n in notes)]
