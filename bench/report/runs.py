"""The generic `runs` table: the latest run per method for one model and dataset, any paper."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.errors import MissingRunsError
from bench.report.output import Report
from bench.report.phase_timing import share_or_none, unsynced_note
from bench.report.select import RunSet, latest_runs, paired_baseline
from bench.report.tables import MISSING, fmt, lossless_text, markdown, with_interval
from bench.run.metrics import speedup, speedup_interval, summarize

FOOTER = ("MAT: tokens per target forward incl. the bonus token, pooled over steps; tok/s: mean of "
          "per-question rates; speedup: ratio of mean rates on the same questions, baseline at the same "
          "temperature T; overhead: share of "
          "wall time outside model forwards (— for HF generate, timed as one phase); lossless: "
          "prompt-turns token-identical to greedy AR (near-tie: a divergence within the dtype's rounding; "
          "docs/metrics.md). [low, high]: 95% bootstrap interval over questions (paired "
          "for speedups).")


def runs_table(runs: RunSet, model: str | None = None, paper_size: str | None = None,
               dataset: str | None = None, max_new_tokens: int | None = None) -> Report:
    """Latest run per method for one model and dataset: MAT, tok/s, speedups, overhead, losslessness."""
    folder, runs = runs.folder, runs.where(model=model, dataset=dataset, max_new_tokens=max_new_tokens).runs
    latest = latest_runs(runs)
    rows = []
    for key, run in latest.items():
        s = summarize(run.records)
        speed = {}
        for m in ("hf_generate", "ar"):
            b = paired_baseline(runs, run, m) or latest.get((key[0], m, None, key[3], key[4]))
            speed[m] = (speedup(run.records, b.records), speedup_interval(run.records, b.records)) if b else (None, None)
        rows.append({
            "model": key[0], "dataset": key[3], "method": key[1] + (f"[{key[2]}]" if key[2] else ""),
            "T": f"{key[4]:g}",
            "turns": s["n_turns"], "MAT": with_interval(s["mat"], s["intervals"]["mat"]),
            "tok/s": with_interval(s["tokens_per_s"]["mean_of_questions"], s["intervals"]["tokens_per_s"]),
            "speedup vs hf_generate": with_interval(*speed["hf_generate"]),
            "speedup vs ar": with_interval(*speed["ar"]),
            "overhead": fmt(share_or_none(run, s["overhead_share"])),  # withheld: unsynced GPU phases
            "lossless": lossless_text(s["lossless"]) or MISSING,
        })
    if not rows:
        raise MissingRunsError(f"no complete runs match under {Path(folder, 'runs')}")
    note = unsynced_note(latest.values())
    return Report.tables("runs", {"md": markdown(pd.DataFrame(rows), None, [FOOTER, *([note] if note else [])])})
