"""ProPD Table 2: early pruning at batch 4, per pruning layer and top-k: prune rate, accepted length, speed.

Writes results/tables/propd_table2.{md,csv,tex}, ours (paper) per cell (paper_tables/propd_table2_early_pruning_
bs4.csv). Rows: without pruning (the latest medusa run, else a propd run with both switches off), then the
latest propd run with pruning on and the dynamic tree off per (prune_layer, prune_topk). The markdown states,
from the data, whether the paper's claim holds that pruning removes most drafted nodes while keeping the
accepted length within 5% of no pruning.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.propd.common import (
    aggregate_rate,
    cell,
    context,
    draft_nodes_mean,
    footer,
    paper_csv,
    propd_pool,
    prune_point,
    prune_rate,
    table_texts,
    why_missing,
)
from bench.report.tables import MISSING, fmt, is_missing, pair, write_texts
from bench.run.metrics import mat

PAPER = "propd_table2_early_pruning_bs4.csv"
LAYERS = (1, 2, 3, 4)
TOPKS = (50, 100, 150, 200)
CHOSEN = (4, 50)  # the paper's final setting (Section 5.3)
MOST, MAT_TOLERANCE = 0.5, 0.05  # "removes most nodes": over half; "keeps MAT": within 5% of no pruning
DEFINITIONS = [
    ("Prune rate: 1 - nodes that went through the layers after the pruning layer / nodes drafted, pooled over "
    "all verification steps. AccLength: MAT, tokens per target forward incl. the bonus token. Speed: aggregate "
    "tokens/s (all new tokens / the batches' wall time). The dynamic tree is off in every pruning row."),
]


def pct(x) -> str:
    return MISSING if is_missing(x) else f"{100 * x:.1f}%"


def pruning_claim(points: dict[tuple[int, int], tuple[float | None, float | None]], reference_mat: float | None,
                  chosen: tuple[int, int] = CHOSEN) -> tuple[str, str]:
    """(verdict, numbers) of claim (1) at the chosen (layer, top-k): "holds" when pruning removes over half the
    drafted nodes and MAT stays within 5% of no pruning; points maps (layer, top-k) -> (prune rate, MAT)."""
    rate, m = points.get(chosen, (None, None))
    layer, k = chosen
    if is_missing(rate) or is_missing(m) or is_missing(reference_mat) or not reference_mat:
        return "not measured", f"no layer-{layer} top-{k} run with a prune rate and MAT, or no run without pruning"
    change = m / reference_mat - 1
    ok = [pk for pk, (r, mm) in points.items() if not is_missing(r) and not is_missing(mm)
          and r > MOST and abs(mm / reference_mat - 1) <= MAT_TOLERANCE]
    measured = sum(1 for r, mm in points.values() if not is_missing(r) and not is_missing(mm))
    verdict = "holds" if rate > MOST and abs(change) <= MAT_TOLERANCE else "does not hold"
    return verdict, (f"layer {layer}, top-{k}: {pct(rate)} of nodes pruned, MAT {m:.2f} vs {reference_mat:.2f} "
                     f"without pruning ({100 * change:+.1f}%); {len(ok)} of {measured} measured settings prune "
                     f"over half with MAT within 5%")


def build_propd_table2(results_dir: str | Path, model: str | None = None, batch_size: int = 4,
                       dataset: str = "mt_bench") -> pd.DataFrame:
    """Rows `none` then (layer, top_k): ours `prune_rate`, `mat`, `tok_s`, run id, and the paper's `_paper`."""
    batch_size = int(batch_size)
    p = propd_pool(results_dir, model, lambda r: r.meta.get("dataset") == dataset and r.batch_size == batch_size
             and r.meta.get("method") in ("medusa", "propd"), experiment="propd_table2")
    paper = paper_csv(PAPER)
    paper_by = {(row.layer, None if pd.isna(row.top_k) else int(row.top_k)): row for row in paper.itertuples()}
    ref = cell(p, "medusa", dataset, batch_size) or cell(p, "propd", dataset, batch_size, (False, False))
    rows, missing, used = [], {}, [ref]
    if ref is None:
        missing["w/o pruning"] = why_missing(p, dataset, "table2", f"medusa run (nor propd with both switches off) "
                                                                   f"at batch {batch_size}")
    keys = [("none", None)] + [(str(layer), k) for layer in LAYERS for k in TOPKS]
    for layer, k in keys:
        if layer == "none":
            run = ref
        else:
            run = cell(p, "propd", dataset, batch_size, (True, False),
                           where=lambda r, pk=(int(layer), k): prune_point(r) == pk)
            used.append(run)
            if run is None:
                missing[f"layer {layer} top-{k}"] = why_missing(
                    p, dataset, "table2", f"propd run with that layer and top-k (dynamic tree off) at batch {batch_size}")
        pr = paper_by[(layer, k)]
        rows.append({"layer": layer, "top_k": k,
                     "prune_rate": (0.0 if layer == "none" else prune_rate(run)) if run else None,
                     "mat": mat(run.records) if run else None, "tok_s": aggregate_rate(run) if run else None,
                     "draft_nodes_mean": draft_nodes_mean(run) if run else None,
                     "prune_rate_paper": pr.prune_rate, "mat_paper": pr.acc_length, "tok_s_paper": pr.speed_tok_s,
                     "run_id": run.run_id if run else None, "method": run.meta.get("method") if run else None})
    df = pd.DataFrame(rows)
    num = ["prune_rate", "mat", "tok_s", "draft_nodes_mean", "prune_rate_paper", "mat_paper", "tok_s_paper"]
    df[num] = df[num].astype(float)
    df["top_k"] = df["top_k"].astype("Int64")
    df.attrs.update(context(p, used, missing=missing, dataset=dataset, batch_size=batch_size,
                            reference=ref.meta.get("method") if ref else MISSING))
    return df


def claim_texts(df: pd.DataFrame) -> list[str]:
    """Claim (1) on ours and, by the same rule, on the paper's numbers."""
    out = []
    for who, suffix in (("ours", ""), ("paper", "_paper")):
        pts = {(int(r.layer), int(r.top_k)): (getattr(r, f"prune_rate{suffix}"), getattr(r, f"mat{suffix}"))
               for r in df.itertuples() if r.layer != "none"}
        verdict, numbers = pruning_claim(pts, df.loc[df["layer"] == "none", f"mat{suffix}"].item())
        out.append(f"{who}: {verdict} ({numbers})")
    rates = df["prune_rate_paper"].dropna()
    return [(f"Claim (1), pruning removes most drafted nodes (paper: {pct(rates.min())}-{pct(rates.max())}) with "
            f"the accepted length within 5% of no pruning, at the paper's chosen layer {CHOSEN[0]}, "
            f"top-{CHOSEN[1]}: {out[0]}; {out[1]}.")]


def display(df: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "Layer": ["w/o pruning" if layer == "none" else layer for layer in df["layer"]],
        "Top-K": [MISSING if pd.isna(k) else str(k) for k in df["top_k"]],
        "Prune rate": [pair(pct(a), pct(b)) for a, b in zip(df["prune_rate"], df["prune_rate_paper"])],
        "AccLength": [pair(fmt(a), fmt(b)) for a, b in zip(df["mat"], df["mat_paper"])],
        "Speed tok/s": [pair(fmt(a), fmt(b)) for a, b in zip(df["tok_s"], df["tok_s_paper"])],
    })


def render_propd_table2(df: pd.DataFrame) -> dict[str, str]:
    a = df.attrs
    pruned = df.loc[df["layer"] != "none", "draft_nodes_mean"].dropna()
    caption = (f"ProPD Table 2, ours (paper): early pruning rate, accepted length and speed at batch "
               f"{a['batch_size']} per pruning layer and top-k, on {a['dataset']}. Paper: Vicuna-7B, A6000, batch 4.")
    defs = [*DEFINITIONS, *claim_texts(df),
            (f"W/o pruning: {a['reference']} (the paper: Medusa). Nodes drafted per "
            f"step (mean): w/o pruning {fmt(df['draft_nodes_mean'].iloc[0], '.1f')}, pruning rows "
            f"{fmt(pruned.min() if len(pruned) else None, '.1f')}-{fmt(pruned.max() if len(pruned) else None, '.1f')}.")]
    return table_texts(display(df), caption, footer(a, defs, a["missing"]), df)


def propd_table2(results_dir: str | Path, model: str | None = None, batch_size: int = 4,
                 dataset: str = "mt_bench") -> str:
    """Build, write results/tables/propd_table2.{md,csv,tex}; returns the markdown."""
    df = build_propd_table2(results_dir, model, batch_size, dataset)
    texts = render_propd_table2(df)
    write_texts(Path(results_dir, "tables"), "propd_table2", texts)
    return texts["md"]
