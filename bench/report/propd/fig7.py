"""ProPD Figure 7: tokens/s of ar, bpd, medusa and propd per dataset and batch size.

Writes results/figures/propd_fig7.png (grouped bars, one panel per dataset: MT-Bench, ChatGPT Prompts, Alpaca)
and propd_fig7.{csv,md,tex} (the plotted numbers). propd is the run with both switches on. The paper's Figure 7
has no point values in its text, only the claim that ProPD is the fastest in every setting, which the
markdown checks on ours.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.report.plots import figures_dir, new_figure, save_figure, wrap, yerr
from bench.report.propd.common import (
    BATCHES,
    DATASETS,
    MAKE,
    METHODS,
    aggregate_rate,
    cell,
    context,
    footer,
    model_label,
    propd_pool,
    table_texts,
    why_missing,
)
from bench.report.select import missing
from bench.report.tables import MISSING, interval_columns, interval_in, ours_cells, write_texts
from bench.run.metrics import aggregate_rate_interval, aggregate_speedup_interval, mat, tokens_per_s, verdict
from bench.run.store import Run

LABELS = {"ar": "AR", "bpd": "BPD", "medusa": "Medusa", "propd": "ProPD"}
COLORS = {"ar": "tab:gray", "bpd": "tab:orange", "medusa": "tab:blue", "propd": "tab:red"}
BOTH = (True, True)
FILES = ("propd_fig7.png", "propd_fig7.csv", "propd_fig7.md", "propd_fig7.tex")  # under results/figures/
DEFINITIONS = [
    ("Tokens/s: aggregate, all new tokens / the timed wall time (the batches' at batch > 1); the CSV also has the "
    "mean per-question rate (`tok_s_per_question`) and MAT. ProPD: pruning and dynamic tree on. [low, high] and "
    "the error bars: 95% bootstrap interval over questions (each carrying an equal share of its batch's wall "
    "time)."),
    ("Paper (Figure 7, Vicuna 7B/13B/33B): no point values in the text; it states that ProPD is faster than AR, "
    "BPD and Medusa across model sizes, tasks and batch sizes."),
]


def fig7_points(results_dir: str | Path, model: str | None = None) -> pd.DataFrame:
    """One row per (dataset, batch, method): `tok_s` (aggregate), `tok_s_per_question`, `mat`, `run_id`."""
    p = propd_pool(results_dir, model, lambda r: r.dataset in DATASETS, experiment="propd_fig7")
    rows, missing, used, runs = [], {}, [], {}
    for d in DATASETS:
        for b in BATCHES:
            for m in reversed(METHODS):  # propd first: the others' rows carry its paired ratio over them
                run = cell(p, m, d, b, BOTH if m == "propd" else None)
                used.append(run)
                if run is None and any(r.dataset == d for r in p.runs):
                    missing[f"{d} BS={b} {LABELS[m]}"] = why_missing(
                        p, d, "fig7", f"{m} run{' with both switches on' if m == 'propd' else ''} at that batch size")
                runs[d, b, m] = run
                rows.append({"dataset": d, "batch_size": b, "method": m,
                             "tok_s": aggregate_rate(run) if run else None,
                             **interval_columns("tok_s", aggregate_rate_interval(run.records) if run else None),
                             **interval_columns("propd_over", faster(runs.get((d, b, "propd")), run)),
                             "tok_s_per_question": tokens_per_s(run.records)["mean_of_questions"] if run else None,
                             "mat": mat(run.records) if run else None, "run_id": run.run_id if run else None})
        if not any(r.dataset == d for r in p.runs):
            missing[f"{d} (every cell)"] = why_missing(p, d, "fig7", "run")
    order = {m: i for i, m in enumerate(METHODS)}
    df = pd.DataFrame(sorted(rows, key=lambda r: (list(DATASETS).index(r["dataset"]), r["batch_size"],
                                                  order[r["method"]])))
    numeric = ["tok_s", "tok_s_lo", "tok_s_hi", "propd_over_lo", "propd_over_hi", "tok_s_per_question", "mat"]
    df[numeric] = df[numeric].astype(float)
    df.attrs.update(context(p, used, missing=missing))
    return df


def faster(propd: Run | None, other: Run | None) -> list[float] | None:
    """The paired interval of propd's aggregate rate over another method's (None without both, or for propd)."""
    if propd is None or other is None or other is propd:
        return None
    return aggregate_speedup_interval(propd.records, other.records)


def cell_verdict(g: pd.DataFrame) -> str:
    """ProPD fastest in one (dataset, batch) cell: faster than each other method by its paired interval."""
    found = [verdict(interval_in(row, "propd_over"), 1.0) for _, row in g[g["method"] != "propd"].iterrows()]
    return "does not hold" if "does not hold" in found else "undecided" if "undecided" in found else "holds"


def fastest_claim(df: pd.DataFrame) -> str:
    """ProPD the fastest of the four, over the (dataset, batch) cells where all four ran, decided per cell from
    the paired intervals of its rate over each other's: holds when every cell does, does not hold when one does
    not, else undecided."""
    full = [g for _, g in df.groupby(["dataset", "batch_size"], sort=False) if g["tok_s"].notna().all()]
    if not full:
        return "ProPD fastest of the four: not measured (no dataset and batch size with all four methods)."
    cells = [cell_verdict(g) for g in full]
    overall = "does not hold" if "does not hold" in cells else "undecided" if "undecided" in cells else "holds"
    return (f"Claim, ProPD fastest of the four in every measured setting: {overall} ({cells.count('holds')} of "
            f"{len(full)} (dataset, batch) cells with all four methods faster than each other by its paired 95% "
            f"interval; {cells.count('undecided')} undecided, {cells.count('does not hold')} not).")


def display(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (d, b), g in df.groupby(["dataset", "batch_size"], sort=False):
        cells = dict(zip(g["method"], ours_cells(g, "tok_s", ".1f")))
        rows.append({"Dataset": DATASETS[d], "BS": str(b),
                     **{f"{LABELS[m]} tok/s": cells.get(m, MISSING) for m in METHODS}})
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame, path: Path) -> Path:
    fig = new_figure(figsize=(16, 4.8))
    axes = fig.subplots(1, len(DATASETS), sharey=False)
    width = 0.8 / len(METHODS)
    x = np.arange(len(BATCHES))
    legend = None
    for ax, (d, name) in zip(axes, DATASETS.items()):
        sub = df[df["dataset"] == d]
        ax.set_title(name)
        ax.set_xticks(x, [f"BS={b}" for b in BATCHES])
        if sub["tok_s"].isna().all():
            reason = df.attrs["missing"].get(f"{d} (every cell)", "no runs")
            ax.text(0.5, 0.5, wrap(reason, 38), ha="center", va="center", transform=ax.transAxes)
            ax.set_yticks([])
            continue
        for i, m in enumerate(METHODS):
            ys = sub[sub["method"] == m].set_index("batch_size").reindex(BATCHES)
            ax.bar(x + (i - (len(METHODS) - 1) / 2) * width, ys["tok_s"].fillna(0), width, label=LABELS[m],
                   color=COLORS[m], yerr=yerr(ys["tok_s"], ys["tok_s_lo"], ys["tok_s_hi"]), capsize=2)
        ax.set_ylabel("tokens/s (aggregate)")
        ax.grid(axis="y", alpha=0.3)
        legend = legend or ax.legend(fontsize=8)
    a = df.attrs
    fig.suptitle(f"ProPD Figure 7, ours: {model_label(a['model'])} on {a['machine']}, max_new_tokens {a['max_new_tokens']} "
                 f"(missing bars: no run; see propd_fig7.md)")
    return save_figure(fig, path)


def propd_fig7(results_dir: str | Path, model: str | None = None) -> str:
    """Plot and write figures/propd_fig7.{png,csv,md,tex}; returns the markdown. No runs: MissingRunsError."""
    df = fig7_points(results_dir, model)
    if df["tok_s"].isna().all():
        raise missing(f"ar/bpd/medusa/propd runs on {', '.join(DATASETS)}", results_dir, MAKE["fig7"])
    out = figures_dir(results_dir)
    png = plot(df, out / FILES[0])
    caption = ("ProPD Figure 7, ours: tokens/s of AR, BPD, Medusa and ProPD per dataset and batch size "
               f"(figure: {png}).")
    defs = [*DEFINITIONS, fastest_claim(df), f"ProPD settings: {df.attrs['settings']}."]
    texts = table_texts(display(df), caption, footer(df.attrs, defs, df.attrs["missing"]), df)
    write_texts(out, "propd_fig7", texts)
    return texts["md"]
