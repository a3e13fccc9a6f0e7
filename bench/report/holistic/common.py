"""Which runs the Post-use & Pre-cut reports use, the numbers one run is reduced to, and the pieces of their
declarations.

Runs: experiment `holistic` (conf/experiment/holistic/), greedy, batch 1, pinned per dataset by the one rule
(bench.report.select.RunSet.pin): one model, the machine label and max_new_tokens of the most recent holistic run,
and one drafter (the distilled draft or the EAGLE head, bench.report.drafter: --draft, default the drafter of the
most recent draft-model run), the same on every dataset of an artifact, AR runs being every drafter's baseline. A
holistic run's ladder level is read from its switches (`method_settings`), so a hand-run holistic counts wherever
its switches put it; the latest run per (dataset, level, draft length) is used. Speedups are recomputed from
records against the AR run measured like it (RunSet.baseline): the mean per-question tok/s ratio, Spec-Bench's
and the run summary's.

Utilisation, both of the paper's definitions, from the counters the proposer keeps per step:
- util_eq3 = new tokens / draft-model calls (Eq. 3: L / #M_d calls; above 1 when a step commits more tokens than
  it called the draft, e.g. with reuse at the draft);
- util_accepted = accepted draft tokens / drafted tokens (Table 5's "accepted/generated"; Table 4's percentages
  are this: 8.18 / 12 = 68.2% for its lambda-12 Speculative row).
Hit rates: at the draft, the share of phrase-carrying draft forwards that reused a phrase; at the target, the share
of verifications with phrases attached whose output a phrase extended.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.drafter import describe, drafter
from bench.report.registry import Artifact, Recipe, Shown, option
from bench.report.select import MissingRunsError, RunSet
from bench.report.tables import interval_columns
from bench.run.metrics import (
    counter_totals,
    mat,
    mat_interval,
    rate_interval,
    speedup,
    speedup_interval,
    tokens_per_s,
)
from bench.run.store import Run

EXPERIMENT = "holistic"
# (reuse_draft, reuse_target, precut) -> the Table 3 level, in ladder order
LEVELS = {(False, False, False): "sd", (True, False, False): "reuse_draft", (True, True, False): "reuse_target",
          (True, True, True): "precut"}

# The declarations' shared pieces (each artifact is declared at the bottom of its module)
MODEL = {"common": ("model", "draft")}  # --draft: one drafter's runs (bench/report/drafter.py)
DATASET = option("--dataset", help="the runs' dataset (default humaneval, as the paper's ablation)")
RUN = "$(PY) -m bench.run $(SWEEP) experiment=holistic/{} $(HOLISTIC_ARGS)"
AR = "$(PY) -m bench.run $(SWEEP) experiment=holistic/ar dataset={} $(HOLISTIC_ARGS)"
REPORT = "$(PY) -m bench.report holistic/{} --model $(MODEL)"


def recipe(name: str, help: str, *steps: str) -> Recipe:
    return Recipe(f"reproduce-holistic-{name}", help, (*steps, REPORT.format(name)))


def shown(name: str, limit: str = " LIMIT=5") -> tuple[Shown]:
    return (Shown(f"make reproduce-holistic-{name}{limit}"),)


def make(artifact: Artifact) -> str:
    """The command that produces an artifact's runs (its first recipe), as messages name it."""
    return f"make {artifact.recipes[0].target}"


def paper_table(name: str) -> pd.DataFrame:
    """One of the paper's tables as published (paper_tables/)."""
    return pd.read_csv(Path(__file__).with_name("paper_tables") / name)


def level(run: Run) -> str | None:
    """The ladder level of a holistic run from its switches; None for other methods or unlisted combinations."""
    if run.method != "holistic":
        return None
    s = run.settings
    if frozen(run):  # Figure 4's Q_init curve, not a Table 3 level
        return None
    return LEVELS.get((bool(s.get("reuse_draft")), bool(s.get("reuse_target")), bool(s.get("precut"))))


def frozen(run: Run) -> bool:
    """A Pre-cut run whose Q-table stopped learning after warm-up (controller.freeze_after_warmup)."""
    return bool((run.settings.get("controller") or {}).get("freeze_after_warmup"))


def draft_length(run: Run) -> int | None:
    value = run.settings.get("draft_length")
    return None if value is None else int(value)


def holistic(run: Run) -> bool:
    return run.method == "holistic"


def measured(runs: RunSet, synced: bool = False) -> RunSet:
    """The greedy batch-1 runs of experiment `holistic`; runs timed per phase (run.sync_phases, Table 9's) only
    with `synced`: a speed table never reads them, as on a GPU the syncs cost time the paper's and AR's runs do
    not pay."""
    return runs.where(experiment=EXPERIMENT, greedy=True, batch_size=1, keep=lambda r: synced or not r.sync_phases)


def shown_drafter(runs: RunSet, model: str | None, draft: str | None) -> str | None:
    """The drafter an artifact shows on every dataset: `draft` (a full name or a source, "eagle"), else that of
    the most recent draft-model run of experiment `holistic` (timed per phase or not)."""
    return measured(runs, synced=True).pin(model=model, draft=draft, same=()).drafter


def ladder(runs: RunSet, dataset: str, make: str, model: str | None = None, draft: str | None = None,
           synced: bool = False) -> RunSet:
    """The runs one artifact compares on `dataset`, of shown_drafter's drafter; no holistic run of it:
    MissingRunsError naming `make` (an artifact of several datasets notes it and shows the others)."""
    draft = shown_drafter(runs, model, draft)
    mine = measured(runs, synced).where(dataset=dataset)
    if draft is not None:  # a dataset without the drafter's runs is missing, not another drafter's
        mine = mine.where(keep=lambda r: drafter(r) in (None, draft))
    p = mine.pin(holistic, model=model, draft=draft, dataset=dataset)
    if not p.runs:
        what = f" with draft {draft}" if draft is not None else ""
        raise MissingRunsError(f"no holistic runs on {dataset}{what} in {runs.folder} ({make})")
    return p


def ours(p: RunSet) -> str:
    """The footer's "Ours: ..." line of one dataset's runs."""
    return (f"Ours: {p.model}, draft: {describe(p.drafter)}, machine {p.machine or '—'}, max_new_tokens "
            f"{p.max_new_tokens or '—'}, {p.dataset}.")


def ladder_run(p: RunSet, lvl: str, length: int) -> Run | None:
    """The latest run of a ladder level at a draft length."""
    return p.latest(lambda r: level(r) == lvl and draft_length(r) == length)


def cell(p: RunSet, lvl: str, length: int) -> tuple[Run | None, Run | None]:
    """(the ladder run of a level at a draft length, its AR baseline); None for either one not run."""
    run = ladder_run(p, lvl, length)
    return run, p.baseline(run, "ar")


def draft_lengths(p: RunSet, lvl: str) -> list[int]:
    """The draft lengths a ladder level was run at."""
    return sorted({draft_length(r) for r in p.runs if level(r) == lvl})


def verifications(records: list[dict]) -> int:
    """Verification steps of a run's records: one draft_calls counter entry each (the prefill has none)."""
    return sum(len(r.get("counters", {}).get("draft_calls", [])) for r in records)


def numbers(run: Run | None, base: Run | None) -> dict:
    """tok/s, speedup vs AR, MAT, both utilisations, hit rates and draft length of one run (None when absent)."""
    keys = ("tok_s", "speedup", "mat", "util_eq3", "util_accepted", "draft_tokens_mean", "draft_calls_mean",
            "draft_hit_rate", "target_hit_rate", *(f"{m}_{e}" for m in ("tok_s", "speedup", "mat") for e in ("lo", "hi")))
    if run is None:
        return dict.fromkeys(keys)
    c = counter_totals(run.records)
    steps = verifications(run.records)
    new = sum(r["new_tokens"] for r in run.records)

    def ratio(a: str, b: str) -> float | None:
        return c[a] / c[b] if c.get(b) and a in c else None

    return {"tok_s": tokens_per_s(run.records)["mean_of_questions"],
            "speedup": speedup(run.records, base.records) if base else None, "mat": mat(run.records),
            "util_eq3": new / c["draft_calls"] if c.get("draft_calls") else None,
            "util_accepted": ratio("accepted_draft", "draft_tokens"),
            "draft_tokens_mean": c["draft_tokens"] / steps if steps else None,
            "draft_calls_mean": c["draft_calls"] / steps if steps else None,
            "draft_hit_rate": ratio("draft_hits", "draft_fetches"),
            "target_hit_rate": ratio("target_hits", "target_fetches"),
            # 95% bootstrap intervals over questions (paired with AR for the speedup)
            **interval_columns("tok_s", rate_interval(run.records)), **interval_columns("mat", mat_interval(run.records)),
            **interval_columns("speedup", speedup_interval(run.records, base.records) if base else None)}


def assisted_note(draft: str | None) -> list[str]:
    """Why the Assisted row has no run when the drafter is an EAGLE head: transformers' assisted generation takes a
    draft language model, and an EAGLE head is not one (it reads the target's features)."""
    if not str(draft or "").startswith("eagle:"):
        return []
    return [("Assisted: transformers' assisted generation needs a draft language model; with the EAGLE head as the "
             "drafter it cannot run (its row is measured with the distilled draft: make draft, without DRAFT=eagle).")]
