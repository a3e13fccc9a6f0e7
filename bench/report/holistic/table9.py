"""Post-use & Pre-cut Table 9: each phase's time over its operations, from a run timed per phase."""

from __future__ import annotations

from math import fsum

import pandas as pd

from bench.metrics import counter_totals, phase_share_interval, phase_totals
from bench.report.claims import per_question, sums_interval
from bench.report.holistic import PAPER, common
from bench.report.holistic.common import DATASET, draft_length, level, make
from bench.report.output import Report
from bench.report.phase_timing import require_exact_phases
from bench.report.select import RunSet
from bench.report.tables import MISSING, interval_columns, is_missing, ours_cells, pair

# component -> (label, our phase, what one operation is: a counter name, or "steps" for one per verification)
COMPONENTS = {"draft_forward": ("M_d forward", "draft_forward", "draft_calls"),
              "target_forward": ("M_t forward", "target_forward", "steps"),
              "cache": ("cache fetch/verify", "cache", "steps"),
              "rollback": ("roll back (draft cache)", "rollback", "steps"),
              "update": ("target KV update", "update", "steps"),
              "controller": ("controller step", "controller", "decisions")}
LAMBDA = 24


def ms_interval(records: list[dict], phase: str, per: str) -> list[float] | None:
    """Ms per operation's 95% interval: questions resampled with their seconds in `phase` and their operations
    (verifications, or counter `per`). None at batch > 1 (phase times per batch) or where a question has none."""
    if any(r.get("batch") for r in records):
        return None
    count = (lambda r: common.verifications([r])) if per == "steps" else common.counted(per)
    ci = sums_interval(per_question(records, lambda r: r["phase_times"].get(phase, 0.0), count))
    return None if ci is None else [1e3 * ci[0], 1e3 * ci[1]]


def paper_cell(ms, bound) -> str:
    return MISSING if is_missing(ms) else f"{'< ' if bound == 'upper' else ''}{ms:g}"


def holistic_table9(runs: RunSet, model: str | None = None, dataset: str = "humaneval",
                    draft: str | None = None) -> Report:
    p = common.ladder(runs, dataset, ARTIFACT, model, draft, synced=True)
    run = (p.latest(lambda r: level(r) == "precut" and draft_length(r) == LAMBDA and r.sync_phases)
           or p.latest(common.rung("precut", LAMBDA)))
    require_exact_phases([run], "holistic/table9", make(ARTIFACT))
    paper = runs.paper().set_index("component").reindex(list(COMPONENTS))  # NaN where it has none
    phases = phase_totals(run.records) if run else {}
    counts = counter_totals(run.records) if run else {}
    steps = common.verifications(run.records) if run else 0
    total = fsum(phases.values())
    rows = []
    for key, (label, phase, per) in COMPONENTS.items():
        seconds = phases.get(phase)
        n = steps if per == "steps" else counts.get(per, 0)
        rows.append({"component": key, "label": label, "phase": phase, "per": per, "operations": n,
                     "ms": 1e3 * seconds / n if seconds is not None and n else None,
                     "ms_per_step": 1e3 * seconds / steps if seconds is not None and steps else None,
                     "share": seconds / total if seconds is not None and total else None,
                     **interval_columns("ms", ms_interval(run.records, phase, per) if run and seconds else None),
                     **interval_columns("share", phase_share_interval(run.records, [phase], of_phase_sum=True)
                                        if run and seconds is not None and total else None),
                     "paper_ms": paper.at[key, "ms"], "paper_bound": paper.at[key, "bound"],
                     "run_id": run.run_id if run else None})
    df = pd.DataFrame(rows)
    ms = [pair(ours, paper_cell(v, bound)) for ours, v, bound in zip(ours_cells(df, "ms", ".3g"), df["paper_ms"],
                                                                      df["paper_bound"])]
    percent = df.assign(**{c: 100 * df[c].astype(float) for c in ("share", "share_lo", "share_hi")})
    display = pd.DataFrame({"Component": df["label"], "per": df["per"], "ms, ours (paper)": ms,
                            "share of time": ours_cells(percent, "share", ".1f")})
    caption = (f"Post-use & Pre-cut Table 9, ours (paper: Llama-2-chat 7B/70B, HumanEval, A6000s): wall-clock of one "
               f"operation per component, both reuses and Pre-cut (lambda <= {LAMBDA}), on {dataset}.")
    lines = [("per: what one operation is (draft_calls: one draft forward; steps: one verification; decisions: one "
              "Pre-cut decision). The paper's roll back likely covers both caches; ours splits the draft's crop from "
              "the target's KV update."),
             ("[low, high]: 95% bootstrap interval over questions, each resampled with its phase time and its "
              "operations (share: with its summed phase times).")]
    return common.table(ARTIFACT, p, [run, p.baseline(run, "ar")], caption, lines, display, df,
                        "no run or no such phase")


ARTIFACT = PAPER.declare(
    "table9", "Table 9 (wall-clock of one operation per component of the full method) -> "
    "tables/holistic_table9.{md,csv,tex}", holistic_table9, 4, "Post-use & Pre-cut Table 9: wall-clock of one "
    "operation per component of ours (lambda <= 24) on HumanEval", "ar dataset=humaneval", "table9", cover="Table 9",
    paper_csv=("postuse_precut_table9_wallclock.csv",), options=(DATASET,))
