"""ProPD Figure 3: (a) to (c) from the files of scripts/early_heads_report.py and propd_iteration_time.py."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from bench.metrics import by_group
from bench.report.output import Report
from bench.report.plots import new_figure, wrap, yerr
from bench.report.propd import PAPER, common
from bench.report.propd.common import BOTH, LABELS, model_label, sections_texts
from bench.report.select import MissingRunsError, RunSet
from bench.report.tables import fmt, interval_columns, ours_cells

EARLY_HEADS = "early_heads.json"
ITERATION_TIME = "iteration_time.json"
MAKE = PAPER.make("fig3")  # named where a panel has no data
SHOWN_K = (1, 5, 10, 50, 100, 200)
METHODS = ("medusa", "propd")  # (d)'s series; its frame also holds their intervals (<method>_lo, <method>_hi)
PAPER_SAYS = {
    "a": "Paper: early layers' heads are weak at top-1 (layer 2: about 37%) but much more accurate within the "
         "top 50, so tokens outside an early layer's top-k can be pruned.",
    "b": "Paper: verification iteration time grows highly linearly with the tree size at every batch size, "
         "which ProPD's weighted regression T = b0 + b1 * size uses.",
    "c": "Paper: iteration time also varies with the sequence length (and the hardware).",
    "d": "Paper: the accepted length varies across tasks.",
}
SOURCES = {"a": f"python scripts/early_heads_report.py ({MAKE})",  # the files of panels (a) and (b, c)
           "bc": f"python scripts/propd_iteration_time.py ({MAKE})"}


def fit_line(x, y, w=None) -> tuple[float, float, float]:
    """Weighted least squares y = b0 + b1 * x: (b0, b1, R^2), R^2 weighted the same way (1 when every point is on
    the line); NaN everywhere with fewer than two distinct x."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    w = np.ones_like(x) if w is None else np.asarray(w, float)
    if len(x) < 2 or np.ptp(x) == 0:
        return math.nan, math.nan, math.nan
    xm, ym = np.average(x, weights=w), np.average(y, weights=w)
    b1 = float(np.sum(w * (x - xm) * (y - ym)) / np.sum(w * (x - xm) ** 2))
    b0 = float(ym - b1 * xm)
    ss_res = float(np.sum(w * (y - b0 - b1 * x) ** 2))
    ss_tot = float(np.sum(w * (y - ym) ** 2))
    r2 = 1 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else math.nan)
    return b0, b1, r2


def read_json(path: Path, notes: list[str]) -> dict:
    """The file's contents; {} when it is missing, empty or unreadable (a note says which)."""
    try:
        return (json.loads(path.read_text()) if path.is_file() else None) or {}
    except (OSError, json.JSONDecodeError) as err:
        notes.append(f"{path} unreadable ({type(err).__name__}); rerun its script")
        return {}


def accuracy_frame(heads: dict) -> pd.DataFrame:
    """(a): layer, k, accuracy (a fraction)."""
    return pd.DataFrame([{"layer": int(layer), "k": int(k), "accuracy": float(a)}
                         for layer, accs in heads.get("accuracy", {}).items() for k, a in zip(heads["k"], accs)],
                        columns=["layer", "k", "accuracy"])


def timing_frames(timing: dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(b) points at the batch grid's sequence length, (c) batch-1 points, and the fit per batch size."""
    rows = pd.DataFrame(timing.get("rows") or [],  # min/max: NaN in files written before they were recorded
                        columns=["batch", "tree_size", "seq_len", "seconds", "min_seconds", "max_seconds"])
    if rows.empty:
        return rows, rows, pd.DataFrame(columns=["batch_size", "seq_len", "n", "b0", "b1", "r2"])
    batched = rows[rows["batch"] > 1]
    seq = Counter(batched["seq_len"] if len(batched) else rows["seq_len"]).most_common(1)[0][0]
    b = rows[rows["seq_len"] == seq].sort_values(["batch", "tree_size"])
    ones = rows[rows["batch"] == 1]
    lengths = ones.groupby("tree_size")["seq_len"].nunique()
    c = ones[ones["tree_size"].isin(lengths[lengths > 1].index)].sort_values(["tree_size", "seq_len"])
    fits = [{"batch_size": int(bs), "seq_len": int(seq), "n": len(g),
             **dict(zip(("b0", "b1", "r2"), fit_line(g["tree_size"], g["seconds"])))} for bs, g in b.groupby("batch")]
    return b, c, pd.DataFrame(fits)


def mat_by_category(cells) -> pd.DataFrame:
    """(d): medusa's and propd's MAT per category (batch 1, mt_bench) and their intervals."""
    runs = {m: cells.take(cells.p.latest(common.fits(combo), method=m, dataset="mt_bench", batch_size=1))
            for m, combo in (("medusa", None), ("propd", BOTH))}
    rows: dict = {}  # category -> its row
    for m, run in runs.items():
        for g, s in by_group(run.records).items() if run else ():
            rows.setdefault(g, {"category": g}).update({m: s["mat"], **interval_columns(m, s["intervals"]["mat"])})
    columns = ["category", *(c for m in runs for c in (m, f"{m}_lo", f"{m}_hi"))]
    return pd.DataFrame([rows[g] for g in sorted(rows)], columns=columns)


def plot(acc, b, c, fits, d, title: str):
    fig = new_figure(figsize=(18, 4.8))
    ax_a, ax_b, ax_c, ax_d = fig.subplots(1, 4)
    for layer, g in acc.groupby("layer"):
        ax_a.plot(g["k"], 100 * g["accuracy"], label=f"layer {layer}")
    ax_a.set(xscale="log", xlabel="top-k", ylabel="accuracy (%)", title="(a) early heads' top-k accuracy")
    for (bs, g), fit in zip(b.groupby("batch"), fits.itertuples()):
        (line,) = ax_b.plot(g["tree_size"], 1000 * g["seconds"], "o", label=f"BS={bs}")
        xs = np.array([g["tree_size"].min(), g["tree_size"].max()])
        ax_b.plot(xs, 1000 * (fit.b0 + fit.b1 * xs), "-", color=line.get_color(), alpha=0.6)
    ax_b.set(xlabel="tree size (tokens per row)", ylabel="iteration time (ms)",
             title="(b) time vs tree size, least-squares lines")
    for size, g in c.groupby("tree_size"):
        ax_c.plot(g["seq_len"], 1000 * g["seconds"], "o-", label=f"tree {size}")
    ax_c.set(xlabel="sequence length (cached tokens)", ylabel="iteration time (ms)", title="(c) time vs length, BS=1")
    x = np.arange(len(d))
    for i, m in enumerate(col for col in METHODS if col in d.columns):
        ax_d.bar(x + (i - 0.5) * 0.4, d[m].astype(float).fillna(0), 0.4, label=LABELS[m],
                 yerr=yerr(d[m].astype(float), d[f"{m}_lo"].astype(float), d[f"{m}_hi"].astype(float)), capsize=2)
    ax_d.set_xticks(x, d["category"], rotation=45, ha="right")
    ax_d.set(ylabel="MAT (accepted length)", title="(d) MAT per MT-Bench category, BS=1")
    for ax, data, why in ((ax_a, acc, SOURCES["a"]), (ax_b, b, SOURCES["bc"]), (ax_c, c, SOURCES["bc"]),
                          (ax_d, d, MAKE)):
        if len(data):
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
        else:
            ax.text(0.5, 0.5, wrap(f"no data: {why}", 36), ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(title)
    return fig


def long_points(acc, b, c, d) -> pd.DataFrame:
    """Every plotted point: panel, series, x, y (accuracy fraction, seconds, MAT) and (d)'s 95% interval y_lo, y_hi."""
    lines = [("a", acc, "layer", "layer", "k", "accuracy"), ("b", b, "batch", "batch", "tree_size", "seconds"),
             ("c", c, "tree", "tree_size", "seq_len", "seconds")]  # panel, frame, series (name, column), x, y
    parts = [*(pd.DataFrame({"panel": panel, "series": [f"{name} {v}" for v in df[s]], "x": df[x], "y": df[y],
                             **({"y_lo": df["min_seconds"], "y_hi": df["max_seconds"]} if panel != "a" else {})})
               for panel, df, name, s, x, y in lines),
             *(pd.DataFrame({"panel": "d", "series": m, "x": d["category"], "y": d[m], "y_lo": d[f"{m}_lo"],
                             "y_hi": d[f"{m}_hi"]}) for m in METHODS)]
    filled = [p for p in parts if len(p)]
    return pd.concat(filled, ignore_index=True) if filled else pd.DataFrame(columns=["panel", "series", "x", "y"])


def wide(df: pd.DataFrame, index: str, columns: str, values: str, name: str, head: str, scale: float | None,
         spec: str) -> pd.DataFrame:
    """`values` per `index` (rows, named `name`) and `columns` (each headed head.format(value)), scaled, as text."""
    w = df.pivot(index=index, columns=columns, values=values)
    def text(v) -> str:  # scale None: the cells are text already (an empty cell is NaN)
        return v if isinstance(v, str) else fmt(v if scale is None else scale * v, spec)

    return pd.DataFrame({name: w.index.astype(str), **{head.format(k): [text(v) for v in w[k]] for k in w.columns}})


def ms_range(row, spread: bool) -> str:
    """A point's median in ms, with its fastest and slowest repeat when the file has them."""
    median = fmt(1000 * row.seconds, ".2f")
    return f"{median} [{fmt(1000 * row.min_seconds, '.2f')}, {fmt(1000 * row.max_seconds, '.2f')}]" if spread else median


def tables(acc, b, c, fits, d) -> list[tuple[str, pd.DataFrame]]:
    out = []
    if len(acc):
        out.append(("(a) Top-k accuracy of each layer's early head (%)",
                    wide(acc[acc["k"].isin(SHOWN_K)], "layer", "k", "accuracy", "Layer", "top-{}", 100, ".1f")))
    if len(fits):
        out.append((f"(b) Iteration time = b0 + b1 * tree size, least squares at sequence length {fits['seq_len'][0]}",
                    pd.DataFrame({"BS": fits["batch_size"].astype(str), "points": fits["n"].astype(str),
                                  "b0 (ms)": [fmt(1000 * v, ".2f") for v in fits["b0"]],
                                  "b1 (ms per token)": [fmt(1000 * v, ".3f") for v in fits["b1"]],
                                  "R^2": [fmt(v, ".3f") for v in fits["r2"]]})))
    if len(c):
        spread = c["min_seconds"].notna().all()
        out.append(("(c) Iteration time (ms) at batch 1 per sequence length" +
                    (", median [fastest, slowest repeat]" if spread else ""),
                    wide(c.assign(cell=[ms_range(r, spread) for r in c.itertuples()]), "seq_len", "tree_size", "cell",
                         "Length", "tree {}", None, "")))
    if len(d):
        out.append((("(d) MAT per MT-Bench category at batch 1, [low, high]: 95% bootstrap interval over the "
                    "category's questions (the figure's error bars)"),
                    pd.DataFrame({"Category": d["category"], **{f"{LABELS[m]} MAT": ours_cells(d, m) for m in METHODS}})))
    return out


def propd_fig3(runs: RunSet, model: str | None = None) -> Report:
    """Nothing for any panel: MissingRunsError."""
    notes: list[str] = []
    heads = read_json(runs.file("propd", EARLY_HEADS), notes)
    timing = read_json(runs.file("propd", ITERATION_TIME), notes)
    acc = accuracy_frame(heads)
    b, c, fits = timing_frames(timing)
    cells = common.cells(runs, "fig3", lambda r: r.dataset == "mt_bench" and r.batch_size == 1
                and r.method in ("medusa", "propd"), model)
    d = mat_by_category(cells)
    if not (len(acc) or len(b) or len(d)):
        raise MissingRunsError(f"nothing for ProPD Figure 3 under {runs.folder}: no propd/{EARLY_HEADS}, no "
                               f"propd/{ITERATION_TIME}, no medusa/propd run at batch 1 on mt_bench "
                               f"(produced by `{MAKE}`)")
    where = timing.get("machine") or timing.get("device")
    early = heads.get("build") or heads.get("heads")
    title = (f"ProPD Figure 3, ours: (a) {model_label(heads.get('model'))}, early heads {early}; "
             f"(b, c) {model_label(timing.get('model'))} on {where}; (d) {model_label(cells.p.model)}")
    cells.missing = {f"({k})": f"no data ({SOURCES['a' if k == 'a' else 'bc']})"
                     for k, data in (("a", acc), ("b", b), ("c", c)) if not len(data)}
    propd_run = next((r for r in cells.used if r is not None and r.method == "propd"), None)
    built = propd_run.settings.get("early_heads") if propd_run else None
    if heads.get("build") and built and heads["build"] != built:  # (a) scores heads (d)'s ProPD did not prune with
        notes.append(f"(a) scores early heads {heads['build']}, (d)'s propd run pruned with {built}: rerun "
                     f"{SOURCES['a']}")
    if not len(d):
        cells.missing["(d)"] = f"no medusa or propd (both switches on) run at batch 1 on mt_bench ({MAKE})"
    described = {k: v for k, v in heads.items() if k not in ("accuracy", "accuracy_untrained", "k")}  # not per-k
    sources = [f"(a) from {runs.file('propd', EARLY_HEADS)}: {json.dumps(described) if heads else '—'}.",
               (f"(b, c) from {runs.file('propd', ITERATION_TIME)}: model {timing.get('model')}, "
                f"{where}, dtype {timing.get('dtype')}, median of {timing.get('reps')} repeats; one target forward "
                f"over tree-size tokens per row after seq_len cached tokens."), *PAPER_SAYS.values()]
    caption = f"ProPD Figure 3, ours (figure: {runs.file('figures', 'propd_fig3.png')})."
    texts = sections_texts(tables(acc, b, c, fits, d), caption, common.propd_footer(cells, sources, notes))
    return Report({"figures/propd_fig3.png": plot(acc, b, c, fits, d, title),
                   "figures/propd_fig3.csv": long_points(acc, b, c, d), "figures/propd_fig3_fit.csv": fits,
                   **Report.tables("propd_fig3", texts, "figures").files}, show="figures/propd_fig3.md")


ARTIFACT = PAPER.declare(
    "fig3", "Figure 3 (early heads' top-k accuracy, iteration time, MAT per category) -> "
    "figures/propd_fig3.{png,csv,md,tex}", propd_fig3, 5, "ProPD Figure 3: early heads' top-k accuracy, "
    "iteration time vs tree size / length, MAT per category", "fig3", cover="Figure 3", steps=(
        "$(PY) scripts/propd_iteration_time.py model=$(MODEL)", "$(PY) scripts/early_heads_report.py model=$(MODEL)"),
    needs_runs=False)  # panels (a)-(c) come from files, not runs
