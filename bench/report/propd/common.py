"""What ProPD's reports share: which runs they use (through bench.report.select), how a run is classified and
reduced to numbers, the paper's CSVs, missing-cell reasons, footers and the texts of a report.

Methods: ar, bpd, medusa, propd, greedy (temperature 0) only. A propd run is classified by its two switches,
read from `method_settings` (`prune`, `dynamic`), else from its `run.variant` (`ablation-*`, `prune-L<n>-k<k>`
as conf/experiment/propd/ sets them), so a hand-run propd counts wherever its switches put it. Runs are of one
model (default: that of the most recent ProPD-family run) and, within one artifact, of the most recent relevant
run's machine label and max_new_tokens, so every ratio compares runs measured the same way; the runs left out
are counted in a note. Of the rest, the latest run per (method, switches, dataset, batch size) is used.

Speeds are recomputed from records (bench.run.metrics): the aggregate rate is all new tokens / all timed wall
time (at batch > 1 the batch's wall time), the rate a server delivers and the paper's "tokens per second".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.report.claims import speed_ratio, speed_ratio_interval
from bench.report.select import Pool, pool, read_runs, used_ids
from bench.report.tables import interval_columns, latex_escape, markdown, render
from bench.run.metrics import aggregate_rate_interval, mat, mat_interval, tokens_per_s
from bench.run.store import Run

METHODS = ("ar", "bpd", "medusa", "propd")
BATCHES = (1, 2, 4, 8, 16)
DATASETS = {"mt_bench": "MT-Bench", "chatgpt_prompts": "ChatGPT Prompts", "alpaca": "Alpaca"}
# Why a dataset may have no runs at all, said under the cell instead of a bare "no run".
DATASET_NOTES = {"chatgpt_prompts": "not loadable offline (no copy in the data mirror or data/cache/; the hub "
                                    "is needed), so its runs fail here"}
# (prune, dynamic) -> the row names of the paper's Table 3 and the variants conf/experiment/propd/ gives them.
COMBOS = {(False, False): "neither", (True, False): "pruning only", (False, True): "dynamic only",
          (True, True): "both"}
VARIANTS = {"ablation-none": (False, False), "ablation-prune": (True, False), "ablation-dynamic": (False, True),
            "ablation-both": (True, True)}
PRUNE_VARIANT = re.compile(r"prune-L(\d+)-k(\d+)")
MODEL_LABELS = {"smollm2-135m": "SmolLM2-135M (embedded)"}
MAKE = {"table1": "make reproduce-propd-table1", "table2": "make reproduce-propd-table2",
        "table3": "make reproduce-propd-table3", "fig3": "make reproduce-propd-fig3",
        "fig7": "make reproduce-propd-fig7"}
PAPER_DIR = Path(__file__).with_name("paper_tables")
PAPER_SETUP = ("Paper: Vicuna v1.3 7B (one A6000), 13B and 33B (one A100; 33B at batch 4 and 8 in 4 bit) with "
               "Medusa heads, greedy, built on the Medusa code.")


def model_label(model: str | None) -> str:
    return MODEL_LABELS.get(model or "", str(model))


def switches(run: Run) -> tuple[bool, bool] | None:
    """(prune, dynamic) of a propd run; None for other methods or a propd run that says neither."""
    if run.method != "propd":
        return None
    ms = run.settings
    if isinstance(ms.get("prune"), bool) and isinstance(ms.get("dynamic"), bool):
        return ms["prune"], ms["dynamic"]
    variant = run.variant or ""
    if variant in VARIANTS:
        return VARIANTS[variant]
    if PRUNE_VARIANT.fullmatch(variant):  # Table 2's sweep: pruning at a fixed tree
        return True, False
    return None


def prune_point(run: Run) -> tuple[int, int] | None:
    """(prune_layer, prune_topk) of a pruning propd run, from method_settings, else from its variant."""
    ms = run.settings
    if ms.get("prune_layer") is not None and ms.get("prune_topk") is not None:
        return int(ms["prune_layer"]), int(ms["prune_topk"])
    m = PRUNE_VARIANT.fullmatch(run.variant or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def aggregate_rate(run: Run) -> float | None:
    """All new tokens / all timed wall time (the batch's at batch > 1)."""
    return tokens_per_s(run.records)["total"]


def node_totals(run: Run) -> tuple[int, int] | None:
    """(drafted, verified) nodes over all verification steps of all records; None when not recorded."""
    recs = [r for r in run.records if r.get("draft_nodes") is not None]
    if not recs:
        return None
    drafted = sum(sum(r["draft_nodes"]) for r in recs)
    verified = sum(sum(r.get("verified_nodes", r["draft_nodes"])) for r in recs)
    return drafted, verified


def prune_rate(run: Run) -> float | None:
    """1 - verified / drafted nodes, pooled over steps; else the summary's `prune_rate`."""
    totals = node_totals(run)
    if totals and totals[0] > 0:
        return 1 - totals[1] / totals[0]
    return run.summary.get("prune_rate")


def draft_nodes_mean(run: Run) -> float | None:
    """Mean nodes drafted per verification step (root excluded); else the summary's `draft_nodes_mean`."""
    steps = [n for r in run.records for n in (r.get("draft_nodes") or [])]
    if steps:
        return sum(steps) / len(steps)
    return run.summary.get("draft_nodes_mean")


def propd_pool(results_dir: str | Path, model: str | None, relevant: Callable[[Run], bool],
               experiment: str | None = None) -> Pool:
    """The ProPD-family runs of `model` (default: the most recent relevant run's) on the most recent relevant
    run's machine and max_new_tokens; that run is the latest of `experiment` (the artifact's own sweep) when it
    has one, so another table's later runs of other lengths do not replace it. A note counts the relevant runs of
    other machines or lengths left out. Without a run of `experiment`, the latest run of a ProPD experiment
    (propd_*) anchors the pool: an AR run of another paper (other lengths) must not."""
    runs = read_runs(results_dir, method=METHODS, greedy=True)
    if experiment is not None and any(relevant(r) and r.experiment == experiment for r in runs):
        own = lambda r: r.experiment == experiment
    else:
        own = lambda r: str(r.experiment or "").startswith("propd")
    return pool(runs, relevant, model, own=own)


def cell(p: Pool, method: str, dataset: str, batch: int, combo: tuple[bool, bool] | None = None,
         where: Callable[[Run], bool] | None = None) -> Run | None:
    """The latest run of `method` (propd: with these switches; others: default variant) on `dataset` at `batch`;
    None if there is none. Without `where`, Table 2's sweep (variants prune-L<n>-k<k>) is left out: its
    pruning-only runs at other layers and top-k are not the ablation's."""
    return p.latest(lambda r: r.method == method and r.dataset == dataset
                    and r.batch_size == batch
                    and (where(r) if where else not PRUNE_VARIANT.fullmatch(r.variant or ""))
                    and (switches(r) == combo if method == "propd" else not r.variant))


@dataclass
class Against:
    """ProPD's runs over a baseline method's (ar: Table 1, medusa: Table 3), one cell at a time: the runs used
    and why a cell is empty, for the footer."""

    p: Pool
    dataset: str
    base: str  # the baseline method
    target: str  # the artifact, for its make target (MAKE)
    ratio: str = "ratio"  # the column of propd's rate over the baseline's
    used: list = field(default_factory=list)
    missing: dict = field(default_factory=dict)

    def cell(self, name: str, batch: int, combo: tuple[bool, bool], what: str,
             aggregate: bool = True) -> tuple[dict, dict]:
        """(numbers, run ids) of the latest propd run with `combo` at `batch` over the baseline measured like it
        (else the latest baseline run at `batch`); an empty cell's reason goes under `name`."""
        run = cell(self.p, "propd", self.dataset, batch, combo)
        base = self.p.baseline(run, self.base) or cell(self.p, self.base, self.dataset, batch)
        self.used += [run, base]
        if run is None or base is None:
            gap = f"propd run with {what}" if run is None else f"{self.base} run"
            self.missing[name] = why_missing(self.p, self.dataset, self.target, f"{gap} at that batch size")
        ci = speed_ratio_interval(run, base, aggregate)
        numbers = {self.ratio: speed_ratio(run, base, aggregate) if run is not None and base is not None else None,
                   **interval_columns(self.ratio, ci),
                   "propd_tok_s": aggregate_rate(run) if run else None,
                   **interval_columns("propd_tok_s", aggregate_rate_interval(run.records) if run else None),
                   f"{self.base}_tok_s": aggregate_rate(base) if base else None,
                   **interval_columns(f"{self.base}_tok_s", aggregate_rate_interval(base.records) if base else None),
                   "propd_mat": mat(run.records) if run else None,
                   **interval_columns("propd_mat", mat_interval(run.records) if run else None),
                   "prune_rate": prune_rate(run) if run else None,
                   "draft_nodes_mean": draft_nodes_mean(run) if run else None}
        return numbers, {"propd_run_id": run.run_id if run else None,
                         f"{self.base}_run_id": base.run_id if base else None}

    def frame(self, rows: list[dict], keys: tuple[str, ...]) -> pd.DataFrame:
        """The rows, every column but `keys` and the run ids as floats (None -> NaN: empty CSV cells), and what
        the footer says in attrs."""
        df = pd.DataFrame(rows)
        numeric = [c for c in df.columns if c not in keys and not c.endswith("_run_id")]
        df[numeric] = df[numeric].astype(float)
        df.attrs.update(context(self.p, self.used, missing=self.missing, dataset=self.dataset))
        return df


def setting_text(runs: Iterable[Run | None]) -> str:
    """The propd settings of the runs used (prune layer and top-k when pruning, the tree), once each."""
    seen = []
    for r in runs:
        if r is None or r.method != "propd":
            continue
        ms, (prune, dynamic) = r.settings, switches(r) or (None, None)
        prune_text = f"layer {ms.get('prune_layer', '?')} top-{ms.get('prune_topk', '?')}" if prune else "no pruning"
        tree = f"tree sizes {ms.get('tree_size_choices', '?')}" if dynamic else f"static tree {ms.get('tree', '?')}"
        seen.append(f"{prune_text}, {tree}")
    return "; ".join(dict.fromkeys(seen)) or "—"


def rows_together(run: Run) -> int:
    """The most rows the run decoded together: its batch size, unless it had fewer questions."""
    return max((r["batch"]["size"] for r in run.records if r.get("batch")), default=1)


def short_batches(runs: Iterable[Run | None]) -> list[str]:
    """One note per (batch size, rows) of runs whose batches never filled (fewer questions than rows)."""
    short: dict[tuple[int, int], int] = {}
    for r in {r.run_id: r for r in runs if r is not None}.values():
        if rows_together(r) < r.batch_size:
            key = (r.batch_size, rows_together(r))
            short[key] = short.get(key, 0) + 1
    return [f"{n} run(s) at batch {b} decoded at most {k} rows together (fewer questions than rows)"
            for (b, k), n in sorted(short.items())]


def paper_csv(name: str) -> pd.DataFrame:
    return pd.read_csv(PAPER_DIR / name)


def why_missing(p: Pool, dataset: str, target: str, what: str) -> str:
    """Why a cell of ours is empty: no runs on the dataset at all, or no `what` (e.g. "ar run at that batch size").
    Cells with the same reason share one footnote."""
    if not any(r.dataset == dataset for r in p.runs):
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
