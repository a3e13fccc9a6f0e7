"""Post-use & Pre-cut Figure 2 from vanilla SD runs; (b) and (c) need per-step records (bench/report/steps.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from bench.metrics import bootstrap_interval, ratio_of_sums, verdict
from bench.report.drafter import describe, drafter
from bench.report.holistic import PAPER
from bench.report.holistic.common import draft_length, level, make
from bench.report.output import Report
from bench.report.plots import new_figure, wrap, yerr
from bench.report.select import RunSet, footer
from bench.report.steps import SWITCH, binned_rate, has_steps, nodes, rises, steps
from bench.report.tables import fmt, markdown, with_interval
from bench.run.store import Run

EDGES = [0.0, 0.01, 0.03, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]  # Pre-cut's confidence bins (conf_edges), ascending
SHOWN_STEPS = 200  # iterations drawn in (a)
PAPER_SAYS = {"a": "Paper (a): the local optimal draft length varies strongly across SD iterations.",
         "b": "Paper (b): a substantial portion of draft tokens from prior iterations (phrases of 2+ tokens) "
              "reappear and can be reused.",
         "c": "Paper (c, Alpaca): the acceptance of a draft sequence correlates strongly and positively with the "
              "product of its tokens' confidences (Eq. 6)."}


def vanilla(run: Run) -> bool:
    """Vanilla SD: method sd, or holistic with reuse and Pre-cut off (a fixed lambda)."""
    return run.method == "sd" or level(run) == "sd"


def own(run: Run) -> bool:
    return run.experiment == "holistic_fig2"


def vanilla_runs(runs: RunSet, model: str | None = None,
                 draft: str | None = None) -> tuple[RunSet, Run | None, Run | None]:
    """(runs pinned, (a)'s run, (b)/(c)'s run or None): the latest with per-step records, Figure 2's own first."""
    sd = runs.where(method=("holistic", "sd"), greedy=True, keep=vanilla)
    p = sd.pin(has_steps, model=model, draft=draft, own=own)
    if not p.runs:  # no run with per-step records (of the drafter): (a) alone
        p = sd.pin(model=model, draft=draft, own=own)
    recorded = p.latest(lambda r: own(r) and has_steps(r)) or p.latest(has_steps)
    return p, recorded or p.latest(own) or p.latest(), recorded


def local_optimum(run: Run) -> pd.DataFrame:
    """(a): lambda* (accepted drafts) of every iteration but a prompt-turn's last (the token limit may cut it)."""
    found = [(r["question_id"], n - 1) for r in run.records for n in r["accept_lengths"][1:-1]]
    return pd.DataFrame([(q, i, n) for i, (q, n) in enumerate(found)], columns=["question_id", "iteration", "lambda_star"])


def reappearing(tokens: list[int], later: set) -> int:
    """How many of `tokens` lie in a bigram of theirs found in `later`."""
    return len({i for j, pair in enumerate(itertools.pairwise(tokens)) if pair in later for i in (j, j + 1)})


def reuse(run: Run) -> pd.DataFrame:
    """(b): per iteration, the discarded draft tokens and how many lie in a discarded bigram that reappears later
    in the committed output (`at_target`) or in a later iteration's draft (`at_draft`)."""
    rows = []
    for r in run.records:
        st, out = steps(r), r.get("output_ids")
        if out is None or any(s["tokens"] is None for s in st):  # the evidence keeps no token ids
            continue
        for k, s in enumerate(st):
            a = sum(s["accepted"])
            rest = s["tokens"][a:]
            if not rest:
                continue
            later_out = set(itertools.pairwise(out[s["start"] + a:]))  # committed from this iteration on
            later_draft = set().union(*(itertools.pairwise(x["tokens"]) for x in st[k + 1:]))
            rows.append({"question_id": r["question_id"], "discarded": len(rest),
                         "at_target": reappearing(rest, later_out), "at_draft": reappearing(rest, later_draft)})
    return pd.DataFrame(rows, columns=["question_id", "discarded", "at_target", "at_draft"])


def share(df: pd.DataFrame, col: str) -> tuple[float | None, list[float] | None]:
    """Sum of `col` / discarded tokens, and its interval over questions."""
    if df.empty or df["discarded"].sum() == 0:
        return None, None
    q = df.groupby("question_id")[[col, "discarded"]].sum()
    return (float(q[col].sum() / q["discarded"].sum()),
            bootstrap_interval([q[col].tolist(), q["discarded"].tolist()], ratio_of_sums))


def spread(a: pd.DataFrame) -> tuple[float | None, list[float] | None]:
    """Standard deviation of lambda* over iterations, with an interval over questions."""
    if len(a) < 2:
        return None, None
    q = a.assign(sq=a["lambda_star"] ** 2).groupby("question_id").agg(
        n=("lambda_star", "count"), s1=("lambda_star", "sum"), s2=("sq", "sum"))

    def std(n, s1, s2, axis=-1):
        m = s1.sum(axis) / n.sum(axis)
        return np.sqrt(np.maximum(s2.sum(axis) / n.sum(axis) - m ** 2, 0))

    return float(a["lambda_star"].std(ddof=0)), bootstrap_interval([q[c].tolist() for c in ("n", "s1", "s2")], std)


def build_fig2(runs: RunSet, model: str | None = None, draft: str | None = None) -> pd.DataFrame:
    return frame(runs, *vanilla_runs(runs, model, draft)[1:])


def frame(runs: RunSet, run_a: Run | None, run_bc: Run | None) -> pd.DataFrame:
    """Tidy rows: part a (iteration, lambda_star), part b (measure, value, low, high), part c (bins)."""
    if run_a is None:
        raise runs.missing("vanilla SD run (sd, or holistic with reuse and Pre-cut off)", make(ARTIFACT))
    a = local_optimum(run_a)
    parts = [a.assign(part="a")]
    attrs = {"lambda": draft_length(run_a), "spread": spread(a)}
    if run_bc is not None:
        b = reuse(run_bc)
        for col in ("at_target", "at_draft"):
            value, ci = share(b, col)
            parts.append(pd.DataFrame([{"part": "b", "measure": col, "value": value,
                                        "low": ci[0] if ci else None, "high": ci[1] if ci else None,
                                        "discarded": int(b["discarded"].sum())}]))
        c = binned_rate(nodes(run_bc), "path_conf", EDGES)
        parts.append(c.assign(part="c"))
        attrs["rises"] = rises(c)
        attrs["tokens_kept"] = any("output_ids" in r for r in run_bc.records)  # the evidence drops token ids
    df = pd.concat(parts, ignore_index=True)
    df.attrs.update(attrs, model=run_a.model, dataset=run_a.dataset,
                    machine=run_a.machine, recorded=run_bc is not None, drafter=drafter(run_a))
    return df


def plot(df: pd.DataFrame) -> Figure:
    at = df.attrs
    fig = new_figure(figsize=(15, 4))
    ax_a, ax_b, ax_c = fig.subplots(1, 3)
    a = df[df["part"] == "a"].head(SHOWN_STEPS)
    ax_a.plot(a["iteration"], a["lambda_star"], lw=1, color="tab:blue")
    if at["lambda"]:
        ax_a.axhline(at["lambda"], ls=":", color="gray", label=f"lambda = {at['lambda']}")
        ax_a.legend(fontsize=8)
    ax_a.set(xlabel="SD iteration", ylabel="local optimal draft length", title="(a) lambda* per iteration")
    ax_b.set_title("(b) discarded draft tokens that reappear")
    ax_c.set_title("(c) acceptance vs confidence product")
    if not at["recorded"]:
        for ax in (ax_b, ax_c):
            ax.text(0.5, 0.5, wrap(f"not measured: no run with {SWITCH} ({make(ARTIFACT)})", 36), ha="center",
                    va="center", transform=ax.transAxes)
            ax.set(xticks=[], yticks=[])
    else:
        b = df[df["part"] == "b"]
        ax_b.bar(["at the target", "at the draft"], b["value"].fillna(0), yerr=yerr(b["value"], b["low"], b["high"]),
                 color=["tab:green", "tab:orange"], capsize=4)
        ax_b.set(ylim=(0, 1), ylabel="share of discarded draft tokens")
        c = df[df["part"] == "c"]
        mid = (c["bin_low"] + c["bin_high"]) / 2
        ax_c.errorbar(mid, c["rate"], yerr=yerr(c["rate"], c["rate_low"], c["rate_high"]), marker="o", capsize=3)
        ax_c.plot([0, 1], [0, 1], ls=":", color="gray", lw=1)
        ax_c.set(xlim=(0, 1), ylim=(0, 1.05), xlabel="product of draft confidences",
                 ylabel="share of draft prefixes accepted")
    fig.suptitle(f"Post-use & Pre-cut Figure 2, ours: {at['model']} on {at['dataset']}")
    return fig


def holistic_fig2(runs: RunSet, model: str | None = None, draft: str | None = None) -> Report:
    """No vanilla SD run: MissingRunsError; without per-step records, (b) and (c) say why they are empty."""
    p, run_a, run_bc = vanilla_runs(runs, model, draft)
    df = frame(runs, run_a, run_bc)
    at = df.attrs
    a = df[df["part"] == "a"]
    lam, (std, std_ci) = at["lambda"], at["spread"]
    rows = [("(a)", "lambda* (accepted drafts per iteration): mean; std [95% CI]",
             f"{fmt(a['lambda_star'].mean())}; {with_interval(std, std_ci)}"),
            ("(a)", f"iterations with lambda* = 0 / = lambda ({lam})",
             f"{fmt((a['lambda_star'] == 0).mean(), '.1%')} / {fmt((a['lambda_star'] == lam).mean(), '.1%')}")]
    claims = [f"(a) lambda* varies across iterations (std's interval above 1 token): {verdict(std_ci, 1.0)}."]
    if at["recorded"]:
        b = df[df["part"] == "b"].set_index("measure")
        for col, name in (("at_target", "in the output committed later"), ("at_draft", "in a later draft")):
            low, high = b.at[col, "low"], b.at[col, "high"]
            rows.append(("(b)", f"discarded draft tokens that reappear {name} [95% CI]",
                         with_interval(b.at[col, "value"], None if pd.isna(low) else [low, high], ".1%")))
        for _, r in df[(df["part"] == "c") & (df["nodes"] > 0)].iterrows():  # empty bins: only in the csv
            close = "]" if r["bin_high"] == 1 else ")"
            ci = None if pd.isna(r["rate_low"]) else [r["rate_low"], r["rate_high"]]
            measure = (f"prefixes with confidence product in [{r['bin_low']:g}, {r['bin_high']:g}{close}: accepted "
                       f"[95% CI] ({int(r['nodes'])} prefixes)")
            rows.append(("(c)", measure, with_interval(r["rate"], ci, ".2f")))
        claims.append(f"(c) acceptance rises with the confidence product (highest filled bin's interval above the "
                      f"lowest's): {at['rises']}.")
        if not at["tokens_kept"]:
            claims.append("(b) not measured from this folder: it keeps no token ids (the committed evidence); the "
                          "report on the run's results folder has them.")
    else:
        rows.append(("(b), (c)", "—", f"Not measured: no vanilla SD run with {SWITCH} ({make(ARTIFACT)})"))
    ours = (f"Ours: {at['model']}, draft: {describe(at['drafter'])}, machine {at['machine']}, {at['dataset']}, "
            f"vanilla SD at lambda {lam}; intervals: 95% bootstrap over questions. (b): a discarded token counts when "
            "a 2-token phrase of the discarded part holding it reappears later in the same prompt-turn.")
    foot = footer(ours, [run_a, run_bc], [*claims, *PAPER_SAYS.values(), "The paper's figure gives no point values."],
                  p.notes)
    png = Path(runs.folder, "figures", "holistic_fig2.png")  # the markdown names the figure where it is written
    table = pd.DataFrame(rows, columns=["Part", "Measure", "Ours"])
    md = markdown(table, f"Post-use & Pre-cut Figure 2, ours (figure: {png}).", foot, numparse=False)
    return Report.figure("holistic_fig2", plot(df), df, md)


ARTIFACT = PAPER.declare(
    "fig2", "Figure 2 (local optimal lambda per iteration, reuse potential, acceptance vs confidence product; (b), "
    "(c) need run.record_steps=true) -> figures/holistic_fig2.{png,csv,md}", holistic_fig2, 6,
    "Post-use & Pre-cut Figure 2: vanilla SD (lambda 12) on Alpaca with per-step records: lambda*, reuse potential, "
    "acceptance vs confidence", "fig2", cover="Figure 2", experiments=("holistic_fig2", "holistic"))
