"""DySpec Figure 4: share of the timed region per component (draft forward, target forward, tree construction, mask
building, sampling, verification, other) per method, from our phase timings: Figure 4's own runs (variant
`breakdown`, timed per phase), else Table 1's, which are exact on a CPU only (bench.report.phase_timing)."""

from __future__ import annotations

import json
import math

import pandas as pd

from bench.metrics import phase_share_interval, phase_totals
from bench.report.declare import Artifact, Cover, Recipe, Shown, option
from bench.report.drafter import describe
from bench.report.dyspec import PAPER
from bench.report.dyspec.tables import BASELINE, COMPARED, DRAFT_COMMON, LABELS, METHODS, RUN
from bench.report.output import Report
from bench.report.phase_timing import components, require_exact_phases
from bench.report.plots import new_figure, wrap, yerr
from bench.report.select import RunSet, footer
from bench.report.tables import fmt, interval_columns, markdown, ours_cells

# DySpec Figure 4 component, label, our phases. The target prefill is a target forward (Sequoia and DySpec
# run it inside the first verification), as the draft's own prefill is a draft forward (its catch-up); `update`
# (KV compaction, commit) and `draft` (any other proposer time) are "other", as is any phase not named here.
FIG4_COMPONENTS = [
    ("draft_forward", "Draft forward", ("draft_forward",)),
    ("target_forward", "Target forward", ("target_forward", "prefill")),
    ("tree_construction", "Tree construction", ("tree",)),
    ("mask_building", "Mask building", ("preprocess",)),
    ("sampling", "Sampling", ("sampling",)),
    ("verification", "Verification", ("verify",)),
    ("other", "Other", ("update", "draft")),
]
FIG4_PAPER = ("Paper (Figure 4, no values in the text): tree construction is under 2% of the time for "
              "JF68M/Llama2-7B and JF68M/Llama2-13B; mask building, sampling and verification take "
              "significant time there (mostly waiting on CUDA sync); with Llama2-7B/70B offloaded, "
              "everything but the two models' inference is under 2%.")
BREAKDOWN = "breakdown"  # run.variant of Figure 4's own runs (conf/experiment/dyspec/fig4.yaml)
MAKE = "make reproduce-dyspec-fig4"


def dyspec_component_shares(phase_times: dict[str, float]) -> dict[str, float]:
    """Our phase seconds -> share of each Figure 4 component in their sum (the timed region); sums to 1."""
    total = math.fsum(phase_times.values())
    if total <= 0:
        return {}
    mapped = {p for _, _, phases in FIG4_COMPONENTS for p in phases}
    shares = {key: math.fsum(phase_times.get(p, 0.0) for p in phases) / total
              for key, _, phases in FIG4_COMPONENTS}
    # "other" as phase_timing.components has it, added in two parts as the committed tables were
    shares["other"] += math.fsum(v for p, v in phase_times.items() if p not in mapped) / total
    return shares


def share_intervals(records: list[dict]) -> dict:
    """Each component's <key>_lo/<key>_hi: its share's 95% interval, prompts resampled with their phase times
    ("other" takes every phase no component names)."""
    present = {p for rec in records for p in rec["phase_times"]}
    out = {}
    for key, _, phases in components(FIG4_COMPONENTS, present):
        out.update(interval_columns(key, phase_share_interval(records, phases, of_phase_sum=True)))
    return out


def build_dyspec_time_breakdown(runs: RunSet, model: str | None = None, dataset: str | None = None,
                                temperature: float | None = None, draft: str | None = None) -> pd.DataFrame:
    """One row per method (DySpec's order, AR last): share of each Figure 4 component, pooled over the latest
    run per (dataset, temperature) of that method (optionally only one dataset / temperature)."""
    runs = runs.where(**COMPARED).pin(model=model, draft=draft, own=lambda r: r.variant == BREAKDOWN)
    model = runs.model or PAPER.model
    wanted = runs.where(dataset=dataset, keep=lambda r: r.variant in (None, BREAKDOWN) and (
        temperature is None or math.isclose(r.temperature, float(temperature))))
    chosen: dict = {}  # (method, dataset, temperature) -> Figure 4's own run, else Table 1's
    for r in wanted.latest_per(lambda r: r.key, batch_size=1).values():
        k = (r.method, r.dataset, r.temperature)
        if k not in chosen or r.variant == BREAKDOWN:
            chosen[k] = r
    latest = list(chosen.values())
    if not latest:
        where = "".join([f" on {dataset}" if dataset else "", f" at T={float(temperature):g}"
                         if temperature is not None else ""])
        raise runs.missing(f"dyspec/sequoia/specinfer/ar runs of model '{model}'{where}", MAKE)
    require_exact_phases(latest, "dyspec/time_breakdown", MAKE)
    rows = []
    for m in (*METHODS, BASELINE):
        mine = [r for r in latest if r.method == m]
        if not mine:
            continue
        records = [rec for r in mine for rec in r.records]
        # a prompt of one run is not the same prompt as its id in another run's dataset or temperature
        keyed = [{**rec, "question_id": (r.run_id, rec["question_id"])} for r in mine for rec in r.records]
        totals = phase_totals(records)
        wall = math.fsum(rec["wall_time"] for rec in records)
        shares = dyspec_component_shares(totals)
        rows.append({"method": m, "label": LABELS[m], "runs": len(mine),
                     "datasets": ",".join(sorted({r.dataset for r in mine})),
                     "temperatures": ",".join(sorted({f"{r.temperature:g}" for r in mine})),
                     "prompts": len(records), "wall_s": wall,
                     "phase_sum_over_wall": math.fsum(totals.values()) / wall if wall > 0 else None,
                     **{key: shares.get(key) for key, _, _ in FIG4_COMPONENTS},
                     **share_intervals(keyed),
                     "phases": json.dumps({k: round(v, 6) for k, v in sorted(totals.items())}),
                     "run_ids": ",".join(r.run_id for r in mine)})
    df = pd.DataFrame(rows)
    df.attrs.update(model=model, machines=sorted({str(r.machine) for r in latest}),
                    dataset=dataset, temperature=temperature, drafter=runs.drafter, notes=runs.notes)
    return df


def plot_breakdown(df: pd.DataFrame):
    """Stacked bars, one per method: % of the timed region per component."""
    fig = new_figure(figsize=(8, 4.8))
    ax = fig.subplots()
    bottom = [0.0] * len(df)
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:gray"]
    for (key, label, phases), color in zip(FIG4_COMPONENTS, colors):
        values = [100 * (v or 0.0) for v in df[key]]
        err = yerr(df[key].astype(float), df[f"{key}_lo"].astype(float), df[f"{key}_hi"].astype(float))
        ax.bar(df["label"], values, bottom=bottom, label=f"{label} ({'+'.join(phases)})", color=color,
               yerr=100 * err, capsize=2, error_kw={"elinewidth": 0.8})
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set(ylabel="% of timed region", ylim=(0, 100))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    a = df.attrs
    ax.set_title(f"DySpec Figure 4, time per component: ours ({a['model']}, draft: {describe(a['drafter'])}, "
                 f"{', '.join(a['machines'])})", fontsize=9)
    ax.text(0.5, -0.14, wrap(FIG4_PAPER, 100), transform=ax.transAxes,
            ha="center", va="top", fontsize=7, style="italic")
    return fig


def dyspec_time_breakdown(runs: RunSet, model: str | None = None, paper_size: str | None = None,
                          dataset: str | None = None, temperature: float | None = None,
                          draft: str | None = None) -> Report:
    df = build_dyspec_time_breakdown(runs, model, dataset, temperature, draft)
    display = pd.DataFrame({"Method": df["label"], "runs": df["runs"], "prompts": df["prompts"]})
    for key, label, phases in FIG4_COMPONENTS:
        display[f"{label} ({'+'.join(phases)})"] = ours_cells(df, key, ".1%")
    a = df.attrs
    scope = ", ".join([a["dataset"] or "c4+openwebtext+cnn_dailymail",
                       f"T={float(a['temperature']):g}" if a["temperature"] is not None else "T=0 and 0.6"])
    machine = (f"Machine: {', '.join(a['machines'])}. Shares of the summed phase times of all prompts (the phases "
               f"tile the timed region; phase sum / wall: "
               + ", ".join(f"{lab} {fmt(v)}" for lab, v in zip(df["label"], df["phase_sum_over_wall"])) + ").")
    foot = footer(machine, dict(zip(df["label"], df["run_ids"])), [
        "Our phase names in brackets; prefill (the target's prompt forward) counts as target forward.",
        ("[low, high]: 95% bootstrap interval over prompts (each resampled with its phase times); the figure's "
         "error bars, drawn at each segment's top. No interval at batch > 1, where phase times are kept per batch."),
        FIG4_PAPER, f"Figure: {runs.folder / 'figures' / 'dyspec_time_breakdown.png'}."], a["notes"], named=(": ", "; "))
    caption = (f"DySpec Figure 4, time breakdown per method: ours, {a['model']} on {scope}; "
               f"draft: {describe(a['drafter'])}.")
    return Report({"figures/dyspec_time_breakdown.png": plot_breakdown(df),
                   "tables/dyspec_time_breakdown.md": markdown(display, caption, foot),
                   "tables/dyspec_time_breakdown.csv": df}, show="tables/dyspec_time_breakdown.md")


ARTIFACT = Artifact(
    "time_breakdown", "Figure 4 (time per component) -> tables/dyspec_time_breakdown.{md,csv}, figures/",
    dyspec_time_breakdown, rank=4, per_drafter=True, experiments=("dyspec_fig4", "dyspec_table1"),
    covers=(Cover("Figure 4"),),
    recipes=(Recipe("reproduce-dyspec-fig4", "DySpec Figure 4: time per component, Table 1's sweep timed per phase "
                    "(run.sync_phases)",
                    (RUN.format("fig4"), "$(PY) -m bench.report dyspec/time_breakdown --model $(MODEL)")),),
    shown=(Shown("make draft && make reproduce-dyspec-table1"),),
    options=(option("--dataset", help="only runs on this dataset"),
             option("--temperature", type=float, help="only runs at this temperature (default: all)")),
    common=DRAFT_COMMON)
