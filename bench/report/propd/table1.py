"""ProPD Table 1: speedup of ProPD (pruning and dynamic tree on) over autoregressive decoding per batch size.

Writes results/tables/propd_table1.{md,csv,tex}: our row (the embedded model, labelled as such) above the
paper's Vicuna 7B/13B/33B rows (paper_tables/propd_table1_speedup_vs_ar.csv). Runs: the latest propd run with
both switches on and its ar baseline at the same batch size, model, dataset, machine and max_new_tokens.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.propd.common import context, footer, paper_csv, table_texts, why_missing
from bench.report.propd.select import (
    BATCHES,
    aggregate_rate,
    draft_nodes_mean,
    model_label,
    pool,
    prune_rate,
    speed_ratio,
)
from bench.report.tables import fmt, write_texts
from bench.run.metrics import mat

PAPER = "propd_table1_speedup_vs_ar.csv"
PAPER_MODELS = {"7b": "Vicuna-7B (paper, A6000)", "13b": "Vicuna-13B (paper, A100)",
                "33b": "Vicuna-33B (paper, A100)"}
BOTH = (True, True)
DEFINITIONS = [
    ("Speedup: ProPD over our ar at the same batch size on the questions of both runs; batch 1: ratio of mean "
    "per-question tokens/s (Spec-Bench's speedup), batch > 1: ratio of aggregate tokens/s (all new tokens / "
    "the batches' wall time). Tok/s rows: aggregate. MAT: tokens per target forward incl. the bonus token."),
    "The paper's 33B has no batch-16 value (it prints \"/\").",
]


def build_propd_table1(results_dir: str | Path, model: str | None = None, dataset: str = "mt_bench") -> pd.DataFrame:
    """One row per batch size: ours (`speedup`, rates, MAT, prune rate, nodes per step, run ids) and the
    paper's `paper_7b`, `paper_13b`, `paper_33b`. What the footer says (runs, reasons for empty cells) is in attrs."""
    p = pool(results_dir, model, lambda r: r.meta.get("dataset") == dataset and r.meta.get("method") in ("ar", "propd"), experiment="propd_table1")
    paper = paper_csv(PAPER).set_index("model")
    rows, missing, used = [], {}, []
    for b in BATCHES:
        run = p.latest("propd", dataset, b, BOTH)
        base = p.baseline(run, "ar") or p.latest("ar", dataset, b)
        used += [run, base]
        if run is None or base is None:
            what = "propd run with both switches on" if run is None else "ar run"
            missing[f"BS={b}"] = why_missing(p, dataset, "table1", f"{what} at that batch size")
        rows.append({
            "batch_size": b,
            "speedup": speed_ratio(run, base, aggregate=b > 1) if run is not None and base is not None else None,
            "propd_tok_s": aggregate_rate(run) if run else None, "ar_tok_s": aggregate_rate(base) if base else None,
            "propd_mat": mat(run.records) if run else None, "prune_rate": prune_rate(run) if run else None,
            "draft_nodes_mean": draft_nodes_mean(run) if run else None,
            **{f"paper_{m}": paper.at[m, f"bs{b}"] for m in PAPER_MODELS},
            "propd_run_id": run.run_id if run else None, "ar_run_id": base.run_id if base else None,
        })
    df = pd.DataFrame(rows)
    numeric = [c for c in df.columns if c not in ("batch_size", "propd_run_id", "ar_run_id")]
    df[numeric] = df[numeric].astype(float)  # None -> NaN: empty CSV cells
    df.attrs.update(context(p, used, missing=missing, dataset=dataset))
    return df


def display(df: pd.DataFrame) -> pd.DataFrame:
    cols = [f"BS={b}" for b in df["batch_size"]]
    label = model_label(df.attrs["model"])
    rows = [[f"{label}, ours: speedup", *map(fmt, df["speedup"])],
            ["ours: ProPD tok/s", *(fmt(x, ".1f") for x in df["propd_tok_s"])],
            ["ours: AR tok/s", *(fmt(x, ".1f") for x in df["ar_tok_s"])],
            ["ours: ProPD MAT", *map(fmt, df["propd_mat"])],
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
