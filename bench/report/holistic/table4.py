"""Post-use & Pre-cut Table 4: mean accepted length and utilisation of vanilla SD (lambda 12) against the full
method (both reuses and Pre-cut, lambda up to 24), our embedded pair beside the paper's six pairs.

Writes results/tables/holistic_table4.{md,csv,tex}. The paper's cells are "MAT / utilisation" with utilisation =
accepted / generated draft tokens (its Table 5 definition: 8.18 / 12 = 68.2%); ours print the same two, and the
csv adds Eq. 3's utilisation (new tokens / draft calls), which reuse at the draft raises without changing MAT.
Our MAT counts the bonus token, as every table of this harness; so, by its numbers, does the paper's.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.holistic.common import MAKE, footer, holistic_pool, ladder_run, numbers
from bench.report.tables import MISSING, fmt, render, write_texts

PAPER_DIR = Path(__file__).with_name("paper_tables")
PAPER = "postuse_precut_table4_mat_util.csv"
CELLS = {"speculative": ("sd", 12), "ours": ("precut", 24)}  # (ladder level, lambda) of each column


def cell(mat, util) -> str:
    return MISSING if mat is None or util is None else f"{fmt(mat)}/{fmt(100 * util, '.1f')}%"


def build_holistic_table4(results_dir: str | Path, model: str | None = None, dataset: str = "humaneval") -> pd.DataFrame:
    p = holistic_pool(results_dir, model, dataset, MAKE["table4"])
    rows = [{"pair": f"{r.pair} (paper)", "source": "paper", "speculative_mat": r.speculative_mat,
             "speculative_util": r.speculative_util, "ours_mat": r.ours_mat, "ours_util": r.ours_util}
            for r in pd.read_csv(PAPER_DIR / PAPER).itertuples()]
    ours, used = {"pair": f"{p.model} + its draft (ours)", "source": "measured"}, []
    for col, (lvl, n) in CELLS.items():
        run = ladder_run(p, lvl, n)
        base = p.baseline(run, "ar")
        used += [run, base]
        got = numbers(run, base)
        ours.update({f"{col}_mat": got["mat"], f"{col}_util": got["util_accepted"], f"{col}_util_eq3": got["util_eq3"],
                     f"{col}_speedup": got["speedup"], f"{col}_draft_tokens_mean": got["draft_tokens_mean"],
                     f"{col}_run_id": run.run_id if run else None})
    df = pd.DataFrame([*rows, ours])
    df.attrs.update({"footer": footer(p, used), "dataset": dataset})
    return df


def holistic_table4(results_dir: str | Path, model: str | None = None, dataset: str = "humaneval") -> str:
    """Build, write results/tables/holistic_table4.{md,csv,tex}; returns the markdown."""
    df = build_holistic_table4(results_dir, model, dataset)
    display = pd.DataFrame({"Model pair": df["pair"],
                            "Speculative (λ=12)": [cell(m, u) for m, u in zip(df.speculative_mat, df.speculative_util)],
                            "Ours (λ≤24)": [cell(m, u) for m, u in zip(df.ours_mat, df.ours_util)]})
    me = df[df["source"] == "measured"].iloc[0]
    caption = (f"Post-use & Pre-cut Table 4: MAT / utilisation (accepted / drafted tokens), vanilla SD against the "
               f"full method, on {df.attrs['dataset']}.")
    foot = [*df.attrs["footer"],
            (f"Ours, Eq. 3 utilisation (new tokens / draft calls): Speculative {fmt(me.get('speculative_util_eq3'))}, "
             f"ours {fmt(me.get('ours_util_eq3'))}; mean draft length {fmt(me.get('speculative_draft_tokens_mean'))} "
             f"vs {fmt(me.get('ours_draft_tokens_mean'))}; speedup over AR {fmt(me.get('speculative_speedup'))} vs "
             f"{fmt(me.get('ours_speedup'))}."),
            f"{MISSING}: no run ({MAKE['table4']})."]
    texts = render(display, caption, foot, df)
    write_texts(Path(results_dir, "tables"), "holistic_table4", texts)
    return texts["md"]
