"""DySpec Figure 2 (left): acceptance rate against draft probability, the observation DySpec builds its tree on.

The paper (CNN DailyMail) plots, per draft-probability column, the distribution of the acceptance rate
min(1, T[x] / D[x]) of drafted tokens (right: target against draft probability). Ours: every node a verification
tested (its parent the root or accepted), binned by the draft's probability of its token under its parent's
distribution (the draft temperature's), with the share accepted and its 95% interval over questions. It needs
per-node records, kept only by runs with run.record_steps=true (conf/experiment/dyspec/fig2.yaml); the right panel
needs the target's probabilities, which no record keeps, so it is not drawn.

Writes results/figures/dyspec_fig2.{png,csv,md}: one panel per target temperature, from one drafter's runs (--draft,
default the latest such run's; bench.report.drafter).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.cachefile import atomic_write
from bench.report.drafter import choose, describe, latest_drafter
from bench.report.plots import figures_dir, new_figure, save_csv, save_figure
from bench.report.select import default_model, latest, missing, read_runs, used_ids
from bench.report.steps import SWITCH, binned_rate, has_steps, nodes, rises
from bench.report.tables import fmt, markdown, with_interval

MAKE = "make reproduce-dyspec-fig2"
METHODS = ("dyspec", "sequoia", "specinfer")
EDGES = np.round(np.linspace(0, 1, 11), 1).tolist()  # ten columns of draft probability, as the paper's heat map
PAPER = ("Paper (Figure 2, CNN DailyMail, no point values): tokens of higher draft probability are more likely to "
         "be accepted; the acceptance rate under one draft probability looks binomially distributed; the target "
         "probability correlates strongly with the draft probability (right panel: not measured here, the target's "
         "probabilities are not recorded).")


def fig2_runs(results_dir: str | Path, model: str | None = None, draft: str | None = None) -> list:
    """The latest dyspec run with per-step records per temperature (else sequoia's, else specinfer's), of `model`
    (default: that of the latest such run) and one drafter (default: the latest such run's), preferring runs of
    experiment dyspec_fig2."""
    runs = [r for r in read_runs(results_dir, method=METHODS) if has_steps(r)]
    model = default_model(runs, model)
    runs, _ = choose([r for r in runs if r.model == model], draft)
    chosen = {}
    for t in sorted({r.temperature for r in runs}):
        for m in METHODS:
            mine = [r for r in runs if r.temperature == t and r.method == m]
            run = latest(mine, lambda r: r.experiment == "dyspec_fig2") or latest(mine)
            if run is not None:
                chosen[t] = run
                break
    return list(chosen.values())


def build_fig2(results_dir: str | Path, model: str | None = None, draft: str | None = None) -> pd.DataFrame:
    """One row per (temperature, draft-probability bin): nodes tested, the share accepted and its interval."""
    runs = fig2_runs(results_dir, model, draft)
    if not runs:
        raise missing(f"{'/'.join(METHODS)} runs with per-step records ({SWITCH})", results_dir, MAKE)
    parts = []
    for run in runs:
        tested = nodes(run).query("reached == 1")
        bins = binned_rate(tested, "conf", EDGES)
        parts.append(bins.assign(temperature=run.temperature, method=run.method,
                                 dataset=run.dataset, run_id=run.run_id))
    df = pd.concat(parts, ignore_index=True)
    df.attrs.update(model=runs[0].model, run_ids=used_ids(runs), drafter=latest_drafter(runs),
                    machines=sorted({str(r.machine) for r in runs}),
                    verdicts={r.temperature: rises(df[df["run_id"] == r.run_id]) for r in runs})
    return df


def plot(df: pd.DataFrame, path: Path) -> Path:
    temps = list(dict.fromkeys(df["temperature"]))
    fig = new_figure(figsize=(5 * len(temps), 4))
    for ax, t in zip(np.atleast_1d(fig.subplots(1, len(temps))), temps):
        sub = df[df["temperature"] == t]
        mid = (sub["bin_low"] + sub["bin_high"]) / 2
        err = np.vstack([sub["rate"] - sub["rate_low"], sub["rate_high"] - sub["rate"]]).clip(min=0)
        ax.bar(mid, sub["rate"].fillna(0), width=0.09, color="tab:blue", alpha=0.7)
        ax.errorbar(mid, sub["rate"], yerr=np.nan_to_num(err), fmt="none", ecolor="black", capsize=3)
        ax.plot([0, 1], [0, 1], ls=":", color="gray", lw=1)
        ax.set(xlim=(0, 1), ylim=(0, 1.05), xlabel="draft probability of the token",
               ylabel="share of tested tokens accepted",
               title=f"{sub['method'].iloc[0]} on {sub['dataset'].iloc[0]}, T={t:g}")
    fig.suptitle(f"DySpec Figure 2 (left), ours: {df.attrs['model']}, draft: {describe(df.attrs['drafter'])}")
    return save_figure(fig, path)


def dyspec_fig2(results_dir: str | Path, model: str | None = None, draft: str | None = None) -> str:
    """Plot and write figures/dyspec_fig2.{png,csv,md}; returns the markdown. No runs: MissingRunsError."""
    df = build_fig2(results_dir, model, draft)
    out = figures_dir(results_dir)
    png = plot(df, out / "dyspec_fig2.png")
    save_csv(df, out / "dyspec_fig2.csv")
    shown = df[df["nodes"] > 0]  # empty bins stay in the csv
    display = pd.DataFrame({"T": shown["temperature"].map("{:g}".format), "Draft prob.": [
        f"[{lo:.1f}, {hi:.1f}{']' if hi == 1 else ')'}" for lo, hi in zip(shown["bin_low"], shown["bin_high"])],
        "Tested nodes": shown["nodes"].astype(str),
        "Accepted share [95% CI]": [with_interval(r, None if np.isnan(lo) else [lo, hi])
                                    for r, lo, hi in zip(shown["rate"], shown["rate_low"], shown["rate_high"])]})
    claims = [f"Acceptance rises with draft probability at T={t:g} (highest filled bin's interval above the "
              f"lowest's): {v}." for t, v in df.attrs["verdicts"].items()]
    foot = [(f"Ours: {df.attrs['model']}, draft: {describe(df.attrs['drafter'])}, machine "
             f"{', '.join(df.attrs['machines'])}; nodes a verification tested "
            f"(parent the root or accepted), per bin of the draft's probability (draft temperature) of the token "
            f"(bins without nodes left out); interval: 95% bootstrap over questions. Total tested nodes: "
            f"{fmt(df['nodes'].sum(), 'd')}."),
            *claims, PAPER, "Runs: " + ", ".join(df.attrs["run_ids"]) + "."]
    md = markdown(display, f"DySpec Figure 2 (left), ours (figure: {png}).", foot, numparse=False)
    atomic_write(out / "dyspec_fig2.md", md)
    return md
