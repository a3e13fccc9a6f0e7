"""Post-use & Pre-cut Figure 5: speedup over AR against lambda with reuse only; the best lambda per task."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from bench.metrics import speedup_interval, verdict
from bench.report.holistic import PAPER, common
from bench.report.holistic.common import make
from bench.report.output import Report
from bench.report.plots import new_figure, yerr
from bench.report.select import MissingRunsError, RunSet, footer
from bench.report.tables import MISSING, fmt_ci, markdown, ours_cells

DATASETS = ("humaneval", "mt_bench")
LEVEL = "reuse_target"  # both reuses, no Pre-cut
UNMEASURED = "not measured (needs both datasets)"


def differs_verdict(b: dict[str, int], runs: dict[str, dict]) -> str:
    """The best lambda differs between the two tasks: holds when each task's best lambda beats the other's on its
    questions (paired speedup ratio wholly above 1), else undecided (an interval cannot show equality)."""
    if len(b) < 2:
        return UNMEASURED
    (da, la), (db, lb) = list(b.items())[:2]
    if la == lb:
        return f"undecided (both best at lambda {la}; an interval cannot show they are the same)"
    ca = speedup_interval(runs[da][la].records, runs[da][lb].records)
    cb = speedup_interval(runs[db][lb].records, runs[db][la].records)
    v = "holds" if verdict(ca, 1.0) == verdict(cb, 1.0) == "holds" else "undecided"
    return (f"{v} (on {da} lambda {la} over {lb}: {fmt_ci(ca)}; on {db} lambda {lb} over {la}: {fmt_ci(cb)}; "
            f"paired 95% intervals of the speedup ratio)")


def best(df: pd.DataFrame) -> dict[str, int]:
    """The lambda of the highest speedup per dataset (datasets without a measured speedup left out)."""
    got = df.dropna(subset=["speedup"])
    return {ds: int(g.loc[g["speedup"].idxmax(), "lambda"]) for ds, g in got.groupby("dataset", sort=False)}


def differs_claim(df: pd.DataFrame) -> str:
    b = best(df)
    if len(b) < 2:
        return UNMEASURED
    verdict = "holds" if len(set(b.values())) > 1 else "does not hold"
    return f"{verdict} (best lambda: " + ", ".join(f"{ds} {n}" for ds, n in b.items()) + ")"


def plot(df: pd.DataFrame) -> Figure:
    fig = new_figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for ds, g in df.groupby("dataset", sort=False):
        line, = ax.plot(g["lambda"], g["speedup"], marker="o", label=ds)
        ax.errorbar(g["lambda"], g["speedup"], yerr=yerr(g["speedup"], g["speedup_lo"], g["speedup_hi"]), fmt="none",
                    ecolor=line.get_color(), capsize=2)
        if g["speedup"].notna().any():
            top = g.loc[g["speedup"].idxmax()]
            ax.scatter([top["lambda"]], [top["speedup"]], s=120, facecolors="none", edgecolors=line.get_color())
    ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    ax.set(xlabel="draft length λ (reuse at draft and target, no Pre-cut)", ylabel="speedup over AR",
           title=f"Post-use & Pre-cut Fig. 5, ours: {df.attrs['model']} (circled: best λ)")
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def holistic_fig5(runs: RunSet, model: str | None = None, draft: str | None = None) -> Report:
    rows, foot, cells = [], [], {}
    pools, errors = common.ladders(runs, DATASETS, ARTIFACT, model, draft)
    for ds, p in pools.items():
        model = model or p.model
        cells[ds] = {n: p.paired(common.rung(LEVEL, n)) for n in common.draft_lengths(p, LEVEL)}
        rows += [{"dataset": ds, "lambda": n, **common.numbers(run, base), "run_id": run.run_id,
                  "ar_run_id": base.run_id if base else None} for n, (run, base) in cells[ds].items()]
        foot += footer(common.ours(p), [r for pair in cells[ds].values() for r in pair], notes=p.notes)
    if not rows:
        raise MissingRunsError(f"no reuse-only holistic runs on {', '.join(DATASETS)} in {runs.folder} "
                               f"({make(ARTIFACT)})")
    df = pd.DataFrame(rows)
    df.attrs["model"] = model
    differs = differs_verdict(best(df), {ds: {n: run for n, (run, _) in c.items()} for ds, c in cells.items()})
    table = df.assign(cell=ours_cells(df, "speedup")).pivot(index="lambda", columns="dataset", values="cell")
    table = table.fillna(MISSING).rename_axis("λ").reset_index()
    caption = (f"Post-use & Pre-cut Figure 5, ours: speedup over AR per draft length with reuse only, "
               f"{model}; the paper's figure has no values in its text.")
    foot += [*errors, (f"Claim, the best lambda differs between tasks: {differs}; the points' best: "
                       f"{differs_claim(df).split(': ', 1)[-1].rstrip(')')}."),
             "Speedup [low, high], error bars: 95% bootstrap interval over questions, paired with AR.",
             f"{MISSING}: no run ({make(ARTIFACT)})."]
    return Report.figure("holistic_fig5", plot(df), df, markdown(table, caption, foot))


ARTIFACT = PAPER.declare(
    "fig5", "Figure 5 (speedup vs draft length with reuse only, HumanEval and MT-Bench) -> "
    "figures/holistic_fig5.{png,csv,md}", holistic_fig5, 8, "Post-use & Pre-cut Figure 5: speedup vs lambda 3-24 "
    "with reuse only, HumanEval and MT-Bench", "ar dataset=humaneval,mt_bench", "fig5", cover="Figure 5")
