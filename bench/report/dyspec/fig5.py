"""DySpec Figure 5: the token tree's size at each step beside the tokens accepted at that step, from the latest dyspec
run (preferring Table 4's setting: budget 768, openwebtext, T=0.6), and its mean tree size beside the paper's."""

from __future__ import annotations

import pandas as pd

from bench.metrics import bootstrap_interval, mat, ratio_of_sums
from bench.report.declare import Artifact, Cover, Recipe, Shown
from bench.report.drafter import describe
from bench.report.dyspec.tables import RUN
from bench.report.output import Report
from bench.report.plots import new_figure
from bench.report.select import RunSet, footer
from bench.report.tables import fmt, markdown, with_interval

MAKE = "make reproduce-dyspec-fig5"
EXPERIMENT = "dyspec_table4"
PREFER = (("experiment", EXPERIMENT), ("dataset", "openwebtext"), ("temperature", 0.6))


def build_fig5(runs: RunSet, model: str | None = None, draft: str | None = None) -> pd.DataFrame:
    """One row per verification step: question_id, turn, step (of the run), tree_size, accepted; the footer in
    attrs. The run: of the dyspec runs that kept their tree sizes, the one matching most of PREFER, latest on ties."""
    pinned = runs.where(method="dyspec", keep=lambda r: any(rec.get("draft_nodes") for rec in r.records)).pin(
        model=model, draft=draft, own=lambda r: r.experiment == EXPERIMENT)
    if not pinned.runs:
        raise pinned.missing("dyspec run", MAKE)
    run = max(enumerate(pinned.runs), key=lambda ir: (sum(getattr(ir[1], k) == v for k, v in PREFER), ir[0]))[1]
    rows = []
    for r in run.records:
        for size, acc in zip(r.get("draft_nodes") or [], r["accept_lengths"][1:]):
            rows.append({"question_id": r["question_id"], "turn": r.get("turn", 0), "step": len(rows),
                         "tree_size": size, "accepted": acc})
    df = pd.DataFrame(rows)
    per_q = df.groupby("question_id")
    size_ci = bootstrap_interval([per_q["tree_size"].sum().tolist(), per_q.size().tolist()], ratio_of_sums)
    ms, paper = run.settings, runs.paper().iloc[0].to_dict()
    ours = (f"Ours: {run.model}, draft: {describe(pinned.drafter)}, machine {run.machine}, {per_q.ngroups} "
            f"prompt-turns, {len(df)} steps, experiment {run.experiment or '—'}; MAT (prefill counted as a step) "
            f"{fmt(mat(run.records))}. Interval: 95% bootstrap over questions.")
    theirs = (f"Paper: Llama-2-7B -> Llama-2-70B; the text gives only the mean tree size "
              f"({paper['mean_tree_size']:g} of {int(paper['budget'])}); the figure has no point values.")
    df.attrs.update(run_id=run.run_id, model=run.model, dataset=run.dataset, temperature=run.temperature,
                    budget=ms.get("budget"), algorithm=ms.get("algorithm"), threshold=ms.get("threshold"),
                    size_ci=size_ci, paper=paper, footer=footer(ours, [run], [theirs], pinned.notes))
    return df


def plot(df: pd.DataFrame):
    a = df.attrs
    fig = new_figure(figsize=(10, 4))
    ax = fig.subplots()
    ax.plot(df["step"], df["tree_size"], color="tab:blue", lw=1, label="tree size (draft nodes)")
    if a["budget"]:
        ax.axhline(a["budget"], color="tab:blue", ls=":", lw=1, label=f"budget {a['budget']}")
    ax.set(xlabel="verification step (the run's prompts one after another)", ylabel="draft nodes")
    ax2 = ax.twinx()
    ax2.plot(df["step"], df["accepted"], color="tab:red", lw=1, label="accepted tokens")
    ax2.set_ylabel("tokens accepted (incl. bonus)")
    lines = ax.get_legend_handles_labels(), ax2.get_legend_handles_labels()
    ax.legend(lines[0][0] + lines[1][0], lines[0][1] + lines[1][1], fontsize=8, loc="upper right")
    fig.suptitle(f"DySpec Figure 5, ours: {a['model']} on {a['dataset']}, T={a['temperature']:g}, "
                 f"{a['algorithm']} budget {a['budget']}")
    return fig


def dyspec_fig5(runs: RunSet, model: str | None = None, draft: str | None = None) -> Report:
    df = build_fig5(runs, model, draft)
    a, paper = df.attrs, df.attrs["paper"]
    size = float(df["tree_size"].mean()) if len(df) else None
    fill = [v / a["budget"] for v in a["size_ci"]] if a["size_ci"] and a["budget"] else None
    display = pd.DataFrame([
        {"": "ours", "Setting": f"{a['dataset']}, T={a['temperature']:g}, {a['algorithm']} "
                                f"(threshold {fmt(a['threshold'], 'g')}), budget {a['budget']}",
         "Mean tree size [95% CI]": with_interval(size, a["size_ci"]),
         "Of the budget": with_interval(size / a["budget"] if size and a["budget"] else None, fill, ".1%"),
         "Accepted / step": fmt(float(df["accepted"].mean()) if len(df) else None)},
        {"": "paper", "Setting": f"{paper['dataset']}, T={paper['temperature']:g}, threshold (Algorithm 2, "
                                 f"threshold {paper['threshold']:g}), budget {int(paper['budget'])}",
         "Mean tree size [95% CI]": fmt(paper["mean_tree_size"]),
         "Of the budget": fmt(paper["mean_tree_size"] / paper["budget"], ".1%"), "Accepted / step": "—"}])
    md = markdown(display, f"DySpec Figure 5, ours (figure: {runs.folder / 'figures' / 'dyspec_fig5.png'}).",
                  a["footer"], numparse=False)
    return Report.figure("dyspec_fig5", plot(df), df, md)


ARTIFACT = Artifact(
    "fig5", "Figure 5 (tree size and accepted tokens per step; Table 4's budget) -> figures/dyspec_fig5.{png,csv,md}",
    dyspec_fig5, rank=3, per_drafter=True, experiments=(EXPERIMENT,), paper_csv=("dyspec_fig5_tree_size.csv",),
    covers=(Cover("Figure 5"),),
    recipes=(Recipe("reproduce-dyspec-fig5", "DySpec Figure 5: tree size and accepted tokens per step, dyspec at "
                    "budget 768 (threshold) on OpenWebText, T 0.6",
                    (RUN.format("table4 dataset=openwebtext run.temperature=0.6"),
                     "$(PY) -m bench.report dyspec/fig5 --model $(MODEL)")),),
    shown=(Shown("make draft && make reproduce-dyspec-fig5 LIMIT=5"),), common=("model", "draft"))
