"""The draft's sd table: sd at draft length 4, 8, 12 on MT-Bench and HumanEval, each beside AR on the same
machine (experiment draft/sd_lambda). One row per (dataset, draft, draft length): the latest such run; the draft is
named by its label (id, depth, V', report digest), so runs of an older draft stay as their own rows."""

from __future__ import annotations

import pandas as pd

from bench.report.output import Report
from bench.report.select import MissingRunsError, RunSet
from bench.report.tables import interval_columns, lossless_text, ours_cells, render

EXPERIMENT = "draft_sd_lambda"


def draft_sd_table(runs: RunSet, model: str | None = None) -> Report:
    folder, runs = runs.folder, runs.where(experiment=EXPERIMENT, method="sd", model=model).runs
    if not runs:
        raise MissingRunsError(f"no sd runs of experiment {EXPERIMENT} in {folder} (make reproduce-draft-sd)")
    latest = {}
    for r in runs:  # oldest first: the last one per key wins
        s = r.settings
        key = (r.dataset, s.get("draft_label") or s.get("draft"), s.get("draft_length"),
               r.temperature)
        latest[key] = r
    rows = []
    def order(item):  # dataset, draft, then lambda as a number
        dataset, draft, length, temperature = item[0]
        return str(dataset), str(draft), float(temperature), int(length or 0)

    for (dataset, draft, length, temperature), r in sorted(latest.items(), key=order):
        s = r.summary
        # the intervals bench.run.runner stored with the run (bench.run.metrics); a run older than them has none
        ci = s.get("intervals") or {}
        vs_ar = (r.speedup or {}).get("vs_ar") or {}
        rows.append({"dataset": dataset, "draft": draft, "draft_vocab": r.settings.get("draft_vocab"),
                     "lambda": length, "T": temperature, "questions": s.get("n_questions"), "mat": s.get("mat"),
                     "tok_s": (s.get("tokens_per_s") or {}).get("mean_of_questions"),
                     "speedup_vs_ar": vs_ar.get("value"),
                     **interval_columns("mat", ci.get("mat")), **interval_columns("tok_s", ci.get("tokens_per_s")),
                     **interval_columns("speedup_vs_ar", vs_ar.get("interval")),
                     "lossless": lossless_text(s.get("lossless") or {"checked": 0}), "run": r.path.name})
    data = pd.DataFrame(rows)
    display = data.assign(mat=ours_cells(data, "mat"), tok_s=ours_cells(data, "tok_s"),
                          speedup_vs_ar=ours_cells(data, "speedup_vs_ar"))
    display = display.drop(columns=["run", *(c for c in data.columns if c.endswith(("_lo", "_hi")))])
    caption = (f"sd with a trained draft at draft length lambda 4, 8, 12 ({model or 'all models'}); speedup: mean "
               "per-question tok/s over AR's on the same questions, machine and length.")
    footer = [("MAT: tokens per target forward incl. the bonus token. draft: id-depth-V'-report digest "
               "(bench.models.loading.ModelBundle.draft_label). [low, high]: 95% bootstrap interval over questions "
               "(paired with AR for the speedup), as stored with the run.")]
    return Report.tables("draft_sd", render(display, caption, footer, data))
