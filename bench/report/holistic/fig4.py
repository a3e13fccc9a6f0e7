"""Post-use & Pre-cut Figure 4: cumulative utilisation of vanilla SD, Pre-cut's Q_init and Q updated."""

from __future__ import annotations

from collections import defaultdict
from math import fsum

import pandas as pd
from matplotlib.figure import Figure

from bench.report.claims import sums_interval
from bench.report.declare import option
from bench.report.drafter import describe
from bench.report.holistic import PAPER
from bench.report.holistic.claims import ordering_verdict
from bench.report.holistic.common import draft_length, frozen, make, points
from bench.report.output import Report
from bench.report.plots import new_figure, yerr
from bench.report.select import MissingRunsError, RunSet, footer
from bench.report.tables import MISSING, interval_columns, markdown, ours_cells
from bench.run.store import Run

CURVES = {"vanilla": "vanilla SD", "q_init": "Pre-cut, Q_init (learned in warm-up, then frozen)",
          "q_updated": "Pre-cut, Q updated"}
COLORS = {"vanilla": "tab:gray", "q_init": "tab:blue", "q_updated": "tab:red"}
DATASET = option("--dataset", help="the runs' dataset (default alpaca, as the paper's Figure 4)")
SERIES = ["accepted", "drafted", "new_tokens", "draft_calls"]  # per verification (series)
UNMEASURED = "not measured (needs all three curves)"


def curve(run: Run) -> str | None:
    """Which Figure 4 curve a holistic run is: reuse off; Pre-cut off (vanilla), frozen (q_init) or learning."""
    s = run.settings
    if run.method != "holistic" or s.get("reuse_draft") or s.get("reuse_target"):
        return None
    if not s.get("precut"):
        return "vanilla"
    return "q_init" if frozen(run) else "q_updated"


def series(rec: dict) -> list[list]:
    """A record's accepted draft tokens, drafted tokens, new tokens and draft calls, one per verification."""
    c = rec.get("counters") or {}
    drafted = c.get("draft_tokens") or []
    return [c.get("accepted_draft") or [], drafted, rec["accept_lengths"][-len(drafted):] if drafted else [],
            c.get("draft_calls") or []]


def steps(run: Run) -> pd.DataFrame:
    """One row per verification, records in the run's order (questions, then turns)."""
    df = pd.DataFrame([v for rec in run.records for v in zip(*series(rec), strict=False)], columns=SERIES)
    df.insert(0, "step", range(1, len(df) + 1))
    cum = df[SERIES].cumsum().astype(float)
    df["util_accepted"] = cum["accepted"] / cum["drafted"].where(cum["drafted"] > 0)
    df["util_eq3"] = cum["new_tokens"] / cum["draft_calls"].where(cum["draft_calls"] > 0)
    return df


def final_intervals(run: Run) -> dict:
    """util_accepted_lo/_hi and util_eq3_lo/_hi: the final utilisations' 95% intervals over the run's questions."""
    per: dict = defaultdict(lambda: [0.0] * len(SERIES))
    for rec in run.records:
        for i, values in enumerate(series(rec)):
            per[rec["question_id"]][i] += fsum(values)
    # A question without drafts: no ratio to resample (None).
    return {**interval_columns("util_accepted", sums_interval(per, 0, 1)),
            **interval_columns("util_eq3", sums_interval(per, 2, 3))}


def curve_steps(name: str, run: Run) -> pd.DataFrame:
    """One curve's csv rows: its steps, with the final utilisations' intervals on its last step only."""
    df = steps(run)
    df.insert(0, "curve", name)
    df["draft_length"], df["run_id"] = draft_length(run), run.run_id
    for col, value in final_intervals(run).items():
        df[col] = float("nan")
        if len(df) and value is not None:
            df.loc[df.index[-1], col] = value
    return df


def ordering_claim(df: pd.DataFrame) -> str:
    """The paper's reading: Q_updated above Q_init above vanilla SD (final cumulative utilisation)."""
    u = {name: float(g["util_accepted"].iloc[-1]) for name, g in df.groupby("curve", sort=False) if len(g)}
    if set(u) != set(CURVES):
        return UNMEASURED
    verdict = "holds" if u["q_updated"] > u["q_init"] > u["vanilla"] else "does not hold"
    return f"{verdict} (" + ", ".join(f"{CURVES[n]} {u[n]:.3f}" for n in CURVES) + ")"


def plot(df: pd.DataFrame) -> Figure:
    fig = new_figure(figsize=(7, 4))
    ax = fig.add_subplot()
    for name, g in df.groupby("curve", sort=False):
        ax.plot(g["step"], g["util_accepted"], color=COLORS[name],
                label=f"{CURVES[name]} (λ{'≤' if name != 'vanilla' else '='}{g['draft_length'].iloc[0]})")
        end = g.iloc[[-1]]  # the final utilisation's 95% interval over questions
        ax.errorbar(end["step"], end["util_accepted"], color=COLORS[name], capsize=3,
                    yerr=yerr(end["util_accepted"], end["util_accepted_lo"], end["util_accepted_hi"]))
    ax.set(xlabel="verification step (questions in order)", ylabel="utilisation so far (accepted / drafted)",
           title=f"Post-use & Pre-cut Fig. 4, ours: {df.attrs['model']}, {df.attrs['dataset']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def holistic_fig4(runs: RunSet, model: str | None = None, dataset: str = "alpaca",
                  draft: str | None = None) -> Report:
    mine = runs.own(dataset=dataset, greedy=True, keep=curve)
    p = mine.pin(model=model, draft=draft, dataset=dataset)
    if not p.runs:
        raise MissingRunsError(f"no Figure 4 runs (holistic, reuse off) on {dataset} in {runs.folder} "
                               f"({make(ARTIFACT)})")
    latest = p.latest_per(curve)
    df = pd.concat([curve_steps(name, latest[name]) for name in CURVES if name in latest], ignore_index=True)
    df.attrs.update(model=p.model, dataset=dataset)
    ordering = ordering_verdict(*(latest[n] for n in CURVES)) if set(latest) >= set(CURVES) else UNMEASURED
    ends = df.groupby("curve", sort=False).tail(1).reset_index(drop=True)  # each curve's last step
    summary = pd.DataFrame({"Curve": [CURVES[n] for n in ends["curve"]], "λ": ends["draft_length"],
                            "steps": ends["step"], "utilisation (accepted / drafted)": ours_cells(ends, "util_accepted", ".3f"),
                            "Eq. 3 (new tokens / draft calls)": ours_cells(ends, "util_eq3", ".3f"),
                            "run": ends["run_id"]})
    caption = (f"Post-use & Pre-cut Figure 4, ours: final cumulative token utilisation on {dataset} "
               f"({p.model}, draft: {describe(p.drafter)}); the paper shows curves only, no values.")
    foot = footer((f"Claim, Q_updated > Q_init > vanilla SD, from paired 95% intervals over questions: {ordering}; "
                   f"final utilisation: {points(ordering_claim(df))}."),  # the numbers; the verdict is the intervals'
                  [latest[n] for n in CURVES if n in latest],
                  ["[low, high]: 95% bootstrap interval over questions (the figure's error bars, at each curve's end).",
                   f"{MISSING}: no run ({make(ARTIFACT)})."], notes=p.notes)
    return Report.figure("holistic_fig4", plot(df), df, markdown(summary, caption, foot))


ARTIFACT = PAPER.declare(
    "fig4", "Figure 4 (utilisation over time: vanilla SD, Pre-cut Q_init, Q updated) -> "
    "figures/holistic_fig4.{png,csv,md}", holistic_fig4, 7, "Post-use & Pre-cut Figure 4: utilisation over time, "
    "vanilla SD vs Pre-cut Q_init vs Q updated, on Alpaca", "ar dataset=alpaca", "fig4", cover="Figure 4",
    options=(DATASET,))
