"""Token Recycling with the paper's tree vs `tree=auto` vs ar, beside this machine's forward cost T(n)/T(1) (from
results/cache/forward_cost/, else the auto run's method_settings)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from bench.metrics import speedup, speedup_interval, verification_mat
from bench.report.output import Report
from bench.report.plots import new_figure, wrap
from bench.report.select import RunSet, footer, setting
from bench.report.tables import MISSING, interval_columns, is_missing, markdown, ours_cells
from bench.report.token_recycling import PAPER
from bench.report.token_recycling.common import GROUP, METHOD, context, describe, numbers

MAKE = PAPER.make("auto")

AUTO_COLUMNS = ["method", "tree_source", "tree", "size", "depth", "predicted_mat", "verification_mat", "mat",
                "mat_lo", "mat_hi", "tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi", "predicted_speedup_vs_ar",
                "speedup_vs_ar", "speedup_vs_ar_lo", "speedup_vs_ar_hi", "forward_cost_ratio", "bound_speedup",
                "lossless", "run_id", "model", "dataset", "machine", "max_new_tokens"]
AUTO_HEADERS = {"method": "method", "tree_source": "tree source", "tree": "tree", "size": "size", "depth": "depth",
                "predicted_mat": "predicted MAT", "verification_mat": "verification MAT", "mat": "MAT",
                "tokens_per_s": "tok/s", "predicted_speedup_vs_ar": "predicted speedup", "speedup_vs_ar": "speedup vs ar",
                "forward_cost_ratio": "T(size+1)/T(1)", "bound_speedup": "MAT·T(1)/T(size+1)", "lossless": "lossless"}
AUTO_DEFINITIONS = ("MAT incl. bonus token; tok/s: mean over questions; speedup vs our ar run on the same "
                    "questions; predicted MAT and speedup: the tree builder's estimates (none for the paper's "
                    "template tree); verification MAT: MAT over verification steps only (each prompt's prefill, "
                    "a step of one token, left out), the quantity predicted MAT estimates; "
                    "T(n): median ms of one forward of n tokens (root + draft) on this machine; "
                    "MAT·T(1)/T(size+1): the speedup if drafting and verifying cost nothing. [low, high]: 95% "
                    "bootstrap interval over questions (paired with ar for the speedup).")
SOURCE_ORDER = ["template", "built", "auto"]
NUMERIC = AUTO_COLUMNS[AUTO_COLUMNS.index("size"):AUTO_COLUMNS.index("lossless")]  # floats, NaN where missing


def load_forward_cost(folder: Path, model: str | None, machine: str | None,
                      dtype: str | None = None) -> dict | None:
    """Latest folder/*.json (results/cache/forward_cost/) of this model, machine (and dtype, if given); None: none."""
    best = None
    for p in sorted(Path(folder).glob("*.json")):
        try:
            d = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        mine = (d.get("model") == model and d.get("machine") == machine and d.get("sizes") and d.get("ms")
                and (dtype is None or d.get("dtype") == dtype))
        if mine and (best is None or str(d.get("created") or "") >= str(best.get("created") or "")):
            best = {**d, "path": str(p)}
    return best


def forward_cost_curve(cost: dict) -> pd.DataFrame:
    """n, ms, ratio = T(n)/T(1) (T of the smallest measured n when n=1 is missing), sorted by n."""
    df = pd.DataFrame({"n": cost["sizes"], "ms": cost["ms"]}).astype(float).sort_values("n")
    base = df.loc[df["n"] == 1, "ms"]
    df["ratio"] = df["ms"] / (base.iloc[0] if len(base) else df["ms"].iloc[0])
    df["n"] = df["n"].astype(int)
    return df.reset_index(drop=True)


def interp_ratio(curve: pd.DataFrame | None, n: int | None) -> float:
    if curve is None or n is None or not (curve["n"].min() <= n <= curve["n"].max()):
        return math.nan
    return float(np.interp(n, curve["n"], curve["ratio"]))


def auto_table(runs: RunSet, model: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame | None, list[str]]:
    """Rows: ar, then token_recycling per tree_source (latest each); the forward-cost curve; notes."""
    mine, group, notes = runs.sweep("tr_auto", METHOD, GROUP, model, MAKE)
    ctx = context(mine.runs[-1])
    # The ar baseline: same group, preferably from this experiment, else the latest such ar run.
    ars = group.where(method="ar", keep=lambda r: not r.variant)
    ar = ars.latest(lambda r: r.experiment == "tr_auto") or ars.latest()
    if ar is None:
        notes.append(f"no ar run for {describe(ctx)}: no speedups")
    per_source = mine.latest_per(setting("tree_source", "template"))
    cached = runs.file("cache", "forward_cost")
    cost = load_forward_cost(cached, ctx["model"], ctx["machine"], mine.runs[-1].provenance.get("dtype"))
    if cost is None and (per_source.get("auto") and setting("forward_cost_ms")(per_source["auto"])):
        # No cached file (e.g. results copied without cache/): the curve the auto run chose its tree with.
        recorded = setting("forward_cost_ms")(per_source["auto"])
        cost = {"sizes": [int(k) for k in recorded], "ms": list(recorded.values()),
                "path": f"method_settings.forward_cost_ms of run {per_source['auto'].run_id}"}
    curve = forward_cost_curve(cost) if cost else None
    if curve is None:
        notes.append(f"no forward-cost curve for {ctx['model']} on {ctx['machine']} in {cached} ({MAKE})")
    rows = []
    if ar is not None:
        m = numbers(ar)  # the columns not in AUTO_COLUMNS are left out
        rows.append({**m, "method": "ar", "size": 0, "depth": 0, "verification_mat": verification_mat(ar.records),
                     "speedup_vs_ar": 1.0, "forward_cost_ratio": 1.0, "bound_speedup": m["mat"],
                     "run_id": ar.run_id, **ctx})
    order = SOURCE_ORDER + sorted(set(per_source) - set(SOURCE_ORDER))
    for source in (s for s in order if s in per_source):
        run = per_source[source]
        ms = run.settings
        m = numbers(run)
        size = ms.get("tree_size")
        ratio = interp_ratio(curve, None if size is None else size + 1)  # root + draft tokens
        rows.append({**m, "method": METHOD, "tree_source": source, "tree": ms.get("tree"), "size": size,
                     "depth": ms.get("tree_depth"), "predicted_mat": ms.get("predicted_mat"),
                     "predicted_speedup_vs_ar": ms.get("predicted_speedup_vs_ar"),
                     "verification_mat": verification_mat(run.records),
                     "speedup_vs_ar": speedup(run.records, ar.records) if ar else None,
                     **interval_columns("speedup_vs_ar", speedup_interval(run.records, ar.records) if ar else None),
                     "forward_cost_ratio": ratio, "bound_speedup": m["mat"] / ratio if ratio else math.nan,
                     "run_id": run.run_id, **ctx})
    df = pd.DataFrame(rows, columns=AUTO_COLUMNS)
    df[NUMERIC] = df[NUMERIC].astype(float)
    if cost:
        df.attrs["forward_cost"] = cost["path"]
    return df, curve, notes


def auto_display(df: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame()
    for col, head in AUTO_HEADERS.items():
        spec = ".0f" if col in ("size", "depth") else ".1f" if col == "tokens_per_s" else ".2f"
        # numbers with their 95% interval where they have one ("2.31 [2.10, 2.52]"), else alone; text as is
        out[head] = (ours_cells(df, col, spec) if col in NUMERIC
                     else [MISSING if is_missing(v) else str(v) for v in df[col]])
    return out


def plot_curve(ax, curve: pd.DataFrame | None, df: pd.DataFrame) -> None:
    """T(n)/T(1) with each tree's n marked; a note where no curve is cached."""
    if curve is not None:
        ax.plot(curve["n"], curve["ratio"], "o-", ms=3, color="tab:blue", label="T(n)/T(1), measured")
        for _, r in df[(df["method"] == METHOD) & df["forward_cost_ratio"].notna()].iterrows():
            ax.plot([r["size"] + 1], [r["forward_cost_ratio"]], "*", ms=14,
                    label=f"{r['tree_source']} tree: n = {int(r['size']) + 1}")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, wrap(f"no forward-cost curve cached for this model and machine ({MAKE})", 35),
                ha="center", va="center", transform=ax.transAxes)
    ax.set(xlabel="n = tokens in one forward (root + draft)", ylabel="T(n) / T(1)")
    ax.grid(alpha=0.3)


def tr_auto(runs: RunSet, model: str | None = None) -> Report:
    df, curve, notes = auto_table(runs, model)
    ctx = df.iloc[0]
    fig = new_figure(figsize=(16, 5))
    ax, axt = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.8]})
    plot_curve(ax, curve, df)
    ax.set_title(f"Forward cost, {ctx['model']} on {ctx['machine']}", fontsize=9)
    axt.axis("off")
    disp = auto_display(df)
    # In the image: one label column instead of method + tree source, headers broken over two lines (at the first
    # space, or before the ratio's "/").
    shown = disp.drop(columns=["method", "tree source"])
    labels = ["ar" if m == "ar" else f"TR, {src} tree" for m, src in zip(df["method"], df["tree_source"])]
    table = axt.table(cellText=shown.values, rowLabels=labels, loc="center", cellLoc="center",
                      colLabels=[c.replace(" ", "\n", 1).replace(")/", ")\n/") for c in shown.columns])
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    table.auto_set_column_width(list(range(-1, len(shown.columns))))
    table.scale(1, 2.2)
    axt.set_title(f"Paper's tree vs tree=auto vs ar: {describe(ctx)}", fontsize=9)
    axt.text(0.5, 0.02, wrap(AUTO_DEFINITIONS, 120), transform=axt.transAxes, ha="center", va="bottom",
             fontsize=7.5, style="italic")
    files = {"figures/tr_auto.png": fig, "figures/tr_auto.csv": df}
    if curve is not None:
        files["figures/tr_auto_forward_cost.csv"] = curve
    # footer reads each row's run_id (the table's rows are its runs: ar, then one per tree source)
    files["figures/tr_auto.md"] = markdown(disp, f"Token Recycling: the paper's tree vs tree=auto vs ar, "
                                           f"{describe(ctx)}.", footer(AUTO_DEFINITIONS, df.itertuples(), notes=notes),
                                           numparse=False)
    return Report(files)


ARTIFACT = PAPER.declare(
    "auto", "paper's tree vs tree=auto vs ar -> figures/tr_auto.{png,csv,md}", tr_auto, 4, "AR, Token Recycling with "
    "the paper tree and with tree=auto on this machine, T(n) curve", "auto_ar", "auto", experiments=("tr_auto",))
