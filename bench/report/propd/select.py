"""Which runs ProPD's reports use, and how one run is reduced to the numbers they print.

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

from bench.errors import HarnessError
from bench.run.metrics import aggregate_speedup, speedup, tokens_per_s
from bench.run.store import Run, load_runs, paired_baseline

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


class MissingRunsError(HarnessError, ValueError):
    """Nothing at all to show for a figure (no runs, no measurement files)."""


def model_label(model: str | None) -> str:
    return MODEL_LABELS.get(model or "", str(model))


def settings(run: Run) -> dict:
    return run.meta.get("method_settings") or {}


def switches(run: Run) -> tuple[bool, bool] | None:
    """(prune, dynamic) of a propd run; None for other methods or a propd run that says neither."""
    if run.meta.get("method") != "propd":
        return None
    ms = settings(run)
    if isinstance(ms.get("prune"), bool) and isinstance(ms.get("dynamic"), bool):
        return ms["prune"], ms["dynamic"]
    variant = run.meta.get("variant") or ""
    if variant in VARIANTS:
        return VARIANTS[variant]
    if PRUNE_VARIANT.fullmatch(variant):  # Table 2's sweep: pruning at a fixed tree
        return True, False
    return None


def prune_point(run: Run) -> tuple[int, int] | None:
    """(prune_layer, prune_topk) of a pruning propd run, from method_settings, else from its variant."""
    ms = settings(run)
    if ms.get("prune_layer") is not None and ms.get("prune_topk") is not None:
        return int(ms["prune_layer"]), int(ms["prune_topk"])
    m = PRUNE_VARIANT.fullmatch(run.meta.get("variant") or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def aggregate_rate(run: Run) -> float | None:
    """All new tokens / all timed wall time (the batch's at batch > 1)."""
    return tokens_per_s(run.records)["total"]


def speed_ratio(run: Run | None, base: Run | None, aggregate: bool = True) -> float | None:
    """run over base on the questions of both: aggregate rates, or mean per-question rates (Spec-Bench's)."""
    if run is None or base is None:
        return None
    return (aggregate_speedup if aggregate else speedup)(run.records, base.records)


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
    return (run.meta.get("summary") or {}).get("prune_rate")


def draft_nodes_mean(run: Run) -> float | None:
    """Mean nodes drafted per verification step (root excluded); else the summary's `draft_nodes_mean`."""
    steps = [n for r in run.records for n in (r.get("draft_nodes") or [])]
    if steps:
        return sum(steps) / len(steps)
    return (run.meta.get("summary") or {}).get("draft_nodes_mean")


@dataclass
class Pool:
    """The runs one artifact compares: one model, one machine label, one max_new_tokens, greedy."""

    runs: list[Run]
    model: str | None
    machine: str | None = None
    max_new_tokens: int | None = None
    notes: list[str] = field(default_factory=list)

    def latest(self, method: str, dataset: str, batch: int, combo: tuple[bool, bool] | None = None,
               where: Callable[[Run], bool] | None = None) -> Run | None:
        """The latest run of `method` (propd: with these switches; others: default variant) on `dataset` at
        `batch`; None if there is none. Without `where`, Table 2's sweep (variants prune-L<n>-k<k>) is left out:
        its pruning-only runs at other layers and top-k are not the ablation's."""
        found = [r for r in self.runs if r.meta.get("method") == method and r.meta.get("dataset") == dataset
                 and r.batch_size == batch
                 and (where(r) if where else not PRUNE_VARIANT.fullmatch(r.meta.get("variant") or ""))
                 and (switches(r) == combo if method == "propd" else not r.meta.get("variant"))]
        return found[-1] if found else None

    def baseline(self, run: Run | None, method: str) -> Run | None:
        """The latest default-variant `method` run measured like `run` (bench.run.store.paired_baseline)."""
        return paired_baseline(self.runs, run, method) if run is not None else None


def pool(results_dir: str | Path, model: str | None, relevant: Callable[[Run], bool],
         experiment: str | None = None) -> Pool:
    """The ProPD-family runs of `model` (default: the most recent relevant run's) on the most recent relevant
    run's machine and max_new_tokens; that run is the latest of `experiment` (the artifact's own sweep) when it
    has one, so another table's later runs of other lengths do not replace it. A note counts the relevant runs of
    other machines or lengths left out."""
    runs = [r for r in load_runs(results_dir) if r.meta.get("method") in METHODS and r.temperature == 0.0]
    mine = [r for r in runs if relevant(r) and (model is None or r.meta.get("model") == model)]
    if not mine:
        return Pool([], model)
    own = [r for r in mine if experiment is not None and r.meta.get("experiment") == experiment]
    last = (own or mine)[-1].meta
    model = last.get("model")
    key = (last.get("machine"), last.get("max_new_tokens"))
    same = [r for r in runs if r.meta.get("model") == model
            and (r.meta.get("machine"), r.meta.get("max_new_tokens")) == key]
    dropped = sum(1 for r in mine if (r.meta.get("machine"), r.meta.get("max_new_tokens")) != key)
    notes = [(f"{dropped} run(s) of other machines or max_new_tokens left out (compared: machine {key[0]}, "
             f"max_new_tokens {key[1]})")] if dropped else []
    return Pool(same, model, key[0], key[1], notes)


def used_ids(runs: Iterable[Run | None]) -> list[str]:
    """Run ids, once each, in order (the footer's "Runs:" line, which REPRODUCED.md reads)."""
    return list(dict.fromkeys(r.run_id for r in runs if r is not None))


def setting_text(runs: Iterable[Run | None]) -> str:
    """The propd settings of the runs used (prune layer and top-k when pruning, the tree), once each."""
    seen = []
    for r in runs:
        if r is None or r.meta.get("method") != "propd":
            continue
        ms, (prune, dynamic) = settings(r), switches(r) or (None, None)
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
