"""Which runs Token Recycling's figures use, and how one run is reduced to the plotted numbers.

Runs are found by the `experiment` their summary.json records (`tr_fig3a`, `tr_fig3b`, `tr_fig3c`,
`tr_fig4`, `tr_auto`) and method token_recycling. Of the matching runs, only those of the most recent run's
(model, dataset, machine, max_new_tokens) are used, and of those the latest per plotted x value. No runs at
all: a MissingRunsError naming the experiment and its make target.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from bench.errors import HarnessError
from bench.report.tables import lossless_text
from bench.run.metrics import summarize
from bench.run.store import Run

METHOD = "token_recycling"
# Experiment -> the make target whose runs carry it (named in the error when there are none).
MAKE_TARGETS = {
    "tr_fig3a": "make reproduce-tr-fig3",
    "tr_fig3b": "make reproduce-tr-fig3",
    "tr_fig3c": "make reproduce-tr-fig3",
    "tr_fig4": "make reproduce-tr-fig4",
    "tr_auto": "make reproduce-tr-auto",
}


class MissingRunsError(HarnessError, ValueError):
    """No complete run of the experiment a figure needs."""


def missing_runs(experiments: Iterable[str], results_dir, model: str | None, method: str = METHOD):
    exps = list(experiments)
    where = f" of model '{model}'" if model else ""
    targets = " / ".join(dict.fromkeys(MAKE_TARGETS.get(e, "?") for e in exps))
    return MissingRunsError(
        f"no complete {method} runs{where} with experiment {' / '.join(repr(e) for e in exps)} under "
        f"{Path(results_dir, 'runs')} (produced by `{targets}`)")


def group_key(run: Run) -> tuple:
    """Runs are only compared within one (model, dataset, machine, max_new_tokens)."""
    m = run.meta
    return (m.get("model"), m.get("dataset"), m.get("machine"), m.get("max_new_tokens"))


def experiment_runs(runs: list[Run], experiment: str, method: str = METHOD,
                    model: str | None = None) -> list[Run]:
    return [r for r in runs if r.meta.get("experiment") == experiment and r.meta.get("method") == method
            and (model is None or r.meta.get("model") == model)]


def latest_model(runs: list[Run]) -> str | None:
    """The model of the most recent run (runs sorted oldest first, as load_runs returns them)."""
    return runs[-1].meta.get("model") if runs else None


def select_group(runs: list[Run]) -> tuple[list[Run], tuple | None, int]:
    """Runs of the most recent run's group_key, the key, and how many other runs were left out."""
    if not runs:
        return [], None, 0
    key = group_key(runs[-1])
    kept = [r for r in runs if group_key(r) == key]
    return kept, key, len(runs) - len(kept)


def group_runs(runs: list[Run], experiment: str, model: str | None = None) -> tuple[list[Run], tuple | None,
                                                                                  list[str]]:
    """The experiment's token_recycling runs of the most recent run's group, the group key, and a note on
    the runs of other groups left out (if any)."""
    kept, key, dropped = select_group(experiment_runs(runs, experiment, model=model))
    notes = [f"{experiment}: {dropped} run(s) of other models/datasets/machines/max_new_tokens left out"] \
        if dropped else []
    return kept, key, notes


def latest_per_x(runs: list[Run], x_of: Callable[[Run], object]) -> dict:
    """x -> the latest run with that x (runs sorted oldest first); runs whose x is None are skipped."""
    out: dict = {}
    for r in runs:
        x = x_of(r)
        if x is not None:
            out[x] = r
    return out


def setting(name: str, default=None) -> Callable[[Run], object]:
    return lambda r: (r.meta.get("method_settings") or {}).get(name, default)


def run_metrics(run: Run) -> dict:
    s = summarize(run.records)
    return {"mat": s["mat"], "tokens_per_s": s["tokens_per_s"]["mean_of_questions"],
            "tokens_per_s_total": s["tokens_per_s"]["total"], "n_turns": s["n_turns"],
            "lossless": lossless_text(s["lossless"]), "phase_share": s["phase_share"]}


def context(key: tuple | None) -> dict:
    model, dataset, machine, max_new = key or (None,) * 4
    return {"model": model, "dataset": dataset, "machine": machine, "max_new_tokens": max_new}


def describe(ctx) -> str:
    return (f"{ctx['model']} on {ctx['dataset']}, max_new_tokens {ctx['max_new_tokens']}, "
            f"machine {ctx['machine']}")


def warn(notes: list[str]) -> None:
    for n in notes:
        print(f"figures: {n}", file=sys.stderr)
