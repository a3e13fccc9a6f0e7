"""Post-use & Pre-cut Table 10: speedup over AR per Spec-Bench category, beside the paper's (its Appendix E.2)."""

from __future__ import annotations

import pandas as pd

from bench.metrics import group_records, speedup, speedup_interval
from bench.report.holistic import PAPER, common
from bench.report.holistic.common import draft_length, level
from bench.report.output import Report
from bench.report.select import RunSet
from bench.report.tables import interval_columns

DATASET = "spec_bench"
# our group -> the paper's column
GROUPS = {"mt_bench": "dialog", "translation": "trans", "summarization": "sum", "qa": "qa",
          "math_reasoning": "math", "rag": "rag"}
# row -> (label, the paper's method, which runs are it)
ROWS = {"speculative": ("Speculative (λ=8)", "speculative_8",
                        lambda r: r.method == "sd" and draft_length(r) == 8),
        "assisted": ("Assisted", "assisted", lambda r: r.method == "hf_assisted"),
        "ours": ("Ours (λ≤24)", "postuse_precut", lambda r: level(r) == "precut" and draft_length(r) == 24)}
# Table 10 takes PER_GROUP questions of each Spec-Bench category (default 2), not LIMIT.
TABLE10 = ("$(PY) -m bench.run $(SWEEP) experiment=holistic/{} model=$(MODEL) run.limit_per_group=$(PER_GROUP) "
           "logger=$(LOGGER) $(DRAFT_ARGS)")


def holistic_table10(runs: RunSet, model: str | None = None, draft: str | None = None) -> Report:
    p = common.ladder(runs, DATASET, ARTIFACT, model, draft, own=common.full_method)
    paper = runs.paper().set_index("method")
    rows, used = [], []
    for row, (label, paper_name, keep) in ROWS.items():
        run = p.latest(keep)
        base = p.baseline(run, "ar")
        used += [run, base]
        mine = group_records(run.records) if run else {}
        theirs = group_records(base.records) if base else {}
        for group, col in GROUPS.items():
            both = group in mine and group in theirs
            rows.append({"row": row, "method": label, "group": group, "category": col,
                         "speedup": speedup(mine[group], theirs[group]) if both else None,
                         **interval_columns("speedup", speedup_interval(mine[group], theirs[group]) if both else None),
                         "questions": len({r["question_id"] for r in mine.get(group, [])}),
                         "paper_speedup": paper.at[paper_name, col], "run_id": run.run_id if run else None,
                         "ar_run_id": base.run_id if base else None})
    df = pd.DataFrame(rows)
    display = common.speedup_grid(df, "Method", ("row", {row: label for row, (label, _, _) in ROWS.items()}),
                                  ("group", GROUPS))
    caption = ("Post-use & Pre-cut Table 10, ours (paper: Llama-3.1-Instruct): speedup over AR per Spec-Bench "
               "category (dialog = the 8 MT-Bench categories).")
    counts = df.groupby("category", sort=False)["questions"].max()
    lines = [*common.assisted_note(p.drafter),
             ("Cells: ours [95% bootstrap interval over questions, paired with AR] (paper). Questions per category: "
              + ", ".join(f"{c} {n}" for c, n in counts.items()) + ".")]
    return common.table(ARTIFACT, p, used, caption, lines, display, df)


ARTIFACT = PAPER.declare(
    "table10", "Table 10 (speedup vs AR per Spec-Bench category: Speculative (8), Assisted, ours) -> "
    "tables/holistic_table10.{md,csv,tex}", holistic_table10, 5,
    "Post-use & Pre-cut Table 10: AR, Speculative (8), Assisted, ours per Spec-Bench category", cover="Table 10",
    steps=tuple(TABLE10.format(e) for e in ("table10", "table10_sd", "table10_assisted")), shown="",
    paper_csv=("postuse_precut_table10_specbench.csv",))
