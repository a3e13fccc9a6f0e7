"""Post-use & Pre-cut Tables 1-2 in one table, beside the paper's Llama-2-chat 7B&70B pair (the csv: every pair)."""

from __future__ import annotations

import pandas as pd

from bench.report.drafter import describe
from bench.report.holistic import PAPER, common
from bench.report.holistic.common import draft_length, level, make, ours
from bench.report.output import Report
from bench.report.select import MissingRunsError, RunSet, footer
from bench.report.tables import MISSING, lossless_text, paired_cells, render

PAPER_PAIR = "Llama2 7&70B"  # beside ours in the markdown: the pair of both tables
DATASETS = ("humaneval", "mt_bench", "gsm8k")
LAMBDA = 12  # Speculative's and Ouroboros's draft length (Appendix D.4.2)
OURS_BOUND = 24
ROUNDING = 0.015  # a printed speedup further than this from its printed tok/s ratio is the paper's inconsistency
# Row -> (label, the paper's method name, which runs are it, as the paper ran them)
ROWS = {"ar": ("Auto-regressive", "autoregressive", lambda r: r.method == "ar" and not r.variant),
        "lookahead": ("Lookahead", "lookahead", lambda r: r.method == "lookahead"),
        "assisted": ("Assisted", "assisted", lambda r: r.method == "hf_assisted"),
        "speculative": ("Speculative (λ=12)", "speculative", lambda r: r.method == "sd" and draft_length(r) == LAMBDA),
        "ouroboros": ("Ouroboros (λ=12)", "ouroboros",
                      lambda r: r.method in ("ouroboros", "ouroboros_g12") and r.settings.get("gamma") == LAMBDA),
        # the run of Table 1's own sweep (no variant), not Table 3's precut cell at 24 (run.variant=precut)
        "ours": ("Ours (λ≤24)", "postuse_precut",
                 lambda r: level(r) == "precut" and draft_length(r) == OURS_BOUND and not r.variant)}


def display(df: pd.DataFrame) -> pd.DataFrame:
    cells = {col: pd.Series(paired_cells(df, col, f"paper_{PAPER_PAIR}_{col}"), index=[df["row"], df["dataset"]])
             for col in ("tok_s", "speedup")}
    return pd.DataFrame([{"Method": label, **{f"{ds} {name}": cells[col][row, ds] for ds in DATASETS
                                              for col, name in (("tok_s", "tok/s"), ("speedup", "speedup"))}}
                         for row, (label, _, _) in ROWS.items()])


def contradicted_speedups(paper: pd.DataFrame) -> list[str]:
    """The paper's printed speedups that its own tok/s over its AR's contradict beyond the two decimals' rounding."""
    ar = paper[paper["method"] == "autoregressive"].set_index(["dataset", "pair"])["tok_s"]
    out = []
    for r in paper.itertuples():
        base = ar.get((r.dataset, r.pair))
        if base and abs(r.tok_s / base - r.speedup) > ROUNDING:
            out.append(f"{r.dataset} {r.pair} {r.method} prints {r.speedup:.2f}x for {r.tok_s:g}/{base:g} tok/s "
                       f"= {r.tok_s / base:.2f}x")
    return out


def holistic_table1(runs: RunSet, model: str | None = None, draft: str | None = None) -> Report:
    paper = runs.paper()
    pools, errors = common.ladders(runs, DATASETS, ARTIFACT, model, draft, own=common.full_method)
    if not pools:
        raise MissingRunsError(f"no holistic runs on {', '.join(DATASETS)} in {runs.folder} ({make(ARTIFACT)})")
    rows, used = [], []
    for ds in DATASETS:
        p = pools.get(ds)
        full = p.latest(ROWS["ours"][2]) if p else None  # the full method's run
        for row, (label, paper_name, keep) in ROWS.items():
            run = p.latest(keep) if p else None
            if row == "ar" and full is not None:  # AR's row is the baseline ours is compared with
                run = p.baseline(full, "ar") or run
            base = p.baseline(run, "ar") if p else None
            used += [run, base]
            got = common.numbers(run, base)
            if row == "ar" and run is not None:
                got.update(speedup=1.0, speedup_lo=None, speedup_hi=None)
            mine = paper[(paper["dataset"] == ds) & (paper["method"] == paper_name)]
            rows.append({"dataset": ds, "row": row, "method": label,
                         **{k: got[k] for k in ("tok_s", "speedup", "tok_s_lo", "tok_s_hi", "speedup_lo", "speedup_hi",
                                                "mat")},
                         "lossless": lossless_text(run.summary.get("lossless") or {}) if run else None,
                         **{f"paper_{r.pair}_{k}": getattr(r, k) for k in ("tok_s", "speedup")
                            for r in mine.itertuples()},
                         "run_id": run.run_id if run else None, "ar_run_id": base.run_id if base else None})
    df = pd.DataFrame(rows)
    first, *rest = pools.values()
    caption = (f"Post-use & Pre-cut Tables 1-2, ours: {model or first.model} and {describe(first.drafter)}, fp32 "
               f"(paper: {PAPER_PAIR}, "
               f"Llama-2-chat, bf16 on 4x A6000): tok/s and speedup over AR per dataset.")
    checked = "; ".join(f"{r.dataset} {r.row} {r.lossless}" for r in df.itertuples() if isinstance(r.lossless, str))
    foot = [*footer(ours(first), used, [ours(p) for p in rest], [n for p in pools.values() for n in p.notes]),
            *common.assisted_note(first.drafter),
            f"Cells: ours ({PAPER_PAIR}, paper). The csv has every pair of the paper's Tables 1-2 and our MAT.",
            ("Speedup: mean per-question tok/s over AR's on the same questions and machine. Ours carry a 95% "
             "bootstrap interval over questions [low, high] (paired with AR for speedups; the csv's _lo/_hi)."),
            ("Paper's speedups its own tok/s contradict (the csv keeps them as printed): "
             + "; ".join(contradicted_speedups(paper)) + "."),
            f"Lossless (equal to greedy AR / checked): {checked or 'not checked'}.",
            *errors, f"{MISSING}: no run ({make(ARTIFACT)})."]
    return Report.tables("holistic_table1", render(display(df), caption, foot, df))


ARTIFACT = PAPER.declare(
    "table1", "Tables 1-2 (tok/s and speedup vs AR of AR, Lookahead, Assisted, Speculative, Ouroboros, ours on "
    "HumanEval, MT-Bench, GSM8K) -> tables/holistic_table1.{md,csv,tex}", holistic_table1, 1,
    "Post-use & Pre-cut Tables 1-2: AR, Lookahead, Assisted, Speculative, Ouroboros, ours on HumanEval, MT-Bench, "
    "GSM8K", "ar dataset=humaneval,mt_bench,gsm8k", "table1", "table1_sd", "table1_assisted", cover="Tables 1-2",
    paper_csv=("postuse_precut_table1_2.csv",))
