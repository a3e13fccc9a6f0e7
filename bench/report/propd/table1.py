"""ProPD Table 1: ProPD's speedup over AR per batch size, our rows above the paper's."""

from __future__ import annotations

import pandas as pd

from bench.report.output import Report
from bench.report.propd import PAPER
from bench.report.propd.common import BATCHES, BOTH, DATASET, cells, frame, over, propd_footer, table
from bench.report.select import Cells, RunSet
from bench.report.tables import fmt, ours_cells

PAPER_MODELS = {"7b": "Vicuna-7B (paper, A6000)", "13b": "Vicuna-13B (paper, A100)",
                "33b": "Vicuna-33B (paper, A100)"}
DEFINITIONS = [
    ("Speedup: ProPD over our ar at the same batch size on the questions of both runs; batch 1: ratio of mean "
    "per-question tokens/s (Spec-Bench's speedup), batch > 1: ratio of aggregate tokens/s (all new tokens / "
    "the batches' wall time). Tok/s rows: aggregate. MAT: tokens per target forward incl. the bonus token. "
    "[low, high]: 95% bootstrap interval over questions, paired with AR for the speedup (at batch > 1 each "
    "question carries an equal share of its batch's wall time, in the tok/s rows too)."),
    "The paper's 33B has no batch-16 value (it prints \"/\")."]


def table1_frame(runs: RunSet, model: str | None = None, dataset: str = "mt_bench") -> tuple[pd.DataFrame, Cells]:
    """One row per batch size, ours and the paper's; the cells for the footer."""
    c = cells(runs, "table1", lambda r: r.dataset == dataset and r.method in ("ar", "propd"), model)
    paper = runs.paper().set_index("model")
    rows = []
    for b in BATCHES:
        numbers, ids = over(c, dataset, "ar", f"BS={b}", b, BOTH, "both switches on", b > 1, "speedup")
        rows.append({"batch_size": b, **numbers, **{f"paper_{m}": paper.at[m, f"bs{b}"] for m in PAPER_MODELS},
                     **ids})
    return frame(c, rows, ("batch_size",), dataset=dataset), c


def display(df: pd.DataFrame) -> pd.DataFrame:
    cols = [f"BS={b}" for b in df["batch_size"]]
    rows = [[f"{df.attrs['label']}, ours: speedup", *ours_cells(df, "speedup")],
            ["ours: ProPD tok/s", *ours_cells(df, "propd_tok_s", ".1f")],
            ["ours: AR tok/s", *ours_cells(df, "ar_tok_s", ".1f")],
            ["ours: ProPD MAT", *ours_cells(df, "propd_mat")],
            *([name, *map(fmt, df[f"paper_{m}"])] for m, name in PAPER_MODELS.items())]
    return pd.DataFrame(rows, columns=["Model", *cols])


def propd_table1(runs: RunSet, model: str | None = None, dataset: str = "mt_bench") -> Report:
    df, c = table1_frame(runs, model, dataset)
    caption = (f"ProPD Table 1, ours beside the paper's: average speedup of ProPD against autoregressive decoding "
               f"per batch size, on {dataset} (the paper: MT-Bench, ChatGPT Prompts and Alpaca).")
    foot = propd_footer(c, [*DEFINITIONS, f"ProPD settings: {df.attrs['settings']}."])
    return table("table1", display(df), caption, foot, df)


ARTIFACT = PAPER.declare(
    "table1", "Table 1 (speedup vs AR per batch size) -> tables/propd_table1.{md,csv,tex}", propd_table1, 1,
    "ProPD Table 1: ar, propd x batch 1-16 on MT-Bench, speedup vs AR beside the paper's (LIMIT per category)",
    "table1", cover="Table 1", paper_csv=("propd_table1_speedup_vs_ar.csv",), options=(DATASET,))
