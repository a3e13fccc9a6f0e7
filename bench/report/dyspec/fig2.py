"""DySpec Figure 2 (left): acceptance rate against draft probability, the observation DySpec builds its tree on. Ours:
every node a verification tested, binned by the draft's probability of its token, with the share accepted; it needs
per-node records (run.record_steps=true). The right panel needs the target's probabilities, which no record keeps."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.report.declare import Artifact, Cover, Recipe, Shown
from bench.report.drafter import describe
from bench.report.dyspec.tables import METHODS, RUN
from bench.report.output import Report
from bench.report.plots import new_figure, yerr
from bench.report.select import RunSet, footer
from bench.report.steps import SWITCH, binned_rate, has_steps, nodes, rises
from bench.report.tables import fmt, listed, markdown, with_interval

MAKE = "make reproduce-dyspec-fig2"
EXPERIMENT = "dyspec_fig2"
EDGES = np.round(np.linspace(0, 1, 11), 1).tolist()  # ten columns of draft probability, as the paper's heat map
PAPER_SAYS = ("Paper (Figure 2, CNN DailyMail, no point values): tokens of higher draft probability are more likely to "
         "be accepted; the acceptance rate under one draft probability looks binomially distributed; the target "
         "probability correlates strongly with the draft probability (right panel: not measured here, the target's "
         "probabilities are not recorded).")


def build_fig2(runs: RunSet, model: str | None = None, draft: str | None = None) -> pd.DataFrame:
    """One row per (temperature, draft-probability bin): nodes tested, the share accepted and its interval; the
    footer in attrs. Per temperature the latest dyspec run with per-step records (else sequoia's, else specinfer's),
    Figure 2's own first."""
    pinned = runs.where(method=METHODS, keep=has_steps).pin(model=model, draft=draft,
                                                           own=lambda r: r.experiment == EXPERIMENT)
    chosen = {}
    for t in sorted({r.temperature for r in pinned.runs}):
        for m in METHODS:
            mine = pinned.where(method=m, keep=lambda r, t=t: r.temperature == t)
            run = mine.latest(lambda r: r.experiment == EXPERIMENT) or mine.latest()
            if run is not None:
                chosen[t] = run
                break
    if not chosen:
        raise pinned.missing(f"{'/'.join(METHODS)} runs with per-step records ({SWITCH})", MAKE)
    df = pd.concat([binned_rate(nodes(run).query("reached == 1"), "conf", EDGES).assign(
        temperature=run.temperature, method=run.method, dataset=run.dataset, run_id=run.run_id)
        for run in chosen.values()], ignore_index=True)
    verdicts = {t: rises(df[df["run_id"] == r.run_id]) for t, r in chosen.items()}
    claims = [f"Acceptance rises with draft probability at T={t:g} (highest filled bin's interval above the "
              f"lowest's): {v}." for t, v in verdicts.items()]
    ours = (f"Ours: {pinned.model}, draft: {describe(pinned.drafter)}, machine "
            f"{listed(r.machine for r in chosen.values())}; nodes a verification tested "
            f"(parent the root or accepted; at T > 0 no earlier sibling accepted), per bin of the draft's probability (draft temperature) of the token "
            f"(bins without nodes left out); interval: 95% bootstrap over questions. Total tested nodes: "
            f"{fmt(df['nodes'].sum(), 'd')}.")
    df.attrs.update(model=pinned.model, drafter=pinned.drafter, verdicts=verdicts,
                    footer=footer(ours, chosen.values(), [*claims, PAPER_SAYS], pinned.notes))
    return df


def plot(df: pd.DataFrame):
    temps = list(dict.fromkeys(df["temperature"]))
    fig = new_figure(figsize=(5 * len(temps), 4))
    for ax, t in zip(np.atleast_1d(fig.subplots(1, len(temps))), temps):
        sub = df[df["temperature"] == t]
        mid = (sub["bin_low"] + sub["bin_high"]) / 2
        ax.bar(mid, sub["rate"].fillna(0), width=0.09, color="tab:blue", alpha=0.7)
        ax.errorbar(mid, sub["rate"], yerr=yerr(sub["rate"], sub["rate_low"], sub["rate_high"]), fmt="none",
                    ecolor="black", capsize=3)
        ax.plot([0, 1], [0, 1], ls=":", color="gray", lw=1)
        ax.set(xlim=(0, 1), ylim=(0, 1.05), xlabel="draft probability of the token",
               ylabel="share of tested tokens accepted",
               title=f"{sub['method'].iloc[0]} on {sub['dataset'].iloc[0]}, T={t:g}")
    fig.suptitle(f"DySpec Figure 2 (left), ours: {df.attrs['model']}, draft: {describe(df.attrs['drafter'])}")
    return fig


def dyspec_fig2(runs: RunSet, model: str | None = None, draft: str | None = None) -> Report:
    df = build_fig2(runs, model, draft)
    shown = df[df["nodes"] > 0]  # empty bins stay in the csv
    display = pd.DataFrame({"T": shown["temperature"].map("{:g}".format), "Draft prob.": [
        f"[{lo:.1f}, {hi:.1f}{']' if hi == 1 else ')'}" for lo, hi in zip(shown["bin_low"], shown["bin_high"])],
        "Tested nodes": shown["nodes"].astype(str),
        "Accepted share [95% CI]": [with_interval(r, None if np.isnan(lo) else [lo, hi])
                                    for r, lo, hi in zip(shown["rate"], shown["rate_low"], shown["rate_high"])]})
    png = runs.folder / "figures" / "dyspec_fig2.png"
    md = markdown(display, f"DySpec Figure 2 (left), ours (figure: {png}).", df.attrs["footer"], numparse=False)
    return Report.figure("dyspec_fig2", plot(df), df, md)


ARTIFACT = Artifact(
    "fig2", "Figure 2 (acceptance rate vs draft probability; runs with run.record_steps=true) -> "
    "figures/dyspec_fig2.*", dyspec_fig2, rank=2, per_drafter=True, experiments=(EXPERIMENT,),
    covers=(Cover("Figure 2"),),
    recipes=(Recipe("reproduce-dyspec-fig2", "DySpec Figure 2: dyspec on CNN/DM at T {0, 0.6} with per-step "
                    "records (run.record_steps), acceptance vs draft probability",
                    (RUN.format("fig2"), "$(PY) -m bench.report dyspec/fig2 --model $(MODEL)")),),
    shown=(Shown("make draft && make reproduce-dyspec-fig2 LIMIT=10"),), common=("model", "draft"))
