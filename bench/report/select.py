"""Which runs a report uses: the one way every paper's reports read runs (through bench.run.store).

- `read_runs` / `where`: the complete runs (oldest first) of an experiment, method, model, dataset, ...
- `default_model`, `latest`, `latest_runs`: the most recent run's model; the latest run that matches; the
  latest run per (model, method, variant, dataset, temperature).
- `paired_baseline`: the baseline run measured like a run (same model, dataset, temperature, max_new_tokens,
  batch size and machine label), so every speedup compares runs measured the same way.
- `Pool` / `pool`: the runs one artifact compares: one model, and the machine label and max_new_tokens of the
  most recent relevant run; a note counts the relevant runs of other machines or lengths left out.
- `select_group` / `latest_per_x`: a sweep's runs of the most recent run's (model, dataset, machine,
  max_new_tokens), and of those the latest per plotted x value.
- `MissingRunsError`: nothing to show; the message names the make target that produces the runs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import HarnessError
from bench.run.store import Run, load_runs

DEFAULT_MODEL = "smollm2-135m"


class MissingRunsError(HarnessError, ValueError):
    """No complete run (or measurement file) an artifact needs."""


def missing(what: str, results_dir: str | Path, make: str) -> MissingRunsError:
    """"no complete <what> under <results>/runs (produced by `<make>`)"."""
    return MissingRunsError(f"no complete {what} under {Path(results_dir, 'runs')} (produced by `{make}`)")


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


def read_runs(results_dir: str | Path, **labels) -> list[Run]:
    """The complete runs under results_dir/runs, oldest first, filtered as `where` does."""
    return where(load_runs(results_dir), **labels)


def settings(run: Run) -> dict:
    """run.settings, as a function (callers pass it where a run -> value is wanted)."""
    return run.settings


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


def measured(run: Run) -> tuple:
    """How a run was measured, beyond model and dataset: its machine label and max_new_tokens."""
    return run.machine, run.max_new_tokens


@dataclass
class Pool:
    """The runs one artifact compares (oldest first): one model, one machine label, one max_new_tokens."""

    runs: list[Run]
    model: str | None
    machine: str | None = None
    max_new_tokens: int | None = None
    notes: list[str] = field(default_factory=list)
    dataset: str | None = None  # when the artifact's runs are all of one dataset
    draft: str | None = None  # the drafter of its draft-model runs, when one was chosen (bench.report.drafter)

    def latest(self, keep: Callable[[Run], object]) -> Run | None:
        return latest(self.runs, keep)

    def baseline(self, run: Run | None, method: str) -> Run | None:
        """The latest default-variant `method` run of the pool measured like `run` (None without a run)."""
        return paired_baseline(self.runs, run, method) if run is not None else None


def pool(candidates: list[Run], relevant: Callable[[Run], object], model: str | None = None,
         own: Callable[[Run], object] | None = None, dataset: str | None = None) -> Pool:
    """The candidates of `model` (default: that of the most recent relevant run) measured like the most recent
    relevant run, or like the most recent relevant run for which own(run) is true (the artifact's own sweep,
    so another artifact's later runs of other lengths do not replace it). Empty without relevant runs."""
    mine = [r for r in candidates if relevant(r) and (model is None or r.model == model)]
    if not mine:
        return Pool([], model, dataset=dataset)
    last = ([r for r in mine if own is not None and own(r)] or mine)[-1]
    model, key = last.model, measured(last)
    same = [r for r in candidates if r.model == model and measured(r) == key]
    dropped = sum(1 for r in mine if measured(r) != key)
    notes = [(f"{dropped} run(s) of other machines or max_new_tokens left out (compared: machine {key[0]}, "
              f"max_new_tokens {key[1]})")] if dropped else []
    return Pool(same, model, key[0], key[1], notes, dataset)


def group_key(run: Run) -> tuple:
    """Runs of a sweep are only compared within one (model, dataset, machine, max_new_tokens)."""
    return (run.model, run.dataset, *measured(run))


def select_group(runs: list[Run]) -> tuple[list[Run], tuple | None, int]:
    """Runs of the most recent run's group_key, the key, and how many other runs were left out."""
    if not runs:
        return [], None, 0
    key = group_key(runs[-1])
    kept = [r for r in runs if group_key(r) == key]
    return kept, key, len(runs) - len(kept)


def latest_per_x(runs: list[Run], x_of: Callable[[Run], object]) -> dict:
    """x -> the latest run with that x (runs sorted oldest first); runs whose x is None are skipped."""
    out: dict = {}
    for r in runs:
        x = x_of(r)
        if x is not None:
            out[x] = r
    return out
