"""ProPD Figure 6 from a real run's recorded hit rates (the paper's figure is a worked example)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.metrics import mat, mat_interval, verdict
from bench.report.output import Report
from bench.report.plots import new_figure
from bench.report.propd import PAPER
from bench.report.propd.common import model_label, switches
from bench.report.select import RunSet, footer
from bench.report.tables import fmt, markdown, with_interval
from bench.run.store import Run

SHOWN_NODES = 16  # nodes of (b) drawn (all are in the csv)
PAPER_SAYS = ("Paper (Figure 6, a worked example, not a measurement): from the heads' top-2 probabilities, token 'b' of "
         "'ab' has expected acceptance 0.6 and 'e' of 'abe' 0.06; the tree 'abd' + 'ac' has estimated acceptance "
         "length 1.88.")


def fig6_run(runs: RunSet, model: str | None = None) -> Run:
    """The latest propd run with recorded hit rates, preferring propd_fig6's and batch 1; none: MissingRunsError.
    Anchored on the artifact's own sweep (`family`): a newer propd run of another heads build made for another
    artifact would otherwise anchor the pin, and its build check would leave propd_fig6's own run out."""
    p = runs.where(method="propd", greedy=True, keep=lambda r: r.settings.get("hit_rates")).pin(
        model=model, same=(), family="propd")
    run = (p.latest(lambda r: r.experiment == "propd_fig6" and r.batch_size == 1)
           or p.latest(lambda r: r.batch_size == 1) or p.latest())
    if run is None:
        raise runs.missing("propd run (dynamic tree on) that records its heads' hit rates", PAPER.make("fig6"))
    return run


def build_fig6(run: Run) -> pd.DataFrame:
    """Panel (a)'s rows (head, k, top-k probability), then (b)'s (node, rank path, expected acceptance)."""
    import torch  # the method's own tree builder; imported here so listing the artifacts never loads torch

    from bench.core.tree import best_first

    ms = run.settings
    hits = np.asarray(ms["hit_rates"], dtype=float)  # [heads, K], cumulative in k
    rows = [{"part": "a", "head": i + 1, "k": k + 1, "node": None, "path": None, "value": float(hits[i, k])}
            for i in range(hits.shape[0]) for k in range(hits.shape[1])]
    p = torch.from_numpy(np.diff(np.concatenate([np.zeros((hits.shape[0], 1)), hits], axis=1), axis=1)).clamp(min=0)
    size = int((ms.get("last_choice") or {}).get("size") or max(ms.get("tree_size_choices") or [SHOWN_NODES]))
    tree = best_first(p, size)
    rows += [{"part": "b", "head": None, "k": None, "node": n + 1, "path": "-".join(str(r + 1) for r in path),
              "value": float(v)} for n, (path, v) in enumerate(tree)]
    df = pd.DataFrame(rows)
    df.attrs.update(run_id=run.run_id, model=run.model, dataset=run.dataset, batch=run.batch_size,
                    machine=run.machine, size=size, estimated=1 + sum(v for _, v in tree), mat=mat(run.records),
                    mat_ci=mat_interval(run.records), switches=switches(run), chosen=ms.get("last_choice"),
                    sizes=ms.get("tree_size_choices"))
    return df


def plot(df: pd.DataFrame):
    a = df.attrs
    fig = new_figure(figsize=(12, 4.2))
    ax_a, ax_b = fig.subplots(1, 2)
    heads = df[df["part"] == "a"]
    for head, g in heads.groupby("head"):
        ax_a.plot(g["k"], g["value"], marker="o", ms=3, label=f"head {int(head)}")
    ax_a.set(xlabel="k", ylabel="P(committed token in the head's top k)", ylim=(0, 1.02),
             title="(a) top-k probability of each head")
    ax_a.legend(fontsize=8)
    nodes = df[df["part"] == "b"].head(SHOWN_NODES)
    ax_b.bar(range(len(nodes)), nodes["value"], color="tab:red")
    ax_b.set_xticks(range(len(nodes)), nodes["path"], rotation=60, fontsize=7)
    ax_b.set(xlabel="node (rank path, best first)", ylabel="expected acceptance", ylim=(0, 1.02),
             title=f"(b) the {a['size']}-node tree's first {len(nodes)} nodes")
    fig.suptitle(f"ProPD Figure 6, ours: {model_label(a['model'])} on {a['dataset']}, batch {a['batch']}; estimated "
                 f"acceptance length {a['estimated']:.2f}, measured MAT {fmt(a['mat'])}")
    return fig


def propd_fig6(runs: RunSet, model: str | None = None) -> Report:
    run = fig6_run(runs, model)
    df = build_fig6(run)
    a = df.attrs
    heads = df[df["part"] == "a"].pivot(index="head", columns="k", values="value")
    shown = [k for k in (1, 2, 3, 5, 10) if k in heads.columns]
    display = pd.DataFrame({"Head": [str(int(h)) for h in heads.index],
                            **{f"top-{k}": [fmt(v) for v in heads[k]] for k in shown}})
    ci = a["mat_ci"]
    # Does the estimate fall inside the measured MAT's interval: "holds" when it does not lie outside it.
    calibrated = "undecided" if ci is None else "holds" if ci[0] <= a["estimated"] <= ci[1] else "does not hold"
    above = verdict(ci, a["estimated"], higher=False)
    ours = (f"Ours: {model_label(a['model'])} ({a['model']}), machine {a['machine']}, {a['dataset']}, batch "
            f"{a['batch']}, propd (prune, dynamic) = {a['switches']}; hit rates at the run's end; tree sizes "
            f"{a['sizes']}, last choice {a['chosen']}.")
    lines = [(f"(b): the best-first tree of {a['size']} nodes has estimated acceptance length {a['estimated']:.2f} "
              f"(1 + the nodes' expected acceptances); measured MAT {with_interval(a['mat'], ci)} (95% bootstrap "
              "over questions; our MAT counts the prefill as a step of one token, so it is slightly lower)."),
             (f"The estimate lies inside the measured MAT's interval: {calibrated}. The measured MAT is below the "
              f"estimate (the estimate is optimistic): {above}."), PAPER_SAYS]
    md = markdown(display, "ProPD Figure 6 (a), ours: top-k probability per head (figure: "
                  f"{runs.file('figures', 'propd_fig6.png')}).", footer(ours, [run], lines), numparse=False)
    return Report.figure("propd_fig6", plot(df), df, md)


ARTIFACT = PAPER.declare(
    "fig6", "Figure 6 (heads' top-k probability, expected acceptance per node of the chosen tree) -> "
    "figures/propd_fig6.{png,csv,md}", propd_fig6, 6, "ProPD Figure 6: heads' top-k probability and the chosen "
    "tree's expected acceptance per node (propd, batch 1, MT-Bench)", "fig6", cover="Figure 6")
