"""Token Recycling Figure 4: share of a response's time per component, ours beside the paper's."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench.metrics import phase_share_interval
from bench.report.output import Report
from bench.report.phase_timing import components, require_exact_phases
from bench.report.plots import new_figure, wrap, yerr
from bench.report.select import RunSet
from bench.report.token_recycling import PAPER
from bench.report.token_recycling.common import GROUP, METHOD, context, describe, figure_text, numbers

MAKE = PAPER.make("fig4")

# paper component (CSV key), label, our phases. Prefill is folded into Model Forward by default: the paper
# times a whole response to a query and lists no separate prefill component.
FIG4_COMPONENTS = [
    ("preprocess", "Preprocess", ("preprocess",)),
    ("retrieval", "Retrieval", ("draft",)),
    ("model_forward", "Model Forward", ("target_forward", "prefill")),
    ("verify", "Verify", ("verify",)),
    ("update", "Update", ("update",)),
]


def component_shares(phase_share: dict[str, float], fold_prefill: bool = True) -> dict[str, dict]:
    """Our phase shares (of wall time) -> the paper's components: {key: {"label", "phases", "share"}}; prefill its
    own component unless `fold_prefill`, phases outside the mapping "other"."""
    comps = [(key, label, tuple(p for p in phases if fold_prefill or p != "prefill"))
             for key, label, phases in FIG4_COMPONENTS]
    comps += [] if fold_prefill else [("prefill", "Prefill", ("prefill",))]
    return {key: {"label": label, "phases": "+".join(phases),
                  "share": math.fsum(phase_share.get(p, 0.0) for p in phases)}
            for key, label, phases in components(comps, phase_share)}


def paper_fig4(runs: RunSet) -> dict[str, float]:
    df = runs.paper()
    return dict(zip(df["component"], df["percent"].astype(float)))


def fig4_points(runs: RunSet, model: str | None = None,
                fold_prefill: bool = True) -> tuple[pd.DataFrame, list[str]]:
    mine, _, notes = runs.sweep("tr_fig4", METHOD, GROUP, model, MAKE)
    run = mine.latest()
    require_exact_phases([run], "token_recycling/fig4", MAKE)
    m = numbers(run)
    paper = paper_fig4(runs)
    rows = []
    for k, c in component_shares(m["phase_share"], fold_prefill).items():
        # the share's 95% interval over questions (None at batch > 1, where phase times are per batch)
        ci = phase_share_interval(run.records, c["phases"].split("+"))
        rows.append({"component": k, "label": c["label"], "our_phases": c["phases"], "ours_percent": 100 * c["share"],
                     "ours_percent_lo": 100 * ci[0] if ci else math.nan,
                     "ours_percent_hi": 100 * ci[1] if ci else math.nan,
                     "paper_percent": paper.get(k, math.nan), "run_id": run.run_id, **context(run)})
    df = pd.DataFrame(rows)
    df.attrs.update(prefill_percent=100 * m["phase_share"].get("prefill", 0.0), fold_prefill=fold_prefill)
    return df, notes


def tr_fig4(runs: RunSet, model: str | None = None, fold_prefill: bool = True) -> Report:
    df, notes = fig4_points(runs, model, fold_prefill)
    fig = new_figure(figsize=(9, 5))
    ax = fig.subplots()
    pos = np.arange(len(df))
    w = 0.38
    bars = [ax.bar(pos - w / 2, df["ours_percent"], w, label=f"ours ({df.iloc[0]['model']})", color="tab:blue",
                   capsize=3, yerr=yerr(df["ours_percent"], df["ours_percent_lo"], df["ours_percent_hi"])),
            ax.bar(pos + w / 2, df["paper_percent"].fillna(0), w, label="paper (Vicuna-7B, A100)", color="tab:gray")]
    for bar_set, values in zip(bars, (df["ours_percent"], df["paper_percent"])):
        for b, v in zip(bar_set, values):
            ax.annotate("n/a" if math.isnan(v) else f"{v:.1f}%", (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(pos, [f"{lab}\n({ph})" for lab, ph in zip(df["label"], df["our_phases"])], fontsize=8)
    ax.set(ylabel="% of response time", ylim=(0, 105))
    ax.legend()
    r = df.iloc[0]
    prefill = (f"Prefill ({df.attrs['prefill_percent']:.1f}% of ours) is folded into Model Forward."
               if fold_prefill else "Prefill is shown separately; the paper has no prefill component.")
    ax.set_title(f"Token Recycling Figure 4, time allocation: ours ({describe(r)}) vs paper", fontsize=9)
    ax.text(0.5, -0.2, wrap(f"{prefill} Ours: share of wall time per phase (our phase names in brackets), "
                            f"run {r['run_id']}; error bars: 95% bootstrap interval over questions.", 110),
            transform=ax.transAxes, ha="center", va="top", fontsize=8, style="italic")
    text = figure_text(f"Token Recycling Figure 4, ours: time per component of a step beside the paper's shares. "
                       f"{prefill}", r, df, notes)
    return Report.figure("tr_fig4", fig, df, text)


ARTIFACT = PAPER.declare(
    "fig4", "Figure 4 (time per component) -> figures/tr_fig4.{png,csv,md}", tr_fig4, 3, "Token Recycling Figure 4: "
    "time per component of a step, beside the paper's shares", "fig4", cover="Figure 4", experiments=("tr_fig4",),
    needs=(), paper_csv=("token_recycling_fig4_time_allocation.csv",))
