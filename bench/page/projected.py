"""Speeds projected on the paper's own setting (docs/cost_model.md), as its declaration (Paper.setting_of) names it;
at batch > 1 each batch replayed whole (bench.cost.replay)."""

from __future__ import annotations

import pandas as pd

from bench.cost.host import step_costs_at
from bench.cost.replay import Setting, loops_priced, priced, replayable
from bench.metrics import timed_regions
from bench.report.claims import ratio_of, speed_ratios, with_baselines
from bench.report.tables import markdown, with_interval
from bench.run.store import Run

NAMED = {"method", "dataset", "model", "experiment", "logger", "run.temperature", "run.batch_size", "run.variant",
         "run.resume"}  # (run.resume: whether a sweep may skip or resume a job, not how a run is measured)


def varied(runs: list[Run]) -> dict[str, str]:
    """run_id -> the overrides that tell the run apart from the other runs of its method (e.g. `lam=6`)."""
    out = {}
    for run in runs:
        same = [r.overrides for r in runs if r.method == run.method]
        keys = sorted(k for k in run.overrides if k not in NAMED and not k.startswith("paths.")  # where, not how
                      and len({str(o.get(k)) for o in same}) > 1)
        out[run.run_id] = " ".join(f"{k.split('.')[-1]}={run.overrides[k]}" for k in keys)
    return out


def projected_table(used: list[Run], setting: Setting, baseline: str = "ar") -> str | None:
    """Each run's speedup over its paired `baseline` run among `used`: measured here and projected on the setting;
    None when no run has its baseline."""
    alone = [r for r in used if r.batch_size == 1]
    untimed = {r.run_id for r in alone if not replayable(r.records)}
    timed = [x for r in alone if r.run_id not in untimed for x in r.records]
    if untimed and timed:  # HF's own loop: its forwards priced on this machine's, fitted to the timed runs beside it
        records = dict(zip([r.run_id for r in alone], loops_priced([r.records for r in alone])))
        used = [Run.of(r.meta, records[r.run_id]) if r.run_id in untimed else r for r in used]
    hf_priced = sorted({r.method for r in alone if r.run_id in untimed}) if timed else []
    rows, skipped, label = [], [], varied(used)
    replays: dict[tuple[str, bool], list[dict]] = {}  # (run id, rest kept) -> its records replayed: a baseline once

    def on_setting(run: Run, rest: bool = True) -> list[dict]:
        if (run.run_id, rest) not in replays:
            replays[run.run_id, rest] = setting.run_replayed(run, rest)
        return replays[run.run_id, rest]

    ordered = sorted((r for r in used if r.method != baseline),
                     key=lambda r: (r.method, r.dataset or "", r.temperature, r.batch_size, label[r.run_id], r.run_id))
    for run, base in with_baselines(used, ordered, baseline, setting, skipped):
        mine, theirs = on_setting(run), on_setting(base)
        bare = on_setting(run, rest=False)  # the models' forwards alone
        batched = run.batch_size > 1  # the aggregate rate, as the measured tables at batch > 1
        ratio, interval = ratio_of(batched)
        rows.append({"method": run.method + (f"[{run.variant}]" if run.variant else ""), "settings": label[run.run_id],
                     "dataset": run.dataset, "T": f"{run.temperature:g}", "B": run.batch_size,
                     "measured here": with_interval(*speed_ratios(run, base, batched)),
                     "projected": with_interval(ratio(mine, theirs), interval(mine, theirs)),
                     "outside forwards": f"{1 - wall(bare) / wall(mine):.0%}"})
    left_out = [run.method for run, why in skipped if why == "untimed"]
    if not rows:
        return None
    df = pd.DataFrame(rows)
    df = df.drop(columns=[c for c in ("settings",) if not df[c].any()] + ["B"] * bool((df["B"] == 1).all()))
    host = setting.host
    kept = sorted({r.method for r in used if priced(r.method, host, temperature=r.temperature, batch_size=r.batch_size,
                                                      before_batched_drafting=r.before_batched_drafting) is None})
    notes = [f"Speedup over {baseline} (ratio of mean per-question tokens/s, paired on the same questions"
             + ("; at batch B > 1 of aggregate tokens/s" if "B" in df else "")
             + ") [95% bootstrap interval]. Projected: each prompt-turn's target forwards replayed on the paper's "
             "target at their recorded verified sizes and contexts"
             + (", its draft model's forwards on the paper's draft" if setting.draft else "")
             + "; the rest of each step (tree, verification, updates" + ("" if setting.draft else ", drafting")
             + ") priced for the paper's GPU host: its Python as measured here times the host factor, and "
             "its ops (per phase and step, measured on a CPU at the run's temperature and, at B > 1, batch size: "
             "step costs) at "
             + (f"{host.launch_us:g} µs a launch, host factor {host.host_factor:g} ({host.source})"
                if host else "(no host price for this hardware: kept as measured here)")
             + "; `outside forwards`: the rest's share of the projected time. A projection of the acceptance "
             "measured on our model, not a measurement (docs/cost_model.md)."]
    unmatched = sorted({r.batch_size for r in used if r.batch_size > 1 and (c := step_costs_at(
        r.temperature, r.method, r.batch_size, r.before_batched_drafting)) is not None and c.batch_size != r.batch_size})
    row_by_row = sorted({r.method for r in used if r.batch_size > 1 and r.before_batched_drafting})
    if host and unmatched:
        notes.append(f"At B = {', '.join(map(str, unmatched))} some methods have no step costs measured at that batch "
                     "size: their rest is priced with batch 1's.")
    if host and row_by_row:
        notes.append(f"{', '.join(row_by_row)} at B > 1: recorded before a batch's rows drafted at once (4b29af0), so "
                     "priced with the step costs measured then (evidence/projection/row_by_row_drafting/).")
    if host and kept:
        notes.append(f"{', '.join(kept)}: no step costs (evidence/projection/step_costs.json): the rest is kept "
                     "as measured here.")
    if hf_priced:
        notes.append(f"{', '.join(hf_priced)}: HF's own decode loop times no target forward apart; its forwards are "
                     "priced at this machine's cost, a profile fitted to the timed runs of this table "
                     "(bench.cost.replay.fitted_profile), and the rest of its wall time is its loop's, priced as any rest is.")
    if left_out:
        notes.append(f"Not projected: {', '.join(sorted(set(left_out)))} (HF's own decode loop, whose target "
                     "forwards are not timed apart).")
    if "B" in df:
        notes.append("At B > 1 each batch is replayed whole: per step one forward of the rows still in it over the "
                     "widest row's nodes, at their mean context (bench/cost/replay.py).")
    return markdown(df, f"Projected on the paper's setting ({setting.label}):", notes, numparse=False)


def wall(records: list[dict]) -> float:
    return sum(r["wall_time"] for r in timed_regions(records))
