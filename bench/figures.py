"""Token Recycling's figures from runs on disk (results/runs/<run_id>/), ours beside what the paper gives.

    python -m bench.figures tr_fig3|tr_fig4|tr_auto [--results results] [--model NAME]

Each figure writes `<results>/figures/<name>.png` and the plotted points as `<name>.csv` beside it (atomic:
temp file + rename) and prints the written paths. Runs are found by the `experiment` their summary.json
records (`tr_fig3a`, `tr_fig3b`, `tr_fig3c`, `tr_fig4`, `tr_auto`) and method token_recycling; every
number is recomputed from records.jsonl through bench.metrics, as bench.report does. Of the matching runs,
only those of the most recent run's (model, dataset, machine, max_new_tokens) are used, and of those the
latest per plotted x value. No runs at all: one `error:` line naming the experiment and its make target.

Figure 3 of the paper has no point values, only axis ranges and qualitative claims; the figure prints
those as a note under each panel and never draws paper points.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench.errors import HarnessError
from bench.report import PAPER_TABLES, Run, load_runs, write_atomic
from bench.run.metrics import speedup, summarize

ROOT = Path(__file__).resolve().parents[1]
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


# ---------------------------------------------------------------- selection and reduction


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
    ll = s["lossless"]
    return {"mat": s["mat"], "tokens_per_s": s["tokens_per_s"]["mean_of_questions"],
            "tokens_per_s_total": s["tokens_per_s"]["total"], "n_turns": s["n_turns"],
            "lossless": f"{ll['equal']}/{ll['checked']}" if ll["checked"] else None,
            "phase_share": s["phase_share"]}


def _context(key: tuple | None) -> dict:
    model, dataset, machine, max_new = key or (None,) * 4
    return {"model": model, "dataset": dataset, "machine": machine, "max_new_tokens": max_new}


def _describe(ctx: dict) -> str:
    return (f"{ctx['model']} on {ctx['dataset']}, max_new_tokens {ctx['max_new_tokens']}, "
            f"machine {ctx['machine']}")


# ---------------------------------------------------------------- writing


def new_figure(**kw) -> Figure:
    """An Agg figure outside pyplot: no global backend switch, nothing left open in a notebook."""
    fig = Figure(**kw)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig, path: Path) -> Path:
    """PNG via a temp file in the same folder and a rename: readers never see a partial image."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".png",
                                     delete=False) as f:
        try:
            fig.savefig(f, format="png", dpi=130, bbox_inches="tight")
        except BaseException:
            os.unlink(f.name)
            raise
    os.replace(f.name, path)
    return path


def save_csv(df: pd.DataFrame, path: Path) -> Path:
    write_atomic(path, df.to_csv(index=False))
    return path


def figures_dir(results_dir) -> Path:
    return Path(results_dir, "figures")


def _wrap(text: str, width: int = 60) -> str:
    return "\n".join(textwrap.wrap(text, width))


def notebook_results(env: str = "SPECREPRO_RESULTS") -> Path:
    """The notebooks' results dir: $SPECREPRO_RESULTS, default `results`; relative to the project root."""
    p = Path(os.path.expanduser(os.environ.get(env) or "results"))
    return p if p.is_absolute() else ROOT / p


def notebook_model(env: str = "SPECREPRO_MODEL") -> str | None:
    """$SPECREPRO_MODEL, or None: the model of the most recent matching run."""
    return os.environ.get(env) or None


def show(obj) -> None:
    """Notebook helper: rich display under IPython/Jupyter, print when run as a plain script."""
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(Image(filename=str(obj)) if isinstance(obj, Path) and obj.suffix == ".png" else obj)
    elif isinstance(obj, pd.DataFrame):
        print(obj.to_string(index=False))
    else:
        print(obj)


# ---------------------------------------------------------------- Figure 3: tree breadth, depth, update

UPDATE_ORDER = ["first", "parallel", "last"]  # the paper's First, Cur, Last
UPDATE_LABELS = {"parallel": "parallel\n(paper's Cur)"}

# experiment, panel, x column, x setting, axis label, what the paper gives (axis ranges and claims only)
FIG3_PANELS = [
    ("tr_fig3a", "a", "tree_size", "Breadth (tree nodes, depth 6)",
     ("Paper (Vicuna-7B, MT-Bench, A100): axis ranges only, no point values: MAT 2.20-2.80, "
      "tokens/s 102-120. MAT rises steadily with breadth; tokens/s falls beyond 80 nodes.")),
    ("tr_fig3b", "b", "tree_depth", "Depth (80 nodes)",
     ("Paper: axis ranges only, no point values: MAT 2.67-2.73, tokens/s 115-121. MAT rises, then "
      "flattens; tokens/s fluctuates.")),
    ("tr_fig3c", "c", "update", "Update strategy",
     ("Paper: axis ranges only, no point values: MAT 2.68-2.77, tokens/s 111-120. Last has the highest "
      "MAT but the differences are tiny; Cur (our parallel) is clearly the fastest.")),
]
FIG3_COLUMNS = ["panel", "experiment", "x_name", "x", "mat", "tokens_per_s", "tokens_per_s_total",
                "tree", "tree_size", "tree_depth", "update", "n_turns", "lossless", "run_id", "model",
                "dataset", "machine", "max_new_tokens"]


def _x_sort_key(x_name: str):
    if x_name == "update":
        return lambda x: (UPDATE_ORDER.index(x) if x in UPDATE_ORDER else len(UPDATE_ORDER), str(x))
    return lambda x: (0, x) if isinstance(x, int | float) else (1, str(x))


def sweep_points(runs: list[Run], experiment: str, x_name: str, panel: str = "",
                 model: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """One row per x value (the latest run with it) of one sweep experiment, and notes."""
    kept, key, dropped = select_group(experiment_runs(runs, experiment, model=model))
    notes = [f"{experiment}: {dropped} run(s) of other models/datasets/machines/max_new_tokens left out"] \
        if dropped else []
    per_x = latest_per_x(kept, setting(x_name))
    if len(per_x) < len(kept):
        notes.append(f"{experiment}: {len(kept) - len(per_x)} older or unlabelled run(s) superseded")
    rows = []
    for x in sorted(per_x, key=_x_sort_key(x_name)):
        run = per_x[x]
        m = run_metrics(run)
        ms = run.meta.get("method_settings") or {}
        rows.append({"panel": panel, "experiment": experiment, "x_name": x_name, "x": x, "mat": m["mat"],
                     "tokens_per_s": m["tokens_per_s"], "tokens_per_s_total": m["tokens_per_s_total"],
                     "tree": ms.get("tree"), "tree_size": ms.get("tree_size"),
                     "tree_depth": ms.get("tree_depth"), "update": ms.get("update"),
                     "n_turns": m["n_turns"], "lossless": m["lossless"], "run_id": run.run_id,
                     **_context(key)})
    return pd.DataFrame(rows, columns=FIG3_COLUMNS), notes


def fig3_points(results_dir, model: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """All three panels' points (columns FIG3_COLUMNS) and notes; MissingRunsError if no panel has runs."""
    runs = load_runs(results_dir)
    exps = [p[0] for p in FIG3_PANELS]
    model = model or latest_model([r for r in runs if r.meta.get("experiment") in exps
                                   and r.meta.get("method") == METHOD])
    frames, notes = [], []
    for experiment, panel, x_name, _, _ in FIG3_PANELS:
        df, n = sweep_points(runs, experiment, x_name, panel, model)
        frames.append(df)
        notes += n
        if df.empty:
            notes.append(f"no runs for panel ({panel}): {MAKE_TARGETS[experiment]}")
    if all(df.empty for df in frames):
        raise missing_runs(exps, results_dir, model)
    return pd.concat([f for f in frames if not f.empty], ignore_index=True), notes


def _twin_panel(ax, xs, labels, mat, tps, xlabel, categorical):
    ax2 = ax.twinx()
    pos = list(range(len(xs))) if categorical else xs
    (l1,) = ax.plot(pos, mat, "o-", color="tab:blue", label="MAT")
    (l2,) = ax2.plot(pos, tps, "s--", color="tab:red", label="Tokens/s")
    if categorical:
        ax.set_xticks(pos, labels)
        ax.set_xlim(-0.5, len(pos) - 0.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("MAT", color="tab:blue")
    ax2.set_ylabel("Tokens/s", color="tab:red")
    ax.grid(alpha=0.3)
    return [l1, l2]


def tr_fig3(results_dir, model: str | None = None) -> list[Path]:
    """Figure 3 (a) breadth, (b) depth, (c) update strategy: MAT (left axis) and tokens/s (right)."""
    df, notes = fig3_points(results_dir, model)
    fig = new_figure(figsize=(16, 5.6))
    axes = fig.subplots(1, 3)
    handles = None
    for ax, (experiment, panel, x_name, xlabel, paper) in zip(axes, FIG3_PANELS):
        sub = df[df["panel"] == panel]
        ax.set_title(f"({panel}) {experiment}")
        if sub.empty:
            ax.text(0.5, 0.5, _wrap(f"no runs: {MAKE_TARGETS[experiment]}", 30), ha="center", va="center",
                    transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
        else:
            xs = list(sub["x"])
            labels = [UPDATE_LABELS.get(x, str(x)) for x in xs]
            handles = _twin_panel(ax, xs, labels, sub["mat"], sub["tokens_per_s"], xlabel,
                                  categorical=x_name == "update") or handles
            ax.set_title(f"({panel}) {experiment}: " + _describe_short(sub.iloc[0]), fontsize=9)
        ax.text(0.5, -0.27, _wrap(paper, 62), transform=ax.transAxes, ha="center", va="top", fontsize=7.5,
                style="italic")
    if handles:
        axes[0].legend(handles=handles, loc="upper left", fontsize=8)
    ctx = df.iloc[0]
    fig.suptitle(f"Token Recycling Figure 3, ours: {ctx['model']} on {ctx['dataset']} "
                 f"(MAT incl. bonus token; tokens/s = mean over questions)")
    fig.subplots_adjust(bottom=0.32, wspace=0.45)
    out = figures_dir(results_dir)
    paths = [save_figure(fig, out / "tr_fig3.png"), save_csv(df, out / "tr_fig3.csv")]
    _warn(notes)
    return paths


def _describe_short(row) -> str:
    return f"{row['machine']}, {row['max_new_tokens']} tok"


# ---------------------------------------------------------------- Figure 4: time allocation

# paper component (CSV key), label, our phases. Prefill is folded into Model Forward by default: the paper
# times a whole response to a query and lists no separate prefill component.
FIG4_COMPONENTS = [
    ("preprocess", "Preprocess", ("preprocess",)),
    ("retrieval", "Retrieval", ("draft",)),
    ("model_forward", "Model Forward", ("target_forward", "prefill")),
    ("verify", "Verify", ("verify",)),
    ("update", "Update", ("update",)),
]
FIG4_PAPER_CSV = PAPER_TABLES / "token_recycling_fig4_time_allocation.csv"


def component_shares(phase_share: dict[str, float], fold_prefill: bool = True) -> dict[str, dict]:
    """Our phase shares (of wall time) -> the paper's components: {key: {"label", "phases", "share"}}.

    fold_prefill=False gives prefill its own "prefill" component (the paper has no value for it). Phases
    outside the mapping (none for token_recycling today) go to "other".
    """
    comps = []
    for key, label, phases in FIG4_COMPONENTS:
        if not fold_prefill:
            phases = tuple(p for p in phases if p != "prefill")
        comps.append((key, label, phases))
    if not fold_prefill:
        comps.append(("prefill", "Prefill", ("prefill",)))
    mapped = {p for _, _, phases in comps for p in phases}
    other = tuple(sorted(set(phase_share) - mapped))
    if other:
        comps.append(("other", "Other", other))
    return {key: {"label": label, "phases": "+".join(phases),
                  "share": sum(phase_share.get(p, 0.0) for p in phases)} for key, label, phases in comps}


def paper_fig4() -> dict[str, float]:
    """The paper's Figure 4 percentages, component -> percent."""
    df = pd.read_csv(FIG4_PAPER_CSV)
    return dict(zip(df["component"], df["percent"].astype(float)))


def fig4_points(results_dir, model: str | None = None,
                fold_prefill: bool = True) -> tuple[pd.DataFrame, list[str]]:
    runs = experiment_runs(load_runs(results_dir), "tr_fig4", model=model)
    kept, key, dropped = select_group(runs)
    if not kept:
        raise missing_runs(["tr_fig4"], results_dir, model)
    run = kept[-1]
    m = run_metrics(run)
    paper = paper_fig4()
    rows = [{"component": k, "label": c["label"], "our_phases": c["phases"], "ours_percent": 100 * c["share"],
             "paper_percent": paper.get(k, math.nan), "run_id": run.run_id, **_context(key)}
            for k, c in component_shares(m["phase_share"], fold_prefill).items()]
    notes = [f"tr_fig4: {dropped} run(s) of other models/datasets/machines/max_new_tokens left out"] \
        if dropped else []
    df = pd.DataFrame(rows)
    df.attrs.update(prefill_percent=100 * m["phase_share"].get("prefill", 0.0), fold_prefill=fold_prefill)
    return df, notes


def tr_fig4(results_dir, model: str | None = None, fold_prefill: bool = True) -> list[Path]:
    """Figure 4: share of a response's time per component, ours beside the paper's (grouped bars)."""
    df, notes = fig4_points(results_dir, model, fold_prefill)
    fig = new_figure(figsize=(9, 5))
    ax = fig.subplots()
    pos = np.arange(len(df))
    w = 0.38
    bars = [ax.bar(pos - w / 2, df["ours_percent"], w, label=f"ours ({df.iloc[0]['model']})",
                   color="tab:blue"),
            ax.bar(pos + w / 2, df["paper_percent"].fillna(0), w, label="paper (Vicuna-7B, A100)",
                   color="tab:gray")]
    for bar_set, values in zip(bars, (df["ours_percent"], df["paper_percent"])):
        for b, v in zip(bar_set, values):
            ax.annotate("n/a" if math.isnan(v) else f"{v:.1f}%",
                        (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom",
                        fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(pos, [f"{lab}\n({ph})" for lab, ph in zip(df["label"], df["our_phases"])], fontsize=8)
    ax.set_ylabel("% of response time")
    ax.set_ylim(0, 105)
    ax.legend()
    r = df.iloc[0]
    prefill = (f"Prefill ({df.attrs['prefill_percent']:.1f}% of ours) is folded into Model Forward."
               if fold_prefill else "Prefill is shown separately; the paper has no prefill component.")
    ax.set_title(f"Token Recycling Figure 4, time allocation: ours ({_describe(r)}) vs paper", fontsize=9)
    ax.text(0.5, -0.2, _wrap(f"{prefill} Ours: share of wall time per phase (our phase names in brackets), "
                             f"run {r['run_id']}.", 110),
            transform=ax.transAxes, ha="center", va="top", fontsize=8, style="italic")
    out = figures_dir(results_dir)
    paths = [save_figure(fig, out / "tr_fig4.png"), save_csv(df, out / "tr_fig4.csv")]
    _warn(notes)
    return paths


# ---------------------------------------------------------------- tree=auto vs the paper's tree

AUTO_COLUMNS = ["method", "tree_source", "tree", "size", "depth", "predicted_mat", "mat", "tokens_per_s",
                "predicted_speedup_vs_ar", "speedup_vs_ar", "forward_cost_ratio", "bound_speedup", "lossless", "run_id", "model",
                "dataset", "machine", "max_new_tokens"]
AUTO_HEADERS = {"method": "method", "tree_source": "tree source", "tree": "tree", "size": "size",
                "depth": "depth", "predicted_mat": "predicted MAT", "mat": "MAT", "tokens_per_s": "tok/s",
                "predicted_speedup_vs_ar": "predicted speedup", "speedup_vs_ar": "speedup vs ar",
                "forward_cost_ratio": "T(size+1)/T(1)",
                "bound_speedup": "MAT·T(1)/T(size+1)", "lossless": "lossless"}
AUTO_DEFINITIONS = ("MAT incl. bonus token; tok/s: mean over questions; speedup vs our ar run on the same "
                    "questions; predicted MAT and speedup: the tree builder's estimates (none for the paper's "
                    "template tree); T(n): median ms of one forward of n tokens (root + draft) on this machine; "
                    "MAT·T(1)/T(size+1): the speedup if drafting and verifying cost nothing.")
IMAGE_HEADERS = {"predicted MAT": "predicted\nMAT", "predicted speedup": "predicted\nspeedup", "speedup vs ar": "speedup\nvs ar",
                 "T(size+1)/T(1)": "T(size+1)\n/T(1)", "MAT·T(1)/T(size+1)": "MAT·T(1)\n/T(size+1)"}
SOURCE_ORDER = ["template", "built", "auto"]


def load_forward_cost(results_dir, model: str | None, machine: str | None,
                      dtype: str | None = None) -> dict | None:
    """Latest results/cache/forward_cost/*.json of this model, machine (and dtype, if given); None: none."""
    best = None
    for p in sorted(Path(results_dir, "cache", "forward_cost").glob("*.json")):
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


def _interp_ratio(curve: pd.DataFrame | None, n: int | None) -> float:
    if curve is None or n is None or not (curve["n"].min() <= n <= curve["n"].max()):
        return math.nan
    return float(np.interp(n, curve["n"], curve["ratio"]))


def auto_table(results_dir, model: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame | None, list[str]]:
    """Rows: ar, then token_recycling per tree_source (latest each); the forward-cost curve; notes."""
    runs = load_runs(results_dir)
    kept, key, dropped = select_group(experiment_runs(runs, "tr_auto", model=model))
    if not kept:
        raise missing_runs(["tr_auto"], results_dir, model)
    notes = [f"tr_auto: {dropped} run(s) of other models/datasets/machines/max_new_tokens left out"] \
        if dropped else []
    ctx = _context(key)
    # The ar baseline: same group, preferably from this experiment, else the latest such ar run.
    ars = [r for r in runs
           if r.meta.get("method") == "ar" and not r.meta.get("variant") and group_key(r) == key]
    ar = ([r for r in ars if r.meta.get("experiment") == "tr_auto"] or ars or [None])[-1]
    if ar is None:
        notes.append(f"no ar run for {_describe(ctx)}: no speedups")
    per_source = latest_per_x(kept, setting("tree_source", "template"))
    dtype = (kept[-1].meta.get("provenance") or {}).get("dtype")
    cost = load_forward_cost(results_dir, ctx["model"], ctx["machine"], dtype)
    if cost is None and (per_source.get("auto") and setting("forward_cost_ms")(per_source["auto"])):
        # No cached file (e.g. results copied without cache/): the curve the auto run chose its tree with.
        recorded = setting("forward_cost_ms")(per_source["auto"])
        cost = {"sizes": [int(k) for k in recorded], "ms": list(recorded.values()),
                "path": f"method_settings.forward_cost_ms of run {per_source['auto'].run_id}"}
    curve = forward_cost_curve(cost) if cost else None
    if curve is None:
        notes.append(f"no forward-cost curve for {ctx['model']} on {ctx['machine']} in "
                     f"{Path(results_dir, 'cache', 'forward_cost')} ({MAKE_TARGETS['tr_auto']})")
    rows = []
    if ar is not None:
        m = run_metrics(ar)
        rows.append({"method": "ar", "tree_source": None, "tree": None, "size": 0, "depth": 0,
                     "predicted_mat": None, "predicted_speedup_vs_ar": None, "mat": m["mat"], "tokens_per_s": m["tokens_per_s"],
                     "speedup_vs_ar": 1.0, "forward_cost_ratio": 1.0, "bound_speedup": m["mat"],
                     "lossless": m["lossless"], "run_id": ar.run_id, **ctx})
    order = SOURCE_ORDER + sorted(set(per_source) - set(SOURCE_ORDER))
    for source in (s for s in order if s in per_source):
        run = per_source[source]
        ms = run.meta.get("method_settings") or {}
        m = run_metrics(run)
        size = ms.get("tree_size")
        ratio = _interp_ratio(curve, None if size is None else size + 1)  # root + draft tokens
        rows.append({"method": METHOD, "tree_source": source, "tree": ms.get("tree"), "size": size,
                     "depth": ms.get("tree_depth"), "predicted_mat": ms.get("predicted_mat"),
                     "predicted_speedup_vs_ar": ms.get("predicted_speedup_vs_ar"),
                     "mat": m["mat"], "tokens_per_s": m["tokens_per_s"],
                     "speedup_vs_ar": speedup(run.records, ar.records) if ar else None,
                     "forward_cost_ratio": ratio, "bound_speedup": m["mat"] / ratio if ratio else math.nan,
                     "lossless": m["lossless"], "run_id": run.run_id, **ctx})
    df = pd.DataFrame(rows, columns=AUTO_COLUMNS)
    num = ["size", "depth", "predicted_mat", "mat", "tokens_per_s", "predicted_speedup_vs_ar", "speedup_vs_ar", "forward_cost_ratio",
           "bound_speedup"]
    df[num] = df[num].astype(float)
    if cost:
        df.attrs["forward_cost"] = cost["path"]
    return df, curve, notes


def _cell(v, spec=".2f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return format(v, spec) if isinstance(v, float) else str(v)


def auto_display(df: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame()
    for col, head in AUTO_HEADERS.items():
        spec = ".0f" if col in ("size", "depth") else ".1f" if col == "tokens_per_s" else ".2f"
        out[head] = [_cell(v, spec) for v in df[col]]
    return out


def tr_auto(results_dir, model: str | None = None) -> list[Path]:
    """The paper's tree vs tree=auto vs ar: T(n)/T(1) of this machine and the table of both trees."""
    df, curve, notes = auto_table(results_dir, model)
    ctx = df.iloc[0]
    fig = new_figure(figsize=(16, 5))
    ax, axt = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.8]})
    if curve is not None:
        ax.plot(curve["n"], curve["ratio"], "o-", ms=3, color="tab:blue", label="T(n)/T(1), measured")
        for _, r in df[df["method"] == METHOD].iterrows():
            if not math.isnan(r["forward_cost_ratio"]):
                ax.plot([r["size"] + 1], [r["forward_cost_ratio"]], "*", ms=14,
                        label=f"{r['tree_source']} tree: n = {int(r['size']) + 1}")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, _wrap(f"no forward-cost curve cached for this model and machine "
                                f"({MAKE_TARGETS['tr_auto']})", 35), ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel("n = tokens in one forward (root + draft)")
    ax.set_ylabel("T(n) / T(1)")
    ax.set_title(f"Forward cost, {ctx['model']} on {ctx['machine']}", fontsize=9)
    ax.grid(alpha=0.3)
    axt.axis("off")
    disp = auto_display(df)
    # In the image: one label column instead of method + tree source, headers broken over two lines.
    shown = disp.drop(columns=["method", "tree source"])
    labels = ["ar" if m == "ar" else f"TR, {src} tree" for m, src in zip(df["method"], df["tree_source"])]
    table = axt.table(cellText=shown.values, rowLabels=labels, loc="center", cellLoc="center",
                      colLabels=[IMAGE_HEADERS.get(c, c) for c in shown.columns])
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    table.auto_set_column_width(list(range(-1, len(shown.columns))))
    table.scale(1, 2.2)
    axt.set_title(f"Paper's tree vs tree=auto vs ar: {_describe(ctx)}", fontsize=9)
    axt.text(0.5, 0.02, _wrap(AUTO_DEFINITIONS, 120), transform=axt.transAxes, ha="center", va="bottom", fontsize=7.5,
             style="italic")
    out = figures_dir(results_dir)
    paths = [save_figure(fig, out / "tr_auto.png"), save_csv(df, out / "tr_auto.csv")]
    if curve is not None:
        paths.append(save_csv(curve, out / "tr_auto_forward_cost.csv"))
    md = "\n\n".join([f"Token Recycling: the paper's tree vs tree=auto vs ar, {_describe(ctx)}.",
                       disp.to_markdown(index=False, disable_numparse=True),
                       "\n".join([AUTO_DEFINITIONS, f"Runs: {', '.join(df['run_id'])}.",
                                  *(f"Note: {n}." for n in notes)])]) + "\n"
    write_atomic(out / "tr_auto.md", md)
    paths.append(out / "tr_auto.md")
    _warn(notes)
    return paths


# ---------------------------------------------------------------- CLI

def _warn(notes: list[str]) -> None:
    for n in notes:
        print(f"figures: {n}", file=sys.stderr)


FIGURES = {"tr_fig3": tr_fig3, "tr_fig4": tr_fig4, "tr_auto": tr_auto}


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    p = _OneLineParser(prog="bench.figures", description=__doc__.splitlines()[0])
    p.add_argument("figure", choices=sorted(FIGURES))
    p.add_argument("--results", default="results", help="results dir holding runs/ (figures/ is written)")
    p.add_argument("--model", default=None, help="default: the model of the most recent matching run")
    args = p.parse_args(argv)
    try:
        paths = FIGURES[args.figure](args.results, model=args.model)
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
