"""What Token Recycling's figures share: a sweep's runs (by experiment, of the most recent run's model, dataset,
machine and max_new_tokens), one run's numbers, the make recipes' lines."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable

from bench.metrics import summarize
from bench.report.registry import Artifact, Cover, Recipe, Shown
from bench.report.select import RunSet
from bench.report.tables import interval_columns, lossless_text
from bench.run.store import Run

METHOD = "token_recycling"
# A sweep's runs are compared only within one of these (a figure's points share its model, dataset and measuring).
GROUP = ("model", "dataset", "machine", "max_new_tokens")

RUN = "$(PY) -m bench.run $(SWEEP) experiment=token_recycling/{} $(RUN_ARGS)"
TARGET = "reproduce-tr-{}"


def make(name: str) -> str:
    """The make command that produces figure `name` (named where it has no runs)."""
    return f"make {TARGET.format(name)}"


def declare(name: str, help: str, build: Callable, rank: int, experiments: tuple[str, ...], recipe: str,
            *sweeps: str, cover: str | None = None, needs: tuple[str, ...] = ("tree-stats",), **more) -> Artifact:
    """Figure `name` of the runs labelled `experiments`: make reproduce-tr-<name> (shown on REPRODUCED.md) runs each
    of `sweeps` (conf/experiment/token_recycling/), then the figure; with no runs, it names its experiments."""
    steps = (*(RUN.format(s) for s in sweeps), f"$(PY) -m bench.report token_recycling/{name} --model $(MODEL)")
    return Artifact(name, help, build, covers=(Cover(cover),) if cover else (), rank=rank, experiments=experiments,
                    shown=(Shown(make(name)),), recipes=(Recipe(TARGET.format(name), recipe, steps, needs),),
                    common=("model",), needs_runs=False, **more)


def sweep(runs: RunSet, experiment: str, model: str | None = None,
          make: str | None = None) -> tuple[RunSet, RunSet, list[str]]:
    """(the experiment's token_recycling runs of the latest one's GROUP, every run of that group (its baselines),
    notes on the runs left out); with `make`, none is a MissingRunsError naming it."""
    group = runs.pin(lambda r: r.experiment == experiment and r.method == METHOD, model=model, same=GROUP,
                     drafters=False)
    mine = group.where(experiment=experiment, method=METHOD)
    if make and not mine.runs:
        raise missing(runs, [experiment], model, make)
    return mine, group, [f"{experiment}: {n}" for n in group.notes]


def missing(runs: RunSet, experiments: Iterable[str], model: str | None, make: str):
    of_model = f" of model '{model}'" if model else ""
    named = " / ".join(repr(e) for e in experiments)
    return runs.missing(f"{METHOD} runs{of_model} with experiment {named}", make)


def numbers(run: Run) -> dict:
    """A run's MAT and tokens/s (with their 95% intervals), turns, losslessness and phase shares."""
    s = summarize(run.records)
    return {"mat": s["mat"], "tokens_per_s": s["tokens_per_s"]["mean_of_questions"],
            **interval_columns("mat", s["intervals"]["mat"]),
            **interval_columns("tokens_per_s", s["intervals"]["tokens_per_s"]),
            "tokens_per_s_total": s["tokens_per_s"]["total"], "n_turns": s["n_turns"],
            "lossless": lossless_text(s["lossless"]), "phase_share": s["phase_share"]}


def context(run: Run) -> dict:
    """The group a point belongs to (the CSVs' last columns)."""
    return {"model": run.model, "dataset": run.dataset, "machine": run.machine, "max_new_tokens": run.max_new_tokens}


def describe(ctx) -> str:
    return f"{ctx['model']} on {ctx['dataset']}, max_new_tokens {ctx['max_new_tokens']}, machine {ctx['machine']}"


def warn(notes: list[str]) -> None:
    """A figure has no footer: its notes (runs left out or superseded) go to stderr."""
    for n in notes:
        print(f"figures: {n}", file=sys.stderr)
