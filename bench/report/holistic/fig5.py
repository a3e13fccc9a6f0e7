"""Post-use & Pre-cut Figure 5: draft-length sensitivity with reuse only (both reuses, no Pre-cut): speedup over
AR against lambda on HumanEval and MT-Bench (conf/experiment/holistic/fig5.yaml).

Writes results/figures/holistic_fig5.png (one line per dataset, the best lambda marked) and
holistic_fig5.{csv,md}. The paper's figure (Llama-2 7B/70B) has no point values in its text; its claim is that
the best lambda differs between tasks, which the markdown decides from our curves.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.cachefile import atomic_write
from bench.report.holistic.claims import fmt_ci
from bench.report.holistic.common import MAKE, draft_lengths, footer, holistic_pool, ladder_run, numbers
from bench.report.holistic.common import holistic_drafter as drafter_to_show
from bench.report.plots import figures_dir, new_figure, save_csv, save_figure, yerr
from bench.report.select import MissingRunsError
from bench.report.tables import MISSING, markdown, ours_cells
from bench.run.metrics import speedup_interval, verdict

DATASETS = ("humaneval", "mt_bench")
LEVEL = "reuse_target"  # both reuses, no Pre-cut


def build_holistic_fig5(results_dir: str | Path, model: str | None = None, draft: str | None = None) -> pd.DataFrame:
    rows, lines, errors, runs = [], [], [], {}
    draft = drafter_to_show(results_dir, model, draft)  # one drafter on both datasets
    for ds in DATASETS:
        try:
            p = holistic_pool(results_dir, model, ds, MAKE["fig5"], draft)
        except MissingRunsError as e:
            errors.append(str(e))
            continue
        model = model or p.model
        used = []
        for n in draft_lengths(p, LEVEL):
            run = ladder_run(p, LEVEL, n)
            base = p.baseline(run, "ar")
            used += [run, base]
            rows.append({"dataset": ds, "lambda": n, **numbers(run, base), "run_id": run.run_id,
                         "ar_run_id": base.run_id if base else None})
        lines += footer(p, used)
        runs[ds] = {n: ladder_run(p, LEVEL, n) for n in draft_lengths(p, LEVEL)}
    if not rows:
        raise MissingRunsError(f"no reuse-only holistic runs on {', '.join(DATASETS)} in {results_dir} ({MAKE['fig5']})")
    df = pd.DataFrame(rows)
    df.attrs.update({"model": model, "footer": lines + [f"Missing: {e}." for e in errors],
                     "differs": differs_verdict(best(df), runs)})
    return df


def differs_verdict(b: dict[str, int], runs: dict[str, dict]) -> str:
    """The best lambda differs between the two tasks, from paired intervals: holds when each task's own best
    lambda beats the other task's best on that task's questions (speedup ratio wholly above 1); equality cannot
    be shown by an interval, so otherwise undecided."""
    if len(b) < 2:
        return "not measured (needs both datasets)"
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
        return "not measured (needs both datasets)"
    verdict = "holds" if len(set(b.values())) > 1 else "does not hold"
    return f"{verdict} (best lambda: " + ", ".join(f"{ds} {n}" for ds, n in b.items()) + ")"


def plot(df: pd.DataFrame, path: Path) -> Path:
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
    ax.set_xlabel("draft length λ (reuse at draft and target, no Pre-cut)")
    ax.set_ylabel("speedup over AR")
    ax.set_title(f"Post-use & Pre-cut Fig. 5, ours: {df.attrs['model']} (circled: best λ)")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def holistic_fig5(results_dir: str | Path, model: str | None = None, draft: str | None = None) -> str:
    """Build, write results/figures/holistic_fig5.{png,csv,md}; returns the markdown."""
    df = build_holistic_fig5(results_dir, model, draft)
    out = figures_dir(results_dir)
    plot(df, out / "holistic_fig5.png")
    save_csv(df, out / "holistic_fig5.csv")
    cells = df.assign(cell=ours_cells(df, "speedup"))
    table = cells.pivot(index="lambda", columns="dataset", values="cell").reset_index()
    table = pd.DataFrame({"λ": table["lambda"], **{ds: table[ds].fillna(MISSING) for ds in table.columns[1:]}})
    caption = (f"Post-use & Pre-cut Figure 5, ours: speedup over AR per draft length with reuse only, "
               f"{df.attrs['model']}; the paper's figure has no values in its text.")
    md = markdown(table, caption, [*df.attrs["footer"],
                                   (f"Claim, the best lambda differs between tasks: {df.attrs['differs']}; the "
                                    f"points' best: {differs_claim(df).split(': ', 1)[-1].rstrip(')')}."),
                                   ("Speedup [low, high], error bars: 95% bootstrap interval over questions, paired "
                                    "with AR."),
                                   f"{MISSING}: no run ({MAKE['fig5']})."])
    atomic_write(out / "holistic_fig5.md", md)
    return md
