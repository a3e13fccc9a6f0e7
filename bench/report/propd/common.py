"""What ProPD's reports share: a run's switches, an artifact's runs and cells, a cell's numbers, the footer and texts.
Rates are aggregate (all new tokens / all timed wall time, the batch's at batch > 1), the paper's tokens/s."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pandas as pd

from bench.metrics import aggregate_rate_interval, mat, mat_interval, tokens_per_s
from bench.report.claims import per_question, speed_ratios
from bench.report.declare import option
from bench.report.output import Report
from bench.report.propd import PAPER
from bench.report.select import RunSet, footer
from bench.report.tables import interval_columns, markdown, measure, render
from bench.run.store import Run

LABELS = {"ar": "AR", "bpd": "BPD", "medusa": "Medusa", "propd": "ProPD"}  # the paper's names
METHODS = tuple(LABELS)
BATCHES = (1, 2, 4, 8, 16)
DATASETS = {"mt_bench": "MT-Bench", "chatgpt_prompts": "ChatGPT Prompts", "alpaca": "Alpaca"}
# Why a dataset may have no runs at all, said under the cell instead of a bare "no run".
DATASET_NOTES = {"chatgpt_prompts": "not loadable offline (no copy in the data mirror or data/cache/; the hub "
                                    "is needed), so its runs fail here"}
# (prune, dynamic) -> the row names of the paper's Table 3 and the variants conf/experiment/propd/ gives them.
COMBOS = {(False, False): "neither", (True, False): "pruning only", (False, True): "dynamic only",
          (True, True): "both"}
BOTH = (True, True)  # ProPD as the paper runs it: both techniques on
VARIANTS = {"ablation-none": (False, False), "ablation-prune": (True, False), "ablation-dynamic": (False, True),
            "ablation-both": (True, True)}
PRUNE_VARIANT = re.compile(r"prune-L(\d+)-k(\d+)")
MODEL_LABELS = {"smollm2-135m": "SmolLM2-135M (embedded)"}
DATASET = option("--dataset", help="the runs' dataset (default mt_bench, as the paper's main set)")
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
    variant = run.variant or ""  # Table 2's sweep (prune-L<n>-k<k>): pruning at a fixed tree
    return VARIANTS.get(variant, (True, False) if PRUNE_VARIANT.fullmatch(variant) else None)


def prune_point(run: Run) -> tuple[int, int] | None:
    """(prune_layer, prune_topk) of a pruning propd run, from method_settings, else from its variant."""
    ms = run.settings
    if ms.get("prune_layer") is not None and ms.get("prune_topk") is not None:
        return int(ms["prune_layer"]), int(ms["prune_topk"])
    m = PRUNE_VARIANT.fullmatch(run.variant or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def aggregate_rate(records: list[dict]) -> float | None:
    """All new tokens / all timed wall time (the batch's at batch > 1)."""
    return tokens_per_s(records)["total"]


def nodes(run: Run) -> dict:
    """question -> [drafted, verified] nodes over its verification steps (of the records that recorded them)."""
    return per_question([r for r in run.records if r.get("draft_nodes") is not None], lambda r: sum(r["draft_nodes"]),
                        lambda r: sum(r.get("verified_nodes", r["draft_nodes"])))


def prune_rate(run: Run) -> float | None:
    """1 - verified / drafted nodes, pooled over steps; else the summary's `prune_rate`."""
    counts = nodes(run).values()
    drafted = sum(d for d, _ in counts)
    return 1 - sum(v for _, v in counts) / drafted if drafted > 0 else run.summary.get("prune_rate")


def draft_nodes_mean(run: Run) -> float | None:
    """Mean nodes drafted per verification step (root excluded); else the summary's `draft_nodes_mean`."""
    steps = [n for r in run.records for n in (r.get("draft_nodes") or [])]
    return sum(steps) / len(steps) if steps else run.summary.get("draft_nodes_mean")


def pin(runs: RunSet, name: str, relevant: Callable[[Run], bool], model: str | None = None) -> Cells:
    """Artifact `name`'s ProPD-family runs (METHODS, greedy), anchored on the latest relevant run of its own sweep
    (experiment propd_<name>), else of any ProPD experiment, never another paper's; the model is the anchor's."""
    runs, experiment = runs.where(method=METHODS, greedy=True), f"propd_{name}"
    if any(relevant(r) and r.experiment == experiment for r in runs.runs):
        own = lambda r: r.experiment == experiment
    else:
        own = lambda r: str(r.experiment or "").startswith("propd")
    anchor = runs.latest(lambda r: relevant(r) and own(r) and model in (None, r.model))
    return Cells(runs.pin(relevant, model=model or (anchor.model if anchor else None), own=own), name)


def cell(p: RunSet, method: str, dataset: str, batch: int, combo: tuple[bool, bool] | None = None,
         where: Callable[[Run], bool] | None = None) -> Run | None:
    """The latest run of `method` (propd: with these switches; others: default variant) on `dataset` at `batch`,
    else None. Without `where`, Table 2's sweep (variants prune-L<n>-k<k>) is left out."""
    return p.latest(lambda r: r.method == method and r.dataset == dataset and r.batch_size == batch
                    and (where(r) if where else not PRUNE_VARIANT.fullmatch(r.variant or ""))
                    and (switches(r) == combo if method == "propd" else not r.variant))


@dataclass
class Cells:
    """One artifact's pinned runs and what its footer says of its cells: the runs used and why a cell is empty."""

    p: RunSet
    name: str  # the artifact: its make target is named with an empty cell's reason
    used: list = field(default_factory=list)
    missing: dict = field(default_factory=dict)  # cell -> reason

    def take(self, run: Run | None) -> Run | None:
        self.used.append(run)
        return run

    def gap(self, name: str, dataset: str, what: str) -> None:
        """Cell `name` is empty: no runs on the dataset at all, or no `what` there."""
        if any(r.dataset == dataset for r in self.p.runs):
            self.missing[name] = f"no {what} on {dataset} ({PAPER.make(self.name)})"
        elif note := DATASET_NOTES.get(dataset):
            self.missing[name] = f"no runs on {dataset}: {note}"
        else:
            self.missing[name] = f"no runs on {dataset} ({PAPER.make(self.name)})"

    def frame(self, rows: list[dict], keys: tuple[str, ...], **extra) -> pd.DataFrame:
        """The rows, every column but `keys` and the run ids as floats (None -> NaN: empty CSV cells); its attrs what
        the texts say besides the numbers, as plain values (pandas deep-copies attrs: no runs there)."""
        df, p = pd.DataFrame(rows), self.p
        numeric = [c for c in df.columns if c not in keys and not c.endswith("run_id")]
        df[numeric] = df[numeric].astype(float)
        df.attrs.update(model=p.model, label=model_label(p.model), machine=p.machine, max_new_tokens=p.max_new_tokens,
                        settings=setting_text(self.used), missing=self.missing, **extra)
        return df

    def footer(self, lines: list[str], notes: list[str] = ()) -> list[str]:
        """select.footer with ProPD's "Ours:" line, `lines`, the paper's setup and why cells are empty (one line per
        reason); notes: runs left out, batches that never filled, then `notes`."""
        p, reasons = self.p, {}
        for name, reason in self.missing.items():  # cells with the same reason share one line, in table order
            reasons.setdefault(reason, []).append(name)
        ours = (f"Ours: {model_label(p.model)} ({p.model}), machine {p.machine or '—'}, max_new_tokens "
                f"{p.max_new_tokens or '—'}.")
        empty = [f"— {', '.join(names)}: {reason}." for reason, names in reasons.items()]
        return footer(ours, self.used, [*lines, PAPER_SETUP, *empty], [*p.notes, *short_batches(self.used), *notes])


@dataclass
class Against:
    """ProPD's runs over a baseline method's (ar: Table 1, medusa: Table 3), one cell at a time."""

    cells: Cells
    dataset: str
    base: str  # the baseline method
    ratio: str = "ratio"  # the column of propd's rate over the baseline's

    def cell(self, name: str, batch: int, combo: tuple[bool, bool], what: str,
             aggregate: bool = True) -> tuple[dict, dict]:
        """(numbers, run ids) of the latest propd run with `combo` at `batch` over the baseline measured like it
        (else the latest baseline run at `batch`)."""
        c = self.cells
        run = c.take(cell(c.p, "propd", self.dataset, batch, combo))
        base = c.take(c.p.baseline(run, self.base) or cell(c.p, self.base, self.dataset, batch))
        if run is None or base is None:
            gap = f"propd run with {what}" if run is None else f"{self.base} run"
            c.gap(name, self.dataset, f"{gap} at that batch size")
        ratio, interval = speed_ratios(run, base, aggregate)
        numbers = {self.ratio: ratio, **interval_columns(self.ratio, interval),
                   **measure("propd_tok_s", run, aggregate_rate, aggregate_rate_interval),
                   **measure(f"{self.base}_tok_s", base, aggregate_rate, aggregate_rate_interval),
                   **measure("propd_mat", run, mat, mat_interval),
                   "prune_rate": prune_rate(run) if run else None,
                   "draft_nodes_mean": draft_nodes_mean(run) if run else None}
        return numbers, {"propd_run_id": run.run_id if run else None,
                         f"{self.base}_run_id": base.run_id if base else None}


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


def short_batches(runs: Iterable[Run | None]) -> list[str]:
    """One note per (batch size, rows) of runs whose batches never filled."""
    most = {r.run_id: (r.batch_size, max((x["batch"]["size"] for x in r.records if x.get("batch")), default=1))
            for r in runs if r is not None}  # each run once: (its batch size, the most rows it decoded together)
    short = Counter((b, k) for b, k in most.values() if k < b)
    return [f"{n} run(s) at batch {b} decoded at most {k} rows together (fewer questions than rows)"
            for (b, k), n in sorted(short.items())]


def sections_texts(parts: list[tuple[str, pd.DataFrame]], caption: str, foot: list[str]) -> dict[str, str]:
    """md and tex of a report made of several captioned tables (each display frame of string cells)."""
    md = "\n\n".join([caption, *(markdown(df, title, [], numparse=False).strip() for title, df in parts),
                      "\n".join(foot)]) + "\n"
    tex = "\n".join(render(df, title, [], df, ("tex",))["tex"] for title, df in parts)
    return {"md": md, "tex": tex}


def table(name: str, display: pd.DataFrame, caption: str, foot: list[str], data: pd.DataFrame,
          figure=None) -> Report:
    """tables/propd_<name>.{md,csv,tex} (tables.render, the markdown's cells kept as written: "1.80", not "1.8"; "—"
    beside numbers); with a figure, in figures/ beside its png."""
    texts = {**render(display, caption, foot, data), "md": markdown(display, caption, foot, numparse=False)}
    if figure is None:
        return Report.tables(f"propd_{name}", texts)
    shown = Report.tables(f"propd_{name}", texts, "figures")
    return Report({f"figures/propd_{name}.png": figure, **shown.files}, show=shown.show)
