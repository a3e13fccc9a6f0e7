"""ProPD Table 2: early pruning per layer and top-k at batch 4, and the paper's claim (1)."""

from __future__ import annotations

import pandas as pd

from bench.metrics import aggregate_rate_interval, mat, mat_interval
from bench.report.claims import paired_ratio_interval, per_question, sums_interval
from bench.report.declare import option
from bench.report.output import Report
from bench.report.propd import PAPER, common
from bench.report.select import Cells, RunSet
from bench.report.tables import MISSING, fmt, fmt_ci, interval_columns, interval_in, is_missing, paired_cells
from bench.run.store import Run

LAYERS = (1, 2, 3, 4)
TOPKS = (50, 100, 150, 200)
CHOSEN = (4, 50)  # the paper's final setting (Section 5.3)
MOST, MAT_TOLERANCE = 0.5, 0.05  # "removes most nodes": over half; "keeps MAT": within 5% of no pruning
PCT = ".1%"  # a share in percent: "61.2%"
DEFINITIONS = [
    ("Prune rate: 1 - nodes that went through the layers after the pruning layer / nodes drafted, pooled over "
    "all verification steps. AccLength: MAT, tokens per target forward incl. the bonus token. Speed: aggregate "
    "tokens/s (all new tokens / the batches' wall time). The dynamic tree is off in every pruning row. "
    "[low, high]: 95% bootstrap interval over questions (prune rate: questions resampled with their drafted and "
    "verified nodes; speed: each question carries an equal share of its batch's wall time).")]


def pct(x) -> str:
    """A share as "61.2%"; MISSING for None/NaN."""
    return fmt(x, PCT)


def interval_verdict(rate_ci: list[float] | None, ratio_ci: list[float] | None) -> str:
    """Claim (1) from intervals: the prune rate's wholly above MOST and the MAT ratio (over no pruning, paired on
    the questions) wholly within 1 +- MAT_TOLERANCE hold; either wholly on the other side does not."""
    if rate_ci is None or ratio_ci is None:
        return "undecided"
    band = (1 - MAT_TOLERANCE, 1 + MAT_TOLERANCE)
    if rate_ci[1] < MOST or ratio_ci[1] < band[0] or ratio_ci[0] > band[1]:
        return "does not hold"
    return "holds" if rate_ci[0] > MOST and band[0] <= ratio_ci[0] and ratio_ci[1] <= band[1] else "undecided"


def pruning_claim(points: dict[tuple[int, int], tuple[float | None, float | None]], reference_mat: float | None,
                  chosen: tuple[int, int] = CHOSEN, intervals: tuple | None = None) -> tuple[str, str]:
    """(verdict, numbers) of claim (1) at the chosen (layer, top-k), points: (layer, top-k) -> (prune rate, MAT);
    the verdict from `intervals` (prune rate's, paired MAT ratio's) when given, else (the paper's) the points."""
    rate, m = points.get(chosen, (None, None))
    layer, k = chosen
    if is_missing(rate) or is_missing(m) or is_missing(reference_mat) or not reference_mat:
        return "not measured", f"no layer-{layer} top-{k} run with a prune rate and MAT, or no run without pruning"
    change = m / reference_mat - 1
    measured = [(r, mm) for r, mm in points.values() if not is_missing(r) and not is_missing(mm)]
    ok = sum(1 for r, mm in measured if r > MOST and abs(mm / reference_mat - 1) <= MAT_TOLERANCE)
    verdict = ("holds" if rate > MOST and abs(change) <= MAT_TOLERANCE else "does not hold") if intervals is None \
        else interval_verdict(*intervals)
    ci = "" if intervals is None else (f"; 95% intervals: prune rate {fmt_ci(intervals[0], pct)}, MAT ratio "
                                       f"{fmt_ci(intervals[1], fmt)}")
    return verdict, (f"layer {layer}, top-{k}: {pct(rate)} of nodes pruned, MAT {m:.2f} vs {reference_mat:.2f} "
                     f"without pruning ({100 * change:+.1f}%); {ok} of {len(measured)} measured settings prune "
                     f"over half with MAT within 5%{ci}")


def prune_interval(run: Run) -> list[float] | None:
    """Prune rate's interval: questions resampled with their drafted and verified nodes."""
    ci = sums_interval(common.nodes(run), 1, 0)
    return None if ci is None else [1 - ci[1], 1 - ci[0]]


def mat_ratio_interval(run: Run, ref: Run) -> list[float] | None:
    """MAT of run over ref's, paired on the questions of both (tokens and steps of each question)."""
    return paired_ratio_interval(*(per_question(x.records, lambda r: sum(r["accept_lengths"]),
                                                lambda r: len(r["accept_lengths"])) for x in (run, ref)))


def table2_frame(runs: RunSet, model: str | None = None, batch_size: int = 4,
                 dataset: str = "mt_bench") -> tuple[pd.DataFrame, Cells]:
    """Rows `none` then (layer, top_k), ours and the paper's (`_paper`); the cells for the footer."""
    batch_size = int(batch_size)
    cells = common.cells(runs, "table2", lambda r: r.dataset == dataset and r.batch_size == batch_size
                       and r.method in ("medusa", "propd"), model)
    paper = runs.paper()
    paper_by = {(row.layer, None if pd.isna(row.top_k) else int(row.top_k)): row for row in paper.itertuples()}
    ref = cells.take(cells.p.latest(common.fits(), method="medusa", dataset=dataset, batch_size=batch_size)
                     or cells.p.latest(common.fits((False, False)), method="propd", dataset=dataset,
                                       batch_size=batch_size))
    if ref is None:
        cells.gap("w/o pruning", dataset, f"medusa run (nor propd with both switches off) at batch {batch_size}")
    rows = []
    for layer, k in [("none", None)] + [(str(layer), k) for layer in LAYERS for k in TOPKS]:
        pruning = layer != "none"
        at = lambda r, pk=(int(layer) if pruning else None, k): common.prune_point(r) == pk
        run = ref if not pruning else cells.take(cells.p.latest(common.fits((True, False), at), method="propd",
                                                                dataset=dataset, batch_size=batch_size))
        if pruning and run is None:
            cells.gap(f"layer {layer} top-{k}", dataset,
                      f"propd run with that layer and top-k (dynamic tree off) at batch {batch_size}")
        pr = paper_by[(layer, k)]
        chosen = pruning and (int(layer), k) == CHOSEN and run is not None
        rows.append({"layer": layer, "top_k": k,
                     **interval_columns("prune_rate", prune_interval(run) if run and pruning else None),
                     **interval_columns("mat_ratio", mat_ratio_interval(run, ref) if chosen and ref else None),
                     **interval_columns("mat", mat_interval(run.records) if run else None),
                     **interval_columns("tok_s", aggregate_rate_interval(run.records) if run else None),
                     "prune_rate": (common.prune_rate(run) if pruning else 0.0) if run else None,
                     "mat": mat(run.records) if run else None,
                     "tok_s": common.aggregate_rate(run.records) if run else None,
                     "draft_nodes_mean": common.draft_nodes_mean(run) if run else None,
                     "prune_rate_paper": pr.prune_rate, "mat_paper": pr.acc_length, "tok_s_paper": pr.speed_tok_s,
                     "run_id": run.run_id if run else None, "method": run.method if run else None})
    df = common.frame(cells, rows, ("layer", "top_k", "method"), dataset=dataset, batch_size=batch_size,
                     reference=ref.method if ref else MISSING)
    df["top_k"] = df["top_k"].astype("Int64")
    return df, cells


def claim_texts(df: pd.DataFrame) -> list[str]:
    """Claim (1) on ours and, by the same rule, on the paper's numbers."""
    out = []
    for who, suffix in (("ours", ""), ("paper", "_paper")):
        pts = {(int(r.layer), int(r.top_k)): (getattr(r, f"prune_rate{suffix}"), getattr(r, f"mat{suffix}"))
               for r in df.itertuples() if r.layer != "none"}
        row = df[(df["layer"] == str(CHOSEN[0])) & (df["top_k"] == CHOSEN[1])]
        cis = None if suffix or row.empty else (interval_in(row.iloc[0], "prune_rate"),
                                                interval_in(row.iloc[0], "mat_ratio"))
        verdict, numbers = pruning_claim(pts, df.loc[df["layer"] == "none", f"mat{suffix}"].item(), intervals=cis)
        out.append(f"{who}: {verdict} ({numbers})")
    rates = df["prune_rate_paper"].dropna()
    return [(f"Claim (1), pruning removes most drafted nodes (paper: {pct(rates.min())}-{pct(rates.max())}) with "
            f"the accepted length within 5% of no pruning, at the paper's chosen layer {CHOSEN[0]}, "
            f"top-{CHOSEN[1]} (ours from 95% intervals, the paper from its points): {out[0]}; {out[1]}.")]


def display(df: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "Layer": ["w/o pruning" if layer == "none" else layer for layer in df["layer"]],
        "Top-K": [MISSING if pd.isna(k) else str(k) for k in df["top_k"]],
        "Prune rate": paired_cells(df, "prune_rate", "prune_rate_paper", PCT),
        "AccLength": paired_cells(df, "mat", "mat_paper"),
        "Speed tok/s": paired_cells(df, "tok_s", "tok_s_paper"),
    })


def propd_table2(runs: RunSet, model: str | None = None, batch_size: int = 4, dataset: str = "mt_bench") -> Report:
    df, cells = table2_frame(runs, model, batch_size, dataset)
    a = df.attrs
    pruned = df.loc[df["layer"] != "none", "draft_nodes_mean"].dropna()  # empty: min() and max() are NaN, "—"
    caption = (f"ProPD Table 2, ours (paper): early pruning rate, accepted length and speed at batch "
               f"{a['batch_size']} per pruning layer and top-k, on {a['dataset']}. Paper: Vicuna-7B, A6000, batch 4.")
    defs = [*DEFINITIONS, *claim_texts(df),
            (f"W/o pruning: {a['reference']} (the paper: Medusa). Nodes drafted per step (mean): w/o pruning "
             f"{fmt(df['draft_nodes_mean'].iloc[0], '.1f')}, pruning rows {fmt(pruned.min(), '.1f')}-"
             f"{fmt(pruned.max(), '.1f')}.")]
    return common.table("table2", display(df), caption, common.propd_footer(cells, defs), df)


ARTIFACT = PAPER.declare(
    "table2", "Table 2 (early pruning: layer x top-k at batch 4) -> tables/propd_table2.{md,csv,tex}", propd_table2,
    2, "ProPD Table 2: ar, medusa, propd pruning layer 1-4 x top-k 50-200 at batch 4 (dynamic tree off)",
    "table2_baselines", "table2", cover="Table 2", paper_csv=("propd_table2_early_pruning_bs4.csv",), baseline="medusa",
    options=(common.DATASET, option("--batch-size", type=int, help="default 4, as the paper")))
