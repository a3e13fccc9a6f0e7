"""Pieces ProPD's tables and figures share: the paper's CSVs, missing-cell reasons, footers, and the two texts
(markdown, LaTeX) of a report made of several small tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.propd.select import (
    DATASET_NOTES,
    MAKE,
    Pool,
    model_label,
    setting_text,
    short_batches,
    used_ids,
)
from bench.report.tables import latex_escape, markdown, render

PAPER_DIR = Path(__file__).with_name("paper_tables")
PAPER_SETUP = ("Paper: Vicuna v1.3 7B (one A6000), 13B and 33B (one A100; 33B at batch 4 and 8 in 4 bit) with "
               "Medusa heads, greedy, built on the Medusa code.")


def paper_csv(name: str) -> pd.DataFrame:
    return pd.read_csv(PAPER_DIR / name)


def why_missing(p: Pool, dataset: str, target: str, what: str) -> str:
    """Why a cell of ours is empty: no runs on the dataset at all, or no `what` (e.g. "ar run at that batch size").
    Cells with the same reason share one footnote."""
    if not any(r.meta.get("dataset") == dataset for r in p.runs):
        note = DATASET_NOTES.get(dataset)
        return f"no runs on {dataset}" + (f": {note}" if note else f" ({MAKE[target]})")
    return f"no {what} on {dataset} ({MAKE[target]})"


def context(p: Pool, used: list, **extra) -> dict:
    """What a footer says about the runs used, as plain values: a DataFrame's attrs are deep-copied by every pandas
    operation, so they must not hold runs and their records."""
    return {"model": p.model, "machine": p.machine, "max_new_tokens": p.max_new_tokens,
            "notes": [*p.notes, *short_batches(used)], "run_ids": used_ids(used), "settings": setting_text(used),
            **extra}


def footer(ctx: dict, definitions: list[str], missing: dict[str, str], notes: list[str] = ()) -> list[str]:
    """Ours (model, machine, max_new_tokens), definitions, one line per missing cell, run ids, notes."""
    ours = (f"Ours: {model_label(ctx['model'])} ({ctx['model']}), machine {ctx['machine'] or '—'}, max_new_tokens "
            f"{ctx['max_new_tokens'] or '—'}.")
    return [ours, *definitions, PAPER_SETUP,
            *(f"— {', '.join(cells)}: {reason}." for reason, cells in by_reason(missing).items()),
            "Runs: " + (", ".join(ctx["run_ids"]) or "none") + ".",
            *(f"Note: {n}." for n in [*ctx["notes"], *notes])]


def by_reason(missing: dict[str, str]) -> dict[str, list[str]]:
    """reason -> the cells it empties, in table order."""
    out: dict[str, list[str]] = {}
    for cell, reason in missing.items():
        out.setdefault(reason, []).append(cell)
    return out


def sections_texts(parts: list[tuple[str, pd.DataFrame]], caption: str, foot: list[str]) -> dict[str, str]:
    """md and tex of a report made of several captioned tables (each display frame of string cells)."""
    md = "\n\n".join([caption, *(markdown(df, title, [], numparse=False).strip() for title, df in parts),
                      "\n".join(foot)]) + "\n"
    tex = "\n".join(df.style.hide(axis="index").format(escape="latex")
                    .to_latex(hrules=True, caption=latex_escape(title)) for title, df in parts)
    return {"md": md, "tex": tex}


def table_texts(display: pd.DataFrame, caption: str, foot: list[str], data: pd.DataFrame) -> dict[str, str]:
    """tables.render with the markdown's cells kept as written ("1.80", not "1.8"; "—" beside numbers)."""
    texts = render(display, caption, foot, data)
    texts["md"] = markdown(display, caption, foot, numparse=False)
    return texts
