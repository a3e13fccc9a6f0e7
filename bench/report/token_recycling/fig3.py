"""Token Recycling Figure 3: MAT and tokens/s against (a) tree breadth, (b) tree depth, (c) update strategy. The
paper's figure has no point values: its axis ranges and claims are printed under each panel."""

from __future__ import annotations

import pandas as pd

from bench.report.output import Report
from bench.report.plots import new_figure, wrap, yerr
from bench.report.select import RunSet, setting
from bench.report.token_recycling import PAPER
from bench.report.token_recycling.common import GROUP, METHOD, context, figure_text, numbers

MAKE = PAPER.make("fig3")
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
FIG3_COLUMNS = ["panel", "experiment", "x_name", "x", "mat", "mat_lo", "mat_hi", "tokens_per_s", "tokens_per_s_lo",
                "tokens_per_s_hi", "tokens_per_s_total", "tree", "tree_size", "tree_depth", "update", "n_turns",
                "lossless", "run_id", "model", "dataset", "machine", "max_new_tokens"]


def x_order(x_name: str, x) -> tuple:
    """A panel's x order: update strategies in the paper's order, numbers before text."""
    if x_name == "update":
        return UPDATE_ORDER.index(x) if x in UPDATE_ORDER else len(UPDATE_ORDER), str(x)
    return (0, x) if isinstance(x, int | float) else (1, str(x))


def fig3_points(runs: RunSet, model: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """All three panels' points (columns FIG3_COLUMNS: per x value the latest run with it) and notes;
    MissingRunsError if no panel has runs."""
    exps = [p[0] for p in FIG3_PANELS]
    newest = runs.where(experiment=exps, method=METHOD).latest()
    model = model or (newest.model if newest else None)  # one model for all panels
    frames, notes = [], []
    for experiment, panel, x_name, _, _ in FIG3_PANELS:
        mine, _, found = runs.sweep(experiment, METHOD, GROUP, model)
        per_x = mine.latest_per(setting(x_name))
        notes += found
        if len(per_x) < len(mine.runs):
            notes.append(f"{experiment}: {len(mine.runs) - len(per_x)} older or unlabelled run(s) superseded")
        if not per_x:
            notes.append(f"no runs for panel ({panel}): {MAKE}")
            continue
        rows = [{**numbers(run), "panel": panel, "experiment": experiment, "x_name": x_name, "x": x,
                 **{k: run.settings.get(k) for k in ("tree", "tree_size", "tree_depth", "update")},
                 "run_id": run.run_id, **context(mine.runs[-1])}
                for x, run in sorted(per_x.items(), key=lambda item: x_order(x_name, item[0]))]
        frames.append(pd.DataFrame(rows, columns=FIG3_COLUMNS))  # per panel: each keeps its own dtypes
    if not frames:
        raise runs.missing_sweep(METHOD, exps, model, MAKE)
    return pd.concat(frames, ignore_index=True), notes


def twin_panel(ax, sub, xlabel, categorical):
    """MAT on the left axis, tokens/s on the right, each with its 95% interval as error bars (the lines returned);
    categorical x (update strategy) at 0..n-1."""
    ax2 = ax.twinx()
    xs = list(sub["x"])
    pos = list(range(len(xs))) if categorical else xs
    (l1,) = ax.plot(pos, sub["mat"], "o-", color="tab:blue", label="MAT")
    ax.errorbar(pos, sub["mat"], yerr=yerr(sub["mat"], sub["mat_lo"], sub["mat_hi"]), fmt="none",
                ecolor="tab:blue", capsize=2)
    (l2,) = ax2.plot(pos, sub["tokens_per_s"], "s--", color="tab:red", label="Tokens/s")
    ax2.errorbar(pos, sub["tokens_per_s"], yerr=yerr(sub["tokens_per_s"], sub["tokens_per_s_lo"],
                 sub["tokens_per_s_hi"]), fmt="none", ecolor="tab:red", capsize=2)
    if categorical:
        ax.set_xticks(pos, [UPDATE_LABELS.get(x, str(x)) for x in xs])
        ax.set_xlim(-0.5, len(pos) - 0.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("MAT", color="tab:blue")
    ax2.set_ylabel("Tokens/s", color="tab:red")
    ax.grid(alpha=0.3)
    return [l1, l2]


def tr_fig3(runs: RunSet, model: str | None = None) -> Report:
    df, notes = fig3_points(runs, model)
    fig = new_figure(figsize=(16, 5.6))
    axes = fig.subplots(1, 3)
    handles = None
    for ax, (experiment, panel, x_name, xlabel, paper) in zip(axes, FIG3_PANELS):
        sub = df[df["panel"] == panel]
        ax.set_title(f"({panel}) {experiment}")
        if sub.empty:
            ax.text(0.5, 0.5, wrap(f"no runs: {MAKE}", 30), ha="center", va="center", transform=ax.transAxes)
            ax.set(xticks=[], yticks=[])
        else:
            handles = twin_panel(ax, sub, xlabel, categorical=x_name == "update")
            first = sub.iloc[0]
            ax.set_title(f"({panel}) {experiment}: {first['machine']}, {first['max_new_tokens']} tok", fontsize=9)
        ax.text(0.5, -0.27, wrap(paper, 62), transform=ax.transAxes, ha="center", va="top", fontsize=7.5,
                style="italic")
    if handles:
        axes[0].legend(handles=handles, loc="upper left", fontsize=8)
    ctx = df.iloc[0]
    fig.suptitle(f"Token Recycling Figure 3, ours: {ctx['model']} on {ctx['dataset']} "
                 f"(MAT incl. bonus token; tokens/s = mean over questions; bars: 95% bootstrap interval over questions)")
    fig.subplots_adjust(bottom=0.32, wspace=0.45)
    text = figure_text("Token Recycling Figure 3, ours: MAT and tokens/s against tree breadth, depth and update "
                       "strategy (figures/tr_fig3.png, its points in tr_fig3.csv).", ctx, df, notes)
    return Report.figure("tr_fig3", fig, df, text)


ARTIFACT = PAPER.declare(
    "fig3", "Figure 3 (breadth, depth, update) -> figures/tr_fig3.{png,csv,md}", tr_fig3, 2, "Token Recycling Figure 3: "
    "breadth, depth and update-strategy sweeps, then the plot", "fig3a", "fig3b", "fig3c", cover="Figure 3",
    experiments=tuple(p[0] for p in FIG3_PANELS))
