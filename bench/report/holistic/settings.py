"""The settings sweeps of the full method (conf/experiment/holistic/sweep_*.yaml, experiment `holistic_sweep`):
one row per run with the settings the paper leaves open (W, beta, kappa, target_cost, warm-up, confidence bins)
and what they gave: speedup over AR, MAT, both utilisations, hit rates, draft length.

Writes results/tables/holistic_settings.{md,csv}. The AR baseline is the one measured like each run (any
experiment: holistic/ar's on the same dataset, length and machine).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.drafter import choose, describe
from bench.report.holistic.common import numbers
from bench.report.select import MissingRunsError, paired_baseline, read_runs, where
from bench.report.tables import fmt, ours_cells, render, write_texts
from bench.run.store import Run

EXPERIMENT = "holistic_sweep"
MAKE = "make sweep-holistic-settings"


def settings_of(run: Run) -> dict:
    s = run.settings
    cache, ctl = s.get("cache") or {}, s.get("controller") or {}
    return {"W": s.get("draft_phrases"), "beta": cache.get("beta"), "per_key": cache.get("per_key"),
            "max_keys": cache.get("max_keys"), "target_cost": ctl.get("target_cost"),
            "warmup_steps": ctl.get("warmup_steps"), "conf_bins": len(ctl["conf_edges"]) + 1 if ctl.get("conf_edges") else None}


def build_holistic_settings(results_dir: str | Path, model: str | None = None, draft: str | None = None) -> pd.DataFrame:
    runs = read_runs(results_dir)
    mine, drafter = choose(where(runs, experiment=EXPERIMENT, method="holistic", model=model), draft)
    if not mine:
        raise MissingRunsError(f"no runs of experiment {EXPERIMENT} in {results_dir} ({MAKE})")
    rows = []
    for run in mine:
        base = paired_baseline(runs, run, "ar")
        got = numbers(run, base)
        rows.append({"dataset": run.dataset, **settings_of(run),
                     **{k: got[k] for k in ("speedup", "mat", "util_eq3", "util_accepted", "draft_hit_rate",
                                            "target_hit_rate", "draft_tokens_mean")},
                     # 95% intervals over questions (paired with AR for the speedup), from common.numbers
                     **{f"{k}_{e}": got[f"{k}_{e}"] for k in ("speedup", "mat") for e in ("lo", "hi")},
                     "run_id": run.run_id, "ar_run_id": base.run_id if base else None})
    df = pd.DataFrame(rows)
    df.attrs["drafter"] = drafter
    return df


def holistic_settings(results_dir: str | Path, model: str | None = None, draft: str | None = None) -> str:
    """Build, write results/tables/holistic_settings.{md,csv}; returns the markdown."""
    df = build_holistic_settings(results_dir, model, draft)
    cols = ["dataset", "W", "beta", "per_key", "max_keys", "target_cost", "warmup_steps", "conf_bins"]
    display = df[cols].copy()
    for col in ("speedup", "mat"):
        display[col] = ours_cells(df, col)
    for col in ("util_eq3", "util_accepted", "draft_hit_rate", "target_hit_rate", "draft_tokens_mean"):
        display[col] = [fmt(v) for v in df[col]]
    caption = (f"Post-use & Pre-cut, the open settings swept: the full method (lambda <= 24), one row per run; "
               f"draft: {describe(df.attrs['drafter'])}.")
    foot = [("speedup over AR measured like the run; util_eq3 = new tokens / draft calls; util_accepted = accepted /"
            " drafted draft tokens; draft_tokens_mean = drafted tokens per verification. [low, high]: 95% bootstrap"
            " interval over questions (paired with AR for the speedup); the utilisations and hit rates have none."),
            "Runs: " + ", ".join(df["run_id"]) + "."]
    texts = render(display, caption, foot, df, formats=("md", "csv"))
    write_texts(Path(results_dir, "tables"), "holistic_settings", texts)
    return texts["md"]
