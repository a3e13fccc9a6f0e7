"""ProPD Table 3: the ablation relative to Medusa per batch size, and the paper's claim (2)."""

from __future__ import annotations

import itertools

import pandas as pd

from bench.report.output import Report
from bench.report.propd import PAPER, common
from bench.report.select import Cells, RunSet
from bench.report.tables import MISSING, fmt, interval_in, is_missing, paired_cells, with_interval

YES_NO = {True: "yes", False: "no"}
DEFINITIONS = [
    ("Cells: aggregate tokens/s (all new tokens / the batches' wall time) of propd with these switches over that "
    "of medusa at the same batch size, on the questions of both runs; ours (paper's 7B). The paper's rows are "
    "relative to its row with neither technique (1 by definition); ours to a medusa run, so our \"neither\" row "
    "measures what propd's code costs or saves with both switches off. [low, high]: 95% bootstrap interval over "
    "questions, paired with medusa (each question carrying an equal share of its batch's wall time).")]


def growth_claim(ratios: dict[int, float | tuple | None]) -> tuple[str, str]:
    """(verdict, numbers) of claim (2) from intervals: holds when the largest batch's gain is wholly above the
    smallest's and no step to a larger batch falls wholly below; does not hold when one falls or the largest is
    wholly at or below the smallest. A value is (gain, [low, high]) or a plain number (the paper's)."""
    pts = sorted((b, v if isinstance(v, tuple) else (v, None)) for b, v in ratios.items()
                 if not is_missing(v if not isinstance(v, tuple) else v[0]))
    numbers = ", ".join(f"BS={b}: {with_interval(r, ci)}" for b, (r, ci) in pts) or "no batch size measured"
    if len(pts) < 2:
        return "not measured", numbers
    spans = [ci or [r, r] for _, (r, ci) in pts]
    falls = any(nxt[1] < prev[0] for prev, nxt in itertools.pairwise(spans))
    if falls or spans[-1][1] <= spans[0][0]:
        return "does not hold", numbers
    return ("holds" if spans[-1][0] > spans[0][1] else "undecided"), numbers


def table3_frame(runs: RunSet, model: str | None = None, dataset: str = "mt_bench") -> tuple[pd.DataFrame, Cells]:
    """One row per (combo, batch size), ours and the paper's; the cells for the footer."""
    c = common.cells(runs, "table3", lambda r: r.dataset == dataset and r.method in ("medusa", "propd"), model)
    paper = runs.paper()
    rows = []
    for (prune, dynamic), name in common.COMBOS.items():
        pr = paper[(paper["early_pruning"] == YES_NO[prune]) & (paper["dynamic_generation"] == YES_NO[dynamic])]
        for b in common.BATCHES:
            numbers, ids = common.over(c, dataset, "medusa", f"{name} BS={b}", b, (prune, dynamic), "those switches")
            rows.append({"combo": name, "prune": prune, "dynamic": dynamic, "batch_size": b, **numbers,
                         "paper_7b": pr[f"7b_bs{b}"].item(), "paper_13b": pr["13b_bs2"].item() if b == 2 else None,
                         "paper_33b": pr["33b_bs2"].item() if b == 2 else None, **ids})
    return common.frame(c, rows, ("combo", "prune", "dynamic", "batch_size"), dataset=dataset), c


def claim_texts(df: pd.DataFrame) -> list[str]:
    both = df[df["combo"] == common.COMBOS[True, True]]
    ours = growth_claim({b: (r, interval_in(row, "ratio")) for (_, row), b, r in
                         zip(both.iterrows(), both["batch_size"], both["ratio"])})
    paper = growth_claim(dict(zip(both["batch_size"], both["paper_7b"])))
    return [(f"Claim (2), ProPD's gain over Medusa (both switches on) grows with the batch size (never falls, and "
            f"is larger at the largest batch than at the smallest): ours: {ours[0]} ({ours[1]}); paper 7B: "
            f"{paper[0]} ({paper[1]}).")]


def display(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (prune, dynamic), name in common.COMBOS.items():
        sub = df[df["combo"] == name].set_index("batch_size")
        rows.append({"Early pruning": YES_NO[prune], "Dynamic generation": YES_NO[dynamic],
                     **{f"BS={b}": cell for b, cell in zip(sub.index, paired_cells(sub, "ratio", "paper_7b"))},
                     "13B BS=2 (paper)": fmt(sub.at[2, "paper_13b"]) if 2 in sub.index else MISSING,
                     "33B BS=2 (paper)": fmt(sub.at[2, "paper_33b"]) if 2 in sub.index else MISSING})
    return pd.DataFrame(rows)


def propd_table3(runs: RunSet, model: str | None = None, dataset: str = "mt_bench") -> Report:
    df, cells = table3_frame(runs, model, dataset)
    caption = (f"ProPD Table 3, ours (paper's Vicuna-7B): ablation of early pruning and dynamic tree generation, "
               f"speed relative to Medusa at the same batch size, on {dataset}.")
    defs = [*DEFINITIONS, *claim_texts(df), "The paper's 33B has no value for the row with neither technique.",
            f"ProPD settings: {df.attrs['settings']}."]
    return common.table("table3", display(df), caption, common.propd_footer(cells, defs), df)


ARTIFACT = PAPER.declare(
    "table3", "Table 3 (ablation vs Medusa per batch size) -> tables/propd_table3.{md,csv,tex}", propd_table3, 3,
    "ProPD Table 3: medusa and propd's 4 switch combinations x batch 1-16, relative to medusa", "table3_medusa",
    "table3", cover="Table 3", paper_csv=("propd_table3_ablation.csv",), baseline="medusa", options=(common.DATASET,))
