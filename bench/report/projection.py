"""`python -m bench.report project --profile <profile>`: the latest run per method, its speed measured here beside its
speed replayed on a cost profile (bench/cost/profiles.py, bench/cost/replay.py; docs/cost_model.md).

A profile is a file written by `make validate-projection` or `make gpu-check` (a path to its JSON), or a roofline
named `<shape>@<hardware>[:<dtype>][+offloaded]` (bench/cost/shapes/, bench/cost/hardware/; dtype default
float16), e.g. `llama-2-7b@a100-80gb` or `llama-2-70b@a100-40gb+offloaded`. The projection replays the acceptance
measured on the runs' model (the embedded one, here) with the profile's target cost; drafting and the rest of each
step stay as measured on the runs' machine.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.cost.profiles import load_profile
from bench.cost.replay import replayed
from bench.errors import MissingRunsError
from bench.report.output import Report
from bench.report.select import RunSet, latest_runs, paired_baseline
from bench.report.tables import markdown, with_interval
from bench.run.metrics import speedup, speedup_interval, tokens_per_s

FOOTER = ("Projected: each prompt-turn's target forwards replayed on the profile at its recorded verified sizes and "
          "contexts, its other time (drafting, tree, verification, updates) as measured here; a projection of the "
          "acceptance measured on these runs, not a measurement. Speedup: ratio of mean per-question tokens/s over "
          "AR's, paired on the same questions; [low, high]: 95% bootstrap interval over questions.")


def project_table(runs: RunSet, profile: str, model: str | None = None, dataset: str | None = None,
                  max_new_tokens: int | None = None) -> Report:
    prof = load_profile(profile)
    runs = runs.where(model=model, dataset=dataset, max_new_tokens=max_new_tokens)
    latest = latest_runs(runs.runs)
    rows = []
    for (model_, method, variant, dataset_, temperature), run in latest.items():
        ar = paired_baseline(runs.runs, run, "ar")
        mine, base = replayed(run.records, prof), replayed(ar.records, prof) if ar else None
        rows.append({"model": model_, "dataset": dataset_, "method": method + (f"[{variant}]" if variant else ""),
                     "T": f"{temperature:g}",
                     "tok/s here": f"{tokens_per_s(run.records)['mean_of_questions']:.1f}",
                     "speedup vs ar here": with_interval(*speedups(run.records, ar.records if ar else None)),
                     "tok/s projected": f"{tokens_per_s(mine)['mean_of_questions']:.1f}",
                     "speedup vs ar projected": with_interval(*speedups(mine, base))})
    if not rows:
        raise MissingRunsError(f"no complete runs match under {Path(runs.folder, 'runs')}")
    caption = (f"Projected on {prof.name} ({prof.source}: {prof.model} on {prof.hardware}, {prof.dtype}), beside "
               f"the speed measured here.")
    return Report.tables("projection", {"md": markdown(pd.DataFrame(rows), caption, [FOOTER], numparse=False)})


def speedups(records: list[dict], base: list[dict] | None) -> tuple:
    return (speedup(records, base), speedup_interval(records, base)) if base else (None, None)
