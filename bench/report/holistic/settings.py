"""The settings sweeps of the full method (experiment `holistic_sweep`): the paper's open settings, per run."""

from __future__ import annotations

import pandas as pd

from bench.report.declare import Artifact, Recipe
from bench.report.drafter import describe
from bench.report.holistic import PAPER
from bench.report.holistic.common import make, numbers
from bench.report.output import Report
from bench.report.select import MissingRunsError, RunSet, footer
from bench.report.tables import fmt, ours_cells, render
from bench.run.store import Run

EXPERIMENT = "holistic_sweep"
DEFINITIONS = ("speedup over AR measured like the run; util_eq3 = new tokens / draft calls; util_accepted = accepted / "
               "drafted draft tokens; draft_tokens_mean = drafted tokens per verification. [low, high]: 95% bootstrap "
               "interval over questions (paired with AR for the speedup); the utilisations and hit rates have none.")
# What a row shows: speedup and MAT with their intervals, the rest as numbers
ROUNDED = ("speedup", "mat", "util_eq3", "util_accepted", "draft_hit_rate", "target_hit_rate", "draft_tokens_mean")
INTERVALS = ("speedup_lo", "speedup_hi", "mat_lo", "mat_hi")


def settings_of(run: Run) -> dict:
    s = run.settings
    cache, ctl = s.get("cache") or {}, s.get("controller") or {}
    return {"W": s.get("draft_phrases"), "beta": cache.get("beta"), "per_key": cache.get("per_key"),
            "max_keys": cache.get("max_keys"), "target_cost": ctl.get("target_cost"),
            "warmup_steps": ctl.get("warmup_steps"), "conf_bins": len(ctl["conf_edges"]) + 1 if ctl.get("conf_edges") else None}


def holistic_settings(runs: RunSet, model: str | None = None, draft: str | None = None) -> Report:
    mine = runs.where(experiment=EXPERIMENT, method="holistic").pin(model=model, draft=draft)
    if not mine.runs:
        raise MissingRunsError(f"no runs of experiment {EXPERIMENT} in {runs.folder} ({make(ARTIFACT)})")
    rows = []
    for run in mine.runs:
        base = runs.baseline(run, "ar")
        got = numbers(run, base)  # intervals over questions (paired with AR for the speedup) of two of them
        rows.append({"dataset": run.dataset, **settings_of(run), **{k: got[k] for k in (*ROUNDED, *INTERVALS)},
                     "run_id": run.run_id, "ar_run_id": base.run_id if base else None})
    df = pd.DataFrame(rows)
    display = df[["dataset", *settings_of(mine.runs[0])]].assign(
        **{k: ours_cells(df, k) for k in ROUNDED[:2]}, **{k: [fmt(v) for v in df[k]] for k in ROUNDED[2:]})
    caption = (f"Post-use & Pre-cut, the open settings swept: the full method (lambda <= 24), one row per run; "
               f"draft: {describe(mine.drafter)}.")
    # the definitions take the footer's first line: the rows name their own settings, no "Ours:" line
    foot = footer(DEFINITIONS, mine.runs, notes=mine.notes)
    return Report.tables("holistic_settings", render(display, caption, foot, df, formats=("md", "csv")))


ARTIFACT = Artifact(
    "settings", "the open settings swept (W, beta, target_cost, warm-up) -> tables/holistic_settings.{md,csv}",
    holistic_settings, rank=9, experiments=(EXPERIMENT, "holistic"), common=PAPER.common,
    recipes=(Recipe("sweep-holistic-settings", "Post-use & Pre-cut's open settings: W x beta, target_cost x warm-up "
                    "(18 runs on HumanEval)", (*map(PAPER.step, ("ar dataset=humaneval", "sweep_cache",
                                                                "sweep_controller")),
                                              "$(PY) -m bench.report holistic/settings --model $(MODEL)")),))
