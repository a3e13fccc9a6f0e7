"""What ProPD's reports share: a run's switches, an artifact's runs and cells, a cell's numbers, the footer and texts.
Rates are aggregate (all new tokens / all timed wall time, the batch's at batch > 1), the paper's tokens/s."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable

import pandas as pd

from bench.metrics import aggregate_rate_interval, mat, mat_interval, tokens_per_s
from bench.report.claims import per_question, speed_ratios
from bench.report.declare import option
from bench.report.output import Report
from bench.report.propd import PAPER
from bench.report.select import Cells, RunSet, footer
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


def cells(runs: RunSet, name: str, relevant: Callable[[Run], bool], model: str | None = None) -> Cells:
    """Artifact `name`'s cells over the ProPD-family runs (METHODS, greedy), pinned on its own sweep's latest
    relevant run, else any ProPD experiment's (RunSet.pin's family)."""
    pinned = runs.where(method=METHODS, greedy=True).pin(relevant, model=model, family="propd")
    return Cells(pinned, PAPER.make(name), DATASET_NOTES)


def fits(combo: tuple[bool, bool] | None = None, where: Callable[[Run], bool] | None = None) -> Callable[[Run], bool]:
    """A cell's run (RunSet.latest's keep): propd with these switches (combo), another method's default variant;
    Table 2's sweep (variants prune-L<n>-k<k>) only where `where` asks for it."""
    return lambda r: ((where(r) if where else not PRUNE_VARIANT.fullmatch(r.variant or ""))
                      and (switches(r) == combo if r.method == "propd" else not r.variant))


def frame(c: Cells, rows: list[dict], keys: tuple[str, ...], **extra) -> pd.DataFrame:
    """The rows, every column but `keys` and the run ids as floats (None -> NaN: empty CSV cells); its attrs what
    the texts say besides the numbers, as plain values (pandas deep-copies attrs: no runs there)."""
    df, p = pd.DataFrame(rows), c.p
    numeric = [col for col in df.columns if col not in keys and not col.endswith("run_id")]
    df[numeric] = df[numeric].astype(float)
    df.attrs.update(model=p.model, label=model_label(p.model), machine=p.machine, max_new_tokens=p.max_new_tokens,
                    settings=setting_text(c.used), missing=c.missing, **extra)
    return df


def propd_footer(c: Cells, lines: list[str], notes: list[str] = ()) -> list[str]:
    """select.footer with ProPD's "Ours:" line, `lines`, the paper's setup and why cells are empty (one line per
    reason); notes: runs left out, batches that never filled, then `notes`."""
    p = c.p
    ours = (f"Ours: {model_label(p.model)} ({p.model}), machine {p.machine or '—'}, max_new_tokens "
            f"{p.max_new_tokens or '—'}.")
    return footer(ours, c.used, [*lines, PAPER_SETUP, *c.empty()], [*p.notes, *short_batches(c.used), *notes])


def over(c: Cells, dataset: str, base: str, name: str, batch: int, combo: tuple[bool, bool], what: str,
         aggregate: bool = True, ratio: str = "ratio") -> tuple[dict, dict]:
    """(numbers, run ids) of cell `name`: the latest propd run with `combo` at `batch` over the `base` run measured
    like it (else the latest `base` run at `batch`): ar in Table 1, medusa in Table 3."""
    run = c.take(c.p.latest(fits(combo), method="propd", dataset=dataset, batch_size=batch))
    theirs = c.take(c.p.baseline(run, base) or c.p.latest(fits(), method=base, dataset=dataset, batch_size=batch))
    if run is None or theirs is None:
        gap = f"propd run with {what}" if run is None else f"{base} run"
        c.gap(name, dataset, f"{gap} at that batch size")
    value, interval = speed_ratios(run, theirs, aggregate)
    numbers = {ratio: value, **interval_columns(ratio, interval),
               **measure("propd_tok_s", run, aggregate_rate, aggregate_rate_interval),
               **measure(f"{base}_tok_s", theirs, aggregate_rate, aggregate_rate_interval),
               **measure("propd_mat", run, mat, mat_interval),
               "prune_rate": prune_rate(run) if run else None,
               "draft_nodes_mean": draft_nodes_mean(run) if run else None}
    return numbers, {"propd_run_id": run.run_id if run else None, f"{base}_run_id": theirs.run_id if theirs else None}


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
