"""The draft's sd table: sd at draft length 4, 8, 12 on MT-Bench and HumanEval, each beside AR on the same
machine (experiment draft/sd_lambda). One row per (dataset, draft, draft length): the latest such run; the draft is
named by its label (id, depth, V', report digest), so runs of an older draft stay as their own rows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.select import MissingRunsError, read_runs
from bench.report.tables import fmt, lossless_text, render, write_texts

EXPERIMENT = "draft_sd_lambda"


def draft_sd_table(results_dir: str | Path, model: str | None = None) -> str:
    runs = read_runs(results_dir, experiment=EXPERIMENT, method="sd", model=model)
    if not runs:
        raise MissingRunsError(f"no sd runs of experiment {EXPERIMENT} in {results_dir} (make reproduce-draft-sd)")
    latest = {}
    for r in runs:  # oldest first: the last one per key wins
        s = r.meta.get("method_settings") or {}
        key = (r.meta.get("dataset"), s.get("draft_label") or s.get("draft"), s.get("draft_length"),
               r.temperature)
        latest[key] = r
    rows = []
    def order(item):  # dataset, draft, then lambda as a number
        dataset, draft, length, temperature = item[0]
        return str(dataset), str(draft), float(temperature), int(length or 0)

    for (dataset, draft, length, temperature), r in sorted(latest.items(), key=order):
        s = r.meta["summary"]
        rows.append({"dataset": dataset, "draft": draft, "draft_vocab": r.meta["method_settings"].get("draft_vocab"),
                     "lambda": length, "T": temperature, "questions": s.get("n_questions"), "mat": s.get("mat"),
                     "tok_s": (s.get("tokens_per_s") or {}).get("mean_of_questions"),
                     "speedup_vs_ar": ((r.meta.get("speedup") or {}).get("vs_ar") or {}).get("value"),
                     "lossless": lossless_text(s.get("lossless") or {"checked": 0}), "run": r.path.name})
    data = pd.DataFrame(rows)
    display = data.assign(mat=data.mat.map(fmt), tok_s=data.tok_s.map(fmt), speedup_vs_ar=data.speedup_vs_ar.map(fmt))
    display = display.drop(columns=["run"])
    caption = (f"sd with a trained draft at draft length lambda 4, 8, 12 ({model or 'all models'}); speedup: mean "
               "per-question tok/s over AR's on the same questions, machine and length.")
    footer = [("MAT: tokens per target forward incl. the bonus token. draft: id-depth-V'-report digest "
               "(bench.models.loading.ModelBundle.draft_label).")]
    texts = render(display, caption, footer, data)
    write_texts(Path(results_dir) / "tables", "draft_sd", texts)
    return texts["md"]
