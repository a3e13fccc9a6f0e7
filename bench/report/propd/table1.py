"""ProPD Table 1: speedup of ProPD (pruning and dynamic tree on) over autoregressive decoding per batch size.

Writes results/tables/propd_table1.{md,csv,tex}: our row (the embedded model, labelled as such) above the
paper's Vicuna 7B/13B/33B rows (paper_tables/propd_table1_speedup_vs_ar.csv). Runs: the latest propd run with
both switches on and its ar baseline at the same batch size, model, dataset, machine and max_new_tokens.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.propd.common import (
    BATCHES,
    Against,
    footer,
    model_label,
    paper_csv,
    propd_pool,
    table_texts,
)
from bench.report.tables import fmt, ours_cells, write_texts

PAPER = "propd_table1_speedup_vs_ar.csv"
PAPER_MODELS = {"7b": "Vicuna-7B (paper, A6000)", "13b": "Vicuna-13B (paper, A100)",
                "33b": "Vicuna-33B (paper, A100)"}
BOTH = (True, True)
DEFINITIONS = [
    ("Speedup: ProPD over our ar at the same batch size on the questions of both runs; batch 1: ratio of mean "
    "per-question tokens/s (Spec-Bench's speedup), batch > 1: ratio of aggregate tokens/s (all new tokens / "
    "the batches' wall time). Tok/s rows: aggregate. MAT: tokens per target forward incl. the bonus token. "
    "[low, high]: 95% bootstrap interval over questions, paired with AR for the speedup (at batch > 1 each "
    "question carries an equal share of its batch's wall time, in the tok/s rows too)."),
    "The paper's 33B has no batch-16 value (it prints \"/\").",
]


def build_propd_table1(results_dir: str | Path, model: str | None = None, dataset: str = "mt_bench") -> pd.DataFrame:
    """One row per batch size: ours (`speedup`, rates, MAT, prune rate, nodes per step, run ids) and the
    paper's `paper_7b`, `paper_13b`, `paper_33b`. What the footer says (runs, reasons for empty cells) is in attrs."""
    p = propd_pool(results_dir, model, lambda r: r.dataset == dataset
                   and r.method in ("ar", "propd"), experiment="propd_table1")
    paper = paper_csv(PAPER).set_index("model")
    vs, rows = Against(p, dataset, "ar", "table1", ratio="speedup"), []
    for b in BATCHES:
        numbers, ids = vs.cell(f"BS={b}", b, BOTH, "both switches on", aggregate=b > 1)
        rows.append({"batch_size": b, **numbers, **{f"paper_{m}": paper.at[m, f"bs{b}"] for m in PAPER_MODELS},
                     **ids})
    return vs.frame(rows, keys=("batch_size",))


def display(df: pd.DataFrame) -> pd.DataFrame:
    cols = [f"BS={b}" for b in df["batch_size"]]
    label = model_label(df.attrs["model"])
    rows = [[f"{label}, ours: speedup", *ours_cells(df, "speedup")],
            ["ours: ProPD tok/s", *ours_cells(df, "propd_tok_s", ".1f")],
            ["ours: AR tok/s", *ours_cells(df, "ar_tok_s", ".1f")],
            ["ours: ProPD MAT", *ours_cells(df, "propd_mat")],
            *([name, *map(fmt, df[f"paper_{m}"])] for m, name in PAPER_MODELS.items())]
    return pd.DataFrame(rows, columns=["Model", *cols])


def render_propd_table1(df: pd.DataFrame) -> dict[str, str]:
    a = df.attrs
    caption = (f"ProPD Table 1, ours beside the paper's: average speedup of ProPD against autoregressive decoding "
               f"per batch size, on {a['dataset']} (the paper: MT-Bench, ChatGPT Prompts and Alpaca).")
    foot = footer(a, [*DEFINITIONS, f"ProPD settings: {a['settings']}."], a["missing"])
    return table_texts(display(df), caption, foot, df)


def propd_table1(results_dir: str | Path, model: str | None = None, dataset: str = "mt_bench") -> str:
    """Build, write results/tables/propd_table1.{md,csv,tex}; returns the markdown."""
    df = build_propd_table1(results_dir, model, dataset)
    texts = render_propd_table1(df)
    write_texts(Path(results_dir, "tables"), "propd_table1", texts)
    return texts["md"]
