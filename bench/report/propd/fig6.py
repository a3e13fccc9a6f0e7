"""ProPD Figure 6: the probability estimation of the dynamic token tree: (a) the top-k probability of each head,
(b) the expected acceptance of each token of the tree built from it.

The paper's figure is a worked example (two heads, top-2; the tree 'abd' + 'ac' has estimated acceptance length
1.88), not a measurement. Ours shows the estimates of a real run: a propd run with the dynamic tree on records, at
its end, P[i][k-1] (head i's running chance that the committed token is in its top k; method_settings
`hit_rates`) and the controller's last choice (tree size). (b) is the best-first tree of that size from
p[i, k] = P[i, k] - P[i, k-1] (bench.core.tree.best_first, as methods/propd/dynamic.py builds it), each node's
expected acceptance the product of p along its path; its estimated acceptance length, 1 + their sum, is set beside
the run's measured MAT (with its 95% interval over questions).

Writes results/figures/propd_fig6.{png,csv,md}: the csv has one row per (head, k) of (a) and per node of (b).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bench.cachefile import atomic_write
from bench.core.tree import best_first
from bench.report.plots import figures_dir, new_figure, save_csv, save_figure
from bench.report.propd.common import model_label, switches
from bench.report.select import default_model, latest, missing, read_runs
from bench.report.tables import fmt, markdown, with_interval
from bench.run.metrics import mat, mat_interval, verdict

MAKE = "make reproduce-propd-fig6"
SHOWN_NODES = 16  # nodes of (b) drawn (all are in the csv)
PAPER = ("Paper (Figure 6, a worked example, not a measurement): from the heads' top-2 probabilities, token 'b' of "
         "'ab' has expected acceptance 0.6 and 'e' of 'abe' 0.06; the tree 'abd' + 'ac' has estimated acceptance "
         "length 1.88.")


def fig6_run(results_dir: str | Path, model: str | None = None):
    """The latest propd run of `model` (default: the latest such run's) with recorded hit rates, preferring
    experiment propd_fig6 and batch 1."""
    runs = [r for r in read_runs(results_dir, method="propd", greedy=True) if r.settings.get("hit_rates")]
    model = default_model(runs, model)
    runs = [r for r in runs if r.model == model]
    return (latest(runs, lambda r: r.experiment == "propd_fig6" and r.batch_size == 1)
            or latest(runs, lambda r: r.batch_size == 1) or latest(runs))


def build_fig6(results_dir: str | Path, model: str | None = None) -> pd.DataFrame:
    """Rows of panel (a): part "a", head, k, value = P (top-k probability); of panel (b): part "b", node (best
    first), path (ranks per depth, 1-based, e.g. "1-2"), value = the node's expected acceptance."""
    run = fig6_run(results_dir, model)
    if run is None:
        raise missing("propd run (dynamic tree on) that records its heads' hit rates", results_dir, MAKE)
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
    estimated = 1 + sum(v for _, v in tree)
    df.attrs.update(run_id=run.run_id, model=run.model, dataset=run.dataset,
                    batch=run.batch_size, machine=run.machine, size=size, estimated=estimated,
                    mat=mat(run.records), mat_ci=mat_interval(run.records), switches=switches(run),
                    chosen=ms.get("last_choice"), sizes=ms.get("tree_size_choices"))
    return df


def plot(df: pd.DataFrame, path: Path) -> Path:
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
    return save_figure(fig, path)


def propd_fig6(results_dir: str | Path, model: str | None = None) -> str:
    """Plot and write figures/propd_fig6.{png,csv,md}; returns the markdown. No such run: MissingRunsError."""
    df = build_fig6(results_dir, model)
    a = df.attrs
    out = figures_dir(results_dir)
    png = plot(df, out / "propd_fig6.png")
    save_csv(df, out / "propd_fig6.csv")
    heads = df[df["part"] == "a"].pivot(index="head", columns="k", values="value")
    shown = [k for k in (1, 2, 3, 5, 10) if k in heads.columns]
    display = pd.DataFrame({"Head": [str(int(h)) for h in heads.index],
                            **{f"top-{k}": [fmt(v) for v in heads[k]] for k in shown}})
    ci = a["mat_ci"]
    # Does the estimate fall inside the measured MAT's interval: "holds" when it does not lie outside it.
    calibrated = "undecided" if ci is None else "holds" if ci[0] <= a["estimated"] <= ci[1] else "does not hold"
    above = verdict(ci, a["estimated"], higher=False)
    foot = [(f"Ours: {model_label(a['model'])} ({a['model']}), machine {a['machine']}, {a['dataset']}, "
             f"batch {a['batch']}, "
            f"propd (prune, dynamic) = {a['switches']}; hit rates at the run's end; tree sizes {a['sizes']}, last "
            f"choice {a['chosen']}."),
            (f"(b): the best-first tree of {a['size']} nodes has estimated acceptance length {a['estimated']:.2f} "
            f"(1 + the nodes' expected acceptances); measured MAT {with_interval(a['mat'], ci)} (95% bootstrap over "
            "questions; our MAT counts the prefill as a step of one token, so it is slightly lower)."),
            (f"The estimate lies inside the measured MAT's interval: {calibrated}. The measured MAT is below the "
            f"estimate (the estimate is optimistic): {above}."),
            PAPER, f"Runs: {a['run_id']}."]
    md = markdown(display, f"ProPD Figure 6 (a), ours: top-k probability per head (figure: {png}).", foot,
                  numparse=False)
    atomic_write(out / "propd_fig6.md", md)
    return md
