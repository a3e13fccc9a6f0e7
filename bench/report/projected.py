"""Speeds projected on the paper's own setting (docs/cost_model.md), as its package's `SETTING` (or
`SETTINGS[label]`) declares it; batch 1 only (the profiles are of batch 1)."""

from __future__ import annotations

import importlib

import pandas as pd

from bench.cost.replay import Setting
from bench.report.claims import speed_ratio, speed_ratio_interval, with_baselines
from bench.report.tables import fmt, markdown, with_interval
from bench.run.metrics import speedup, speedup_interval
from bench.run.store import Run

NAMED = {"method", "dataset", "model", "experiment", "logger", "run.temperature", "run.batch_size", "run.variant"}


def setting_of(paper: str, label: str | None = None) -> Setting | None:
    """The paper's setting for one of its contents (SETTINGS[label], else SETTING); None without one."""
    package = importlib.import_module(f"bench.report.{paper}")
    return getattr(package, "SETTINGS", {}).get(label) or getattr(package, "SETTING", None)


def varied(runs: list[Run]) -> dict[str, str]:
    """run_id -> the overrides that tell the run apart from the other runs of its method (e.g. `lam=6`)."""
    out = {}
    for run in runs:
        same = [r.overrides for r in runs if r.method == run.method]
        keys = sorted(k for k in run.overrides if k not in NAMED and len({str(o.get(k)) for o in same}) > 1)
        out[run.run_id] = " ".join(f"{k.split('.')[-1]}={run.overrides[k]}" for k in keys)
    return out


def projected_table(used: list[Run], setting: Setting, baseline: str = "ar") -> str | None:
    """Each run's speedup over its paired `baseline` run among `used`: measured here and projected on the setting;
    None when no run has its baseline."""
    rows, skipped, label = [], [], varied(used)
    replays: dict[tuple[str, bool], list[dict]] = {}  # (run id, rest kept) -> its records replayed: a baseline once

    def on_setting(run: Run, rest: bool = True) -> list[dict]:
        if (run.run_id, rest) not in replays:
            replays[run.run_id, rest] = setting.replayed(run.records, rest)
        return replays[run.run_id, rest]

    ordered = sorted((r for r in used if r.method != baseline),
                     key=lambda r: (r.method, r.dataset or "", r.temperature, label[r.run_id], r.run_id))
    for run, base in with_baselines(used, ordered, baseline, setting, skipped):
        mine, theirs = on_setting(run), on_setting(base)
        bare = on_setting(run, rest=False)  # the models' forwards alone
        rows.append({"method": run.method + (f"[{run.variant}]" if run.variant else ""), "settings": label[run.run_id],
                     "dataset": run.dataset, "T": f"{run.temperature:g}",
                     "measured here": with_interval(speed_ratio(run, base, False),
                                                    speed_ratio_interval(run, base, False)),
                     "projected": with_interval(speedup(mine, theirs), speedup_interval(mine, theirs)),
                     "rest kept": f"{1 - wall(bare) / wall(mine):.0%}",
                     "rest left out": fmt(speedup(bare, on_setting(base, rest=False)))})
    batched = sum(why == "batched" for _, why in skipped)
    untimed = [run.method for run, why in skipped if why == "untimed"]
    if not rows:
        return (f"Not projected on the paper's setting ({setting.label}): {batched} batch > 1 run(s), and the "
                "profiles are of batch 1.\n") if batched else None
    df = pd.DataFrame(rows)
    df = df.drop(columns=[c for c in ("settings",) if not df[c].any()])
    notes = [f"Speedup over {baseline} (ratio of mean per-question tokens/s, paired on the same questions) [95% "
             "bootstrap interval]. Projected: each prompt-turn's target forwards replayed on the paper's target at "
             "their recorded verified sizes and contexts" + (", its draft model's forwards on the paper's draft"
                                                               if setting.draft else "")
             + "; the rest of each step (tree, verification, updates" + ("" if setting.draft else ", drafting")
             + ") as measured here; `rest kept`: its share of the projected time (on a GPU its tensor work, e.g. "
             "sampling, would be faster: the larger it is, the more the projection understates the speedup); `rest "
             "left out`: the speedup with no time outside the models' forwards, the bound the other way. A "
             "projection of the acceptance measured on our model, not a measurement (docs/cost_model.md)."]
    if untimed:
        notes.append(f"Not projected: {', '.join(sorted(set(untimed)))} (HF's own decode loop, whose target "
                     "forwards are not timed apart).")
    if batched:
        notes.append(f"{batched} batch > 1 run(s) not projected: the profiles are of batch 1.")
    return markdown(df, f"Projected on the paper's setting ({setting.label}):", notes, numparse=False)


def wall(records: list[dict]) -> float:
    return sum(r["wall_time"] for r in records)
