"""What the Post-use & Pre-cut reports share: their runs (experiment `holistic`, greedy, batch 1, one drafter on
every dataset), a run's ladder level, the numbers a run is reduced to and the declarations' helper."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from bench import metrics
from bench.report.declare import Artifact, option
from bench.report.drafter import describe, drafter
from bench.report.output import Report
from bench.report.select import MissingRunsError, RunSet, footer
from bench.report.tables import MISSING, interval_columns, paired_cells, render
from bench.run.store import Run

EXPERIMENT = "holistic"
# (reuse_draft, reuse_target, precut) -> the Table 3 level, in ladder order
LEVELS = {(False, False, False): "sd", (True, False, False): "reuse_draft", (True, True, False): "reuse_target",
          (True, True, True): "precut"}
DATASET = option("--dataset", help="the runs' dataset (default humaneval, as the paper's ablation)")


def make(artifact: Artifact) -> str:
    return f"make {artifact.recipes[0].target}"


def table(artifact: Artifact, p: RunSet, used: list, caption: str, lines: list[str], display: pd.DataFrame,
          df: pd.DataFrame, why: str = "no run") -> Report:
    """tables/holistic_<name>.{md,csv,tex}: the footer ("Ours:", runs, notes), `lines`, then what "—" means."""
    foot = [*footer(ours(p), used, notes=p.notes), *lines, f"{MISSING}: {why} ({make(artifact)})."]
    return Report.tables(f"holistic_{artifact.name}", render(display, caption, foot, df))


def speedup_grid(df: pd.DataFrame, head: str, rows: tuple[str, dict], columns: tuple[str, dict]) -> pd.DataFrame:
    """Speedup cells "ours [low, high] (paper)" under AR's 1.00; rows, columns: (df's column, value -> label)."""
    (row_col, row_labels), (col_col, col_labels) = rows, columns
    cells = pd.Series(paired_cells(df, "speedup", "paper_speedup"), index=[df[row_col], df[col_col]])
    return pd.DataFrame([{head: "Auto-regressive", **dict.fromkeys(col_labels.values(), "1.00 (1.00)")},
                         *({head: label, **{name: cells[row, c] for c, name in col_labels.items()}}
                           for row, label in row_labels.items())])


def points(claim: str) -> str:
    """A point-based claim text's numbers, without its reading (verdicts come from intervals only)."""
    return claim.split(" (", 1)[1].rstrip(")") if " (" in claim else claim


def level(run: Run) -> str | None:
    """The ladder level of a holistic run from its switches; None for other methods or unlisted combinations."""
    if run.method != "holistic" or frozen(run):  # frozen: Figure 4's Q_init curve, not a Table 3 level
        return None
    s = run.settings
    return LEVELS.get((bool(s.get("reuse_draft")), bool(s.get("reuse_target")), bool(s.get("precut"))))


def in_ladder(run: Run) -> bool:
    """A run of the ladder's sweep (Table 3's experiment, Figure 5's and Table 9's): its variant names its level."""
    return run.method == "holistic" and run.variant in LEVELS.values()


def full_method(run: Run) -> bool:
    """A run of Tables 1 and 10's sweeps: the full method at its defaults, no variant."""
    return run.method == "holistic" and run.variant is None


def frozen(run: Run) -> bool:
    """A Pre-cut run whose Q-table stopped learning after warm-up (Figure 4's Q_init)."""
    return bool((run.settings.get("controller") or {}).get("freeze_after_warmup"))


def draft_length(run: Run) -> int | None:
    value = run.settings.get("draft_length")
    return None if value is None else int(value)


# The runs a ladder compares (RunSet.where's keywords): greedy, batch 1, of experiment `holistic`.
MEASURED = {"experiment": EXPERIMENT, "greedy": True, "batch_size": 1}


def ladder(runs: RunSet, dataset: str, artifact: Artifact, model: str | None = None, draft: str | None = None,
           synced: bool = False, own: Callable[[Run], bool] = in_ladder) -> RunSet:
    """The runs one artifact compares on `dataset`, of the drafter it shows (RunSet.drafter_of); none:
    MissingRunsError. Runs timed per phase (Table 9's) only with `synced`: on a GPU their syncs cost time the
    paper's and AR's runs do not pay. `own`: the artifact's own sweep, whose latest run anchors the machine label,
    length and draft build (every Post-use & Pre-cut run has experiment `holistic`, so a run's variant tells the
    sweeps apart): the ladder's (`in_ladder`) or the full method's (`full_method`, Tables 1 and 10)."""
    draft = runs.where(**MEASURED).drafter_of(model, draft)
    mine = runs.where(**MEASURED, dataset=dataset, keep=lambda r: synced or not r.sync_phases)
    if draft is not None:  # a dataset without the drafter's runs is missing, not another drafter's
        mine = mine.where(keep=lambda r: drafter(r) in (None, draft))
    p = mine.pin(lambda r: r.method == "holistic", model=model, draft=draft, dataset=dataset, own=own)
    if not p.runs:
        what = f" with draft {draft}" if draft is not None else ""
        raise MissingRunsError(f"no holistic runs on {dataset}{what} in {runs.folder} ({make(artifact)})")
    return p


def ladders(runs: RunSet, datasets: tuple[str, ...], artifact: Artifact, model: str | None,
            draft: str | None, own: Callable[[Run], bool] = in_ladder) -> tuple[dict[str, RunSet], list[str]]:
    """ladder on each dataset, of one drafter: the runs of each that has them, a "Missing: ..." line per other."""
    draft = runs.where(**MEASURED).drafter_of(model, draft)
    found, errors = {}, []
    for ds in datasets:
        try:
            found[ds] = ladder(runs, ds, artifact, model, draft, own=own)
        except MissingRunsError as e:
            errors.append(f"Missing: {e}.")
    return found, errors


def ours(p: RunSet) -> str:
    return (f"Ours: {p.model}, draft: {describe(p.drafter)}, machine {p.machine or '—'}, max_new_tokens "
            f"{p.max_new_tokens or '—'}, {p.dataset}.")


def rung(lvl: str, length: int) -> Callable[[Run], bool]:
    """The ladder run of a level at a draft length (RunSet.paired's keep: with its AR baseline)."""
    return lambda r: level(r) == lvl and draft_length(r) == length


def draft_lengths(p: RunSet, lvl: str) -> list[int]:
    return sorted({draft_length(r) for r in p.runs if level(r) == lvl})


def verifications(records: list[dict]) -> int:
    """Verification steps of a run's records: one draft_calls counter entry each (the prefill has none)."""
    return sum(len(r.get("counters", {}).get("draft_calls", [])) for r in records)


def counted(name: str) -> Callable[[dict], int]:
    """A record's total of counter `name`, as a function of the record."""
    return lambda r: sum((r.get("counters") or {}).get(name) or [])


def numbers(run: Run | None, base: Run | None) -> dict:
    """tok/s, speedup vs AR, MAT, both utilisations, hit rates and draft length of one run (None when absent)."""
    keys = ("tok_s", "speedup", "mat", "util_eq3", "util_accepted", "draft_tokens_mean", "draft_calls_mean",
            "draft_hit_rate", "target_hit_rate", *(f"{m}_{e}" for m in ("tok_s", "speedup", "mat") for e in ("lo", "hi")))
    if run is None:
        return dict.fromkeys(keys)
    c = metrics.counter_totals(run.records)
    steps = verifications(run.records)
    new = sum(r["new_tokens"] for r in run.records)

    def ratio(a: str, b: str) -> float | None:
        return c[a] / c[b] if c.get(b) and a in c else None

    return {"tok_s": metrics.tokens_per_s(run.records)["mean_of_questions"],
            "speedup": metrics.speedup(run.records, base.records) if base else None, "mat": metrics.mat(run.records),
            "util_eq3": new / c["draft_calls"] if c.get("draft_calls") else None,
            "util_accepted": ratio("accepted_draft", "draft_tokens"),
            "draft_tokens_mean": c["draft_tokens"] / steps if steps else None,
            "draft_calls_mean": c["draft_calls"] / steps if steps else None,
            "draft_hit_rate": ratio("draft_hits", "draft_fetches"),
            "target_hit_rate": ratio("target_hits", "target_fetches"),
            # 95% bootstrap intervals over questions (paired with AR for the speedup)
            **interval_columns("tok_s", metrics.rate_interval(run.records)),
            **interval_columns("mat", metrics.mat_interval(run.records)),
            **interval_columns("speedup", metrics.speedup_interval(run.records, base.records) if base else None)}


def assisted_note(draft: str | None) -> list[str]:
    """Why the Assisted row has no run when the drafter is an EAGLE head (not a draft language model)."""
    if not str(draft or "").startswith("eagle:"):
        return []
    return [("Assisted: transformers' assisted generation needs a draft language model; with the EAGLE head as the "
             "drafter it cannot run (its row is measured with the distilled draft: make draft, without DRAFT=eagle).")]
