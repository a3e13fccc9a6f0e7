"""What Token Recycling's figures share: experiments and make targets, a sweep's runs, one run's numbers.

Runs are found (bench.report.select) by the `experiment` their summary.json records (`tr_fig3a`,
`tr_fig3b`, `tr_fig3c`, `tr_fig4`, `tr_auto`) and method token_recycling. Of the matching runs, only those
of the most recent run's (model, dataset, machine, max_new_tokens) are used, and of those the latest per
plotted x value. No runs at all: a MissingRunsError naming the experiment and its make target.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from bench.report.select import MissingRunsError, missing, select_group, where
from bench.report.tables import interval_columns, lossless_text
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


def missing_runs(experiments: Iterable[str], results_dir, model: str | None,
                 method: str = METHOD) -> MissingRunsError:
    exps = list(experiments)
    of_model = f" of model '{model}'" if model else ""
    targets = " / ".join(dict.fromkeys(MAKE_TARGETS.get(e, "?") for e in exps))
    named = " / ".join(repr(e) for e in exps)
    return missing(f"{method} runs{of_model} with experiment {named}", results_dir, targets)


def group_runs(runs: list[Run], experiment: str, model: str | None = None) -> tuple[list[Run], tuple | None,
                                                                                  list[str]]:
    """The experiment's token_recycling runs of the most recent run's group (bench.report.select.group_key),
    the group key, and a note on the runs of other groups left out (if any)."""
    kept, key, dropped = select_group(where(runs, experiment=experiment, method=METHOD, model=model))
    notes = [f"{experiment}: {dropped} run(s) of other models/datasets/machines/max_new_tokens left out"] \
        if dropped else []
    return kept, key, notes


def run_metrics(run: Run) -> dict:
    s = summarize(run.records)
    return {"mat": s["mat"], "tokens_per_s": s["tokens_per_s"]["mean_of_questions"],
            **interval_columns("mat", s["intervals"]["mat"]),
            **interval_columns("tokens_per_s", s["intervals"]["tokens_per_s"]),
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
