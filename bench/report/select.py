"""Which runs a report uses: the one selection rule of every paper (`RunSet`, below; docs/reports.md), and the
footer every report ends with.

Also the pieces RunSet is made of, which reports use on its runs: `where` (labels), `latest` / `latest_runs` /
`latest_per_x` (the latest run per cell, per configuration, per plotted x), `paired_baseline` (the baseline measured
like a run: same model, dataset, temperature, max_new_tokens, batch size and machine label), `used_ids` (a footer's
run ids) and `missing` (a MissingRunsError naming the make target that produces the runs). `read_runs` is the store
layer's read, for the page builders (bench/report/reproduced.py, evidence.py); builders get a RunSet.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import MissingRunsError
from bench.report.drafter import choose
from bench.run.store import Run, load_runs

DEFAULT_MODEL = "smollm2-135m"


def missing(what: str, folder: str | Path, make: str) -> MissingRunsError:
    """"no complete <what> under <folder>/runs (produced by `<make>`)"."""
    return MissingRunsError(f"no complete {what} under {Path(folder, 'runs')} (produced by `{make}`)")


def matches(value, wanted: str | Collection | None) -> bool:
    """None: anything; a string: that value; a collection: any of its values."""
    if wanted is None:
        return True
    return value == wanted if isinstance(wanted, str) else value in wanted


def where(runs: Iterable[Run], *, experiment: str | Collection | None = None,
          method: str | Collection | None = None, model: str | None = None,
          dataset: str | Collection | None = None, max_new_tokens: int | None = None, greedy: bool = False,
          batch_size: int | None = None, keep: Callable[[Run], object] | None = None) -> list[Run]:
    """The runs with these labels (None: any), at temperature 0 if `greedy`, for which keep(run) is true."""
    return [r for r in runs if matches(r.experiment, experiment) and matches(r.method, method)
            and matches(r.model, model) and matches(r.dataset, dataset)
            and (max_new_tokens is None or r.max_new_tokens == max_new_tokens)
            and (not greedy or r.temperature == 0.0) and (batch_size is None or r.batch_size == batch_size)
            and (keep is None or keep(r))]


def read_runs(folder: str | Path, **labels) -> list[Run]:
    """The complete runs under folder/runs, oldest first, filtered as `where` does (the store layer's read)."""
    return where(load_runs(folder), **labels)


def setting(name: str, default=None) -> Callable[[Run], object]:
    """run -> one of its method settings."""
    return lambda r: r.settings.get(name, default)


def latest(runs: list[Run], keep: Callable[[Run], object] | None = None) -> Run | None:
    """The most recent run (runs oldest first) for which keep(run) is true; None if there is none."""
    found = [r for r in runs if keep is None or keep(r)]
    return found[-1] if found else None


def latest_model(runs: list[Run]) -> str | None:
    """The model of the most recent run (runs oldest first)."""
    return runs[-1].model if runs else None


def default_model(runs: list[Run], model: str | None = None) -> str:
    """`model`, else the model of the most recent run, else DEFAULT_MODEL."""
    return model or latest_model(runs) or DEFAULT_MODEL


def latest_runs(runs: list[Run], batch_size: int = 1) -> dict[tuple, Run]:
    """(model, method, variant, dataset, temperature) -> the most recent run at `batch_size`; runs sorted
    oldest first. A batched run never stands in for a batch-1 one (its speed is another quantity)."""
    return {r.key: r for r in runs if r.batch_size == batch_size}


def prompt_turns(run: Run) -> set[tuple]:
    """The (question, turn) pairs a run's records cover."""
    return {(r.get("question_id"), r.get("turn", 0)) for r in run.records}


def paired_baseline(runs: list[Run], run: Run, method: str) -> Run | None:
    """The `method` run (default variant) measured like `run` (same model, dataset, temperature, max_new_tokens,
    batch size and machine label, threads and parallel jobs included) that covers most of `run`'s prompt-turns,
    the latest of those: paired speedups are over the shared ones, so another artifact's later baseline on fewer
    questions never takes their place. None if there is none."""
    found = [r for r in runs if r.method == method and r.variant is None
             and r.temperature == run.temperature and r.batch_size == run.batch_size
             and group_key(r) == group_key(run)]  # model, dataset, machine, max_new_tokens
    if not found:
        return None
    wanted = prompt_turns(run)
    return max(reversed(found), key=lambda r: len(wanted & prompt_turns(r)))  # max keeps the first: the latest


def used_ids(runs: Iterable[Run | None]) -> list[str]:
    """Run ids, once each, in order (a footer's "Runs:" line, which REPRODUCED.md reads)."""
    return list(dict.fromkeys(r.run_id for r in runs if r is not None))


def group_key(run: Run) -> tuple:
    """Runs are only compared within one (model, dataset, machine, max_new_tokens)."""
    return run.model, run.dataset, run.machine, run.max_new_tokens


def latest_per_x(runs: list[Run], x_of: Callable[[Run], object]) -> dict:
    """x -> the latest run with that x (runs sorted oldest first); runs whose x is None are skipped."""
    out: dict = {}
    for r in runs:
        x = x_of(r)
        if x is not None:
            out[x] = r
    return out


# -- the one selection rule ------------------------------------------------------------------------------------

@dataclass
class RunSet:
    """The runs one report reads, read once from a results folder (`RunSet.read`), then narrowed by `pin` to what
    one artifact compares. Every paper pins the same way (docs/reports.md):

    - the relevant runs are the artifact's (its methods, datasets, experiments: the `relevant` predicate);
    - one model: the one asked for, else that of the most recent relevant run;
    - one drafter: the one asked for (a full name or a source, bench.report.drafter), else that of the most recent
      draft-model run; runs without a drafter (AR, ...) are every drafter's baselines;
    - one machine label and max_new_tokens: those of the anchor, the most recent relevant run of the artifact's
      own sweep (`own`), else the most recent relevant run, so another artifact's later runs of other lengths
      never replace its own; a note counts the relevant runs left out;
    - in a cell, the latest run (`latest`); a speedup's baseline is the run measured like it (`baseline`).

    Builders receive a RunSet and never read the store; `folder` is only named in messages and used for the
    measurement files an artifact reads beside its runs (`file`)."""

    runs: list[Run]  # oldest first
    folder: Path
    model: str | None = None
    drafter: str | None = None
    machine: str | None = None
    max_new_tokens: int | None = None
    dataset: str | None = None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, folder: str | Path) -> RunSet:
        """The complete runs under folder/runs (none when it has no runs/), oldest first."""
        return cls(load_runs(folder) if Path(folder, "runs").is_dir() else [], Path(folder))

    def where(self, **labels) -> RunSet:
        """A copy holding the runs with these labels (`where`'s keywords), pins kept."""
        return dataclasses.replace(self, runs=where(self.runs, **labels), notes=list(self.notes))

    def pin(self, relevant: Callable[[Run], object] | None = None, *, model: str | None = None,
            draft: str | None = None, own: Callable[[Run], object] | None = None,
            same: tuple[str, ...] = ("machine", "max_new_tokens"), dataset: str | None = None,
            drafters: bool = True) -> RunSet:
        """The runs one artifact compares, pinned by the rule above (`same`: the labels taken from the anchor;
        `drafters=False`: the artifact has no draft-model runs). Empty without a relevant run; a `draft` no run
        used is a MissingRunsError naming the drafters there are."""
        runs = [r for r in self.runs if model is None or r.model == model]
        mine = [r for r in runs if relevant is None or relevant(r)]
        if not mine:
            return dataclasses.replace(self, runs=[], model=model, dataset=dataset, notes=list(self.notes))
        model = mine[-1].model if model is None else model
        runs = [r for r in runs if r.model == model]
        runs, chosen = choose(runs, draft) if drafters else (runs, None)
        mine = [r for r in runs if relevant is None or relevant(r)]
        anchor = ([r for r in mine if own is not None and own(r)] or mine or [None])[-1]
        if anchor is None:
            return dataclasses.replace(self, runs=[], model=model, drafter=chosen, dataset=dataset,
                                       notes=list(self.notes))
        key = tuple(getattr(anchor, a) for a in same)
        kept = [r for r in runs if tuple(getattr(r, a) for a in same) == key]
        dropped = sum(1 for r in mine if tuple(getattr(r, a) for a in same) != key)
        notes = [f"{dropped} run(s) of other {' or '.join(LEFT_OUT.get(a, a) for a in same)} left out (compared: "
                 + ", ".join(f"{a} {v}" for a, v in zip(same, key, strict=True)) + ")"] if dropped else []
        return dataclasses.replace(self, runs=kept, model=model, drafter=chosen, dataset=dataset,
                                   machine=anchor.machine, max_new_tokens=anchor.max_new_tokens,
                                   notes=[*self.notes, *notes])

    def latest(self, keep: Callable[[Run], object] | None = None) -> Run | None:
        """The most recent run for which keep(run) is true (a cell's run); None if there is none."""
        return latest(self.runs, keep)

    def latest_per(self, key: Callable[[Run], object]) -> dict:
        """key(run) -> the latest run with that key; runs whose key is None are skipped."""
        return latest_per_x(self.runs, key)

    def baseline(self, run: Run | None, method: str) -> Run | None:
        """The `method` run measured like `run` (paired_baseline); None without a run or a baseline."""
        return paired_baseline(self.runs, run, method) if run is not None else None

    def missing(self, what: str, make: str) -> MissingRunsError:
        """"no complete <what> under <folder>/runs (produced by `<make>`)"."""
        return missing(what, self.folder, make)

    def file(self, *parts: str) -> Path:
        """A measurement file an artifact reads beside the runs (e.g. propd/early_heads.json)."""
        return Path(self.folder, *parts)


LEFT_OUT = {"machine": "machines", "max_new_tokens": "max_new_tokens", "dataset": "datasets", "model": "models"}


def footer(ours: str, used: Iterable[Run | None] | Mapping[str, str], lines: Iterable[str] = (),
           notes: Iterable[str] = (), claims: Iterable[str] = (), named: tuple[str, str] = ("=", ", ")) -> list[str]:
    """Every report's footer: the first line ("Ours: ..." or "Machine: ...", as the paper's reports word it), the
    report's own lines (definitions, why a cell is empty), the run ids (REPRODUCED.md reads this line; `used`: the
    runs, their ids once each, or {row label: run id(s)} written label=id, `named` giving the separators), the
    claims decided from them and the notes (runs left out, short batches)."""
    if isinstance(used, Mapping):
        ids = named[1].join(f"{k}{named[0]}{v}" for k, v in used.items())
    else:
        ids = ", ".join(used_ids(used))
    return [ours, *lines, f"Runs: {ids or 'none'}.", *claims, *(f"Note: {n}." for n in notes)]
