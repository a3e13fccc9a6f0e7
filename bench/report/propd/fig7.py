"""ProPD Figure 7: tokens/s per method, dataset and batch size; the claim "fastest" from paired intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.metrics import aggregate_rate_interval, mat, tokens_per_s, verdict
from bench.report.claims import overall, speed_ratios
from bench.report.output import Report
from bench.report.plots import new_figure, wrap, yerr
from bench.report.propd import PAPER, common
from bench.report.propd.common import BOTH, LABELS
from bench.report.select import Cells, RunSet
from bench.report.tables import MISSING, interval_columns, interval_in, measure, ours_cells

COLORS = {"ar": "tab:gray", "bpd": "tab:orange", "medusa": "tab:blue", "propd": "tab:red"}
DEFINITIONS = [
    ("Tokens/s: aggregate, all new tokens / the timed wall time (the batches' at batch > 1); the CSV also has the "
    "mean per-question rate (`tok_s_per_question`) and MAT. ProPD: pruning and dynamic tree on. [low, high] and "
    "the error bars: 95% bootstrap interval over questions (each carrying an equal share of its batch's wall "
    "time)."),
    ("Paper (Figure 7, Vicuna 7B/13B/33B): no point values in the text; it states that ProPD is faster than AR, "
    "BPD and Medusa across model sizes, tasks and batch sizes.")]


def fig7_points(runs: RunSet, model: str | None = None) -> tuple[pd.DataFrame, Cells]:
    """One row per (dataset, batch, method), and the cells for the footer."""
    cells, rows = common.cells(runs, "fig7", lambda r: r.dataset in common.DATASETS, model), []
    for d in common.DATASETS:
        measured = any(r.dataset == d for r in cells.p.runs)  # else one reason for the dataset's every cell
        for b in common.BATCHES:
            # the others' rows carry its paired interval over them
            ours = cells.p.latest(common.fits(BOTH), method="propd", dataset=d, batch_size=b)
            per_method = {}
            for m in reversed(common.METHODS):  # propd first: the footer names the runs in this order
                run = cells.take(ours if m == "propd"
                                 else cells.p.latest(common.fits(), method=m, dataset=d, batch_size=b))
                if run is None and measured:
                    cells.gap(f"{d} BS={b} {LABELS[m]}", d,
                              f"{m} run{' with both switches on' if m == 'propd' else ''} at that batch size")
                per_method[m] = {"dataset": d, "batch_size": b, "method": m,
                                 **measure("tok_s", run, common.aggregate_rate, aggregate_rate_interval),
                                 **interval_columns("propd_over", speed_ratios(ours, run)[1] if m != "propd" else None),
                                 "tok_s_per_question": tokens_per_s(run.records)["mean_of_questions"] if run else None,
                                 "mat": mat(run.records) if run else None, "run_id": run.run_id if run else None}
            rows += [per_method[m] for m in common.METHODS]  # the table in METHODS order
        if not measured:
            cells.gap(f"{d} (every cell)", d, "run")
    return common.frame(cells, rows, ("dataset", "batch_size", "method")), cells


def cell_verdict(g: pd.DataFrame) -> str:
    """ProPD fastest in one (dataset, batch) cell: faster than each other method by its paired interval."""
    return overall([verdict(interval_in(row, "propd_over"), 1.0) for _, row in g[g["method"] != "propd"].iterrows()])


def fastest_claim(df: pd.DataFrame) -> str:
    """ProPD fastest over the cells where all four ran, per cell from the paired intervals."""
    full = [g for _, g in df.groupby(["dataset", "batch_size"], sort=False) if g["tok_s"].notna().all()]
    if not full:
        return "ProPD fastest of the four: not measured (no dataset and batch size with all four methods)."
    cells = [cell_verdict(g) for g in full]
    return (f"Claim, ProPD fastest of the four in every measured setting: {overall(cells)} ({cells.count('holds')} of "
            f"{len(full)} (dataset, batch) cells with all four methods faster than each other by its paired 95% "
            f"interval; {cells.count('undecided')} undecided, {cells.count('does not hold')} not).")


def display(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (d, b), g in df.groupby(["dataset", "batch_size"], sort=False):
        cells = dict(zip(g["method"], ours_cells(g, "tok_s", ".1f")))
        rows.append({"Dataset": common.DATASETS[d], "BS": str(b),
                     **{f"{LABELS[m]} tok/s": cells.get(m, MISSING) for m in common.METHODS}})
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame):
    fig = new_figure(figsize=(16, 4.8))
    axes = fig.subplots(1, len(common.DATASETS), sharey=False)
    width = 0.8 / len(common.METHODS)
    x = np.arange(len(common.BATCHES))
    legend = None
    for ax, (d, name) in zip(axes, common.DATASETS.items()):
        sub = df[df["dataset"] == d]
        ax.set_title(name)
        ax.set_xticks(x, [f"BS={b}" for b in common.BATCHES])
        if sub["tok_s"].isna().all():
            reason = df.attrs["missing"].get(f"{d} (every cell)", "no runs")
            ax.text(0.5, 0.5, wrap(reason, 38), ha="center", va="center", transform=ax.transAxes)
            ax.set_yticks([])
            continue
        for i, m in enumerate(common.METHODS):
            ys = sub[sub["method"] == m].set_index("batch_size").reindex(common.BATCHES)
            ax.bar(x + (i - (len(common.METHODS) - 1) / 2) * width, ys["tok_s"].fillna(0), width, label=LABELS[m],
                   color=COLORS[m], yerr=yerr(ys["tok_s"], ys["tok_s_lo"], ys["tok_s_hi"]), capsize=2)
        ax.set_ylabel("tokens/s (aggregate)")
        ax.grid(axis="y", alpha=0.3)
        legend = legend or ax.legend(fontsize=8)
    a = df.attrs
    fig.suptitle(f"ProPD Figure 7, ours: {a['label']} on {a['machine']}, max_new_tokens {a['max_new_tokens']} "
                 f"(missing bars: no run; see propd_fig7.md)")
    return fig


def propd_fig7(runs: RunSet, model: str | None = None) -> Report:
    df, cells = fig7_points(runs, model)
    if df["tok_s"].isna().all():
        raise runs.missing(f"ar/bpd/medusa/propd runs on {', '.join(common.DATASETS)}", PAPER.make("fig7"))
    caption = ("ProPD Figure 7, ours: tokens/s of AR, BPD, Medusa and ProPD per dataset and batch size "
               f"(figure: {runs.file('figures', 'propd_fig7.png')}).")
    defs = [*DEFINITIONS, fastest_claim(df), f"ProPD settings: {df.attrs['settings']}."]
    return common.table("fig7", display(df), caption, common.propd_footer(cells, defs), df, figure=plot(df))


# One sweep per dataset: chatgpt_prompts has no offline copy and a failing job stops a sweep, so its failure (`-`)
# does not stop the others; the figure marks its panel.
ARTIFACT = PAPER.declare(
    "fig7", "Figure 7 (tok/s of ar, bpd, medusa, propd per dataset and batch) -> figures/propd_fig7.{png,csv,md,tex}",
    propd_fig7, 4, "ProPD Figure 7: tok/s of ar, bpd, medusa, propd x MT-Bench, ChatGPT Prompts, Alpaca x "
    "batch 1-16", cover="Figure 7", steps=("$(PY) -m bench.run $(SWEEP) experiment=propd/fig7 dataset=mt_bench $(PROPD_ARGS)",
                         "-$(PY) -m bench.run $(SWEEP) experiment=propd/fig7 dataset=chatgpt_prompts $(PROPD_SET_ARGS)",
                         "$(PY) -m bench.run $(SWEEP) experiment=propd/fig7 dataset=alpaca $(PROPD_SET_ARGS)"))
