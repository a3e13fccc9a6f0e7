"""What Token Recycling's figures share: a sweep's runs (by experiment, of the most recent run's model, dataset,
machine and max_new_tokens), one run's numbers, the make recipes' lines."""

from __future__ import annotations

from bench.metrics import summarize
from bench.report.select import footer
from bench.report.tables import interval_columns, lossless_text
from bench.run.store import Run

METHOD = "token_recycling"
# A sweep's runs are compared only within one of these (a figure's points share its model, dataset and measuring).
GROUP = ("model", "dataset", "machine", "max_new_tokens")


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


def figure_text(title: str, ctx, points, notes: list[str]) -> str:
    """A figure's markdown: its title, then the footer naming the runs of its points (their run_id), every machine
    they were measured on, and its notes."""
    if "machine" in points:
        ctx = {**dict(ctx), "machine": ", ".join(dict.fromkeys(points["machine"]))}
    return "\n".join([title, "", *footer(f"Ours: {describe(ctx)}.", points.itertuples(), notes=notes)]) + "\n"
