"""Which runs the Post-use & Pre-cut reports use (through bench.report.select), and the numbers one run is
reduced to.

Runs: experiment `holistic` (conf/experiment/holistic/), greedy, batch 1, of one model (default: that of the most
recent holistic run) and, per dataset, of the most recent holistic run's machine label and max_new_tokens, so every
ratio compares runs measured the same way; and of one drafter (the distilled draft or the EAGLE head,
bench.report.drafter: --draft, default the drafter of the most recent draft-model run), AR runs being every
drafter's baseline. A holistic run's ladder level is read from its switches
(`method_settings`), so a hand-run holistic counts wherever its switches put it; the latest run per (dataset, level,
draft length) is used. Speedups are recomputed from records against the AR run measured like it
(bench.report.select.paired_baseline): the mean per-question tok/s ratio, Spec-Bench's and the run summary's.

Utilisation, both of the paper's definitions, from the counters the proposer keeps per step:
- util_eq3 = new tokens / draft-model calls (Eq. 3: L / #M_d calls; above 1 when a step commits more tokens than
  it called the draft, e.g. with reuse at the draft);
- util_accepted = accepted draft tokens / drafted tokens (Table 5's "accepted/generated"; Table 4's percentages
  are this: 8.18 / 12 = 68.2% for its lambda-12 Speculative row).
Hit rates: at the draft, the share of phrase-carrying draft forwards that reused a phrase; at the target, the share
of verifications with phrases attached whose output a phrase extended.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bench.report.drafter import choose, describe, drafter, latest_drafter
from bench.report.select import MissingRunsError, Pool, pool, read_runs, used_ids
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
# (reuse_draft, reuse_target, precut) -> the Table 3 level; the paper's rows in its CSV, in ladder order.
LEVELS = {(False, False, False): "sd", (True, False, False): "reuse_draft", (True, True, False): "reuse_target",
          (True, True, True): "precut"}
LEVEL_NAMES = {"sd": "+ Speculative (sd)", "reuse_draft": "+ Ex-post reuse at M_d",
               "reuse_target": "+ Ex-post reuse at M_t", "precut": "+ Ex-ante reduction (Pre-cut)"}
PAPER_LEVELS = {"sd": "+speculative", "reuse_draft": "+expost_reuse_draft", "reuse_target": "+expost_reuse_target",
                "precut": "+exante_reduction"}
LAMBDAS = (3, 6, 9, 12, 18, 24)
MAKE = {name: f"make reproduce-holistic-{name}" for name in ("table1", "table3", "table4", "table9", "table10",
                                                                  "fig4", "fig5")}


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


def holistic_drafter(results_dir: str | Path, model: str | None, draft: str | None) -> str | None:
    """The drafter an artifact shows on every dataset: `draft` (a full name or a source, "eagle"), else the
    drafter of the most recent greedy batch-1 draft-model run of experiment `holistic` (of `model`, if given)."""
    runs = read_runs(results_dir, experiment=EXPERIMENT, greedy=True, batch_size=1, model=model)
    return choose(runs, draft)[1] if draft is not None else latest_drafter(runs)


def holistic_pool(results_dir: str | Path, model: str | None, dataset: str, make: str,
                  draft: str | None = None, synced: bool = False) -> Pool:
    """The greedy batch-1 runs of experiment `holistic` on `dataset` of one model and of the drafter `draft`
    (a full name, holistic_drafter's; None: any), measured like the most recent holistic run
    (bench.report.select.pool); no holistic run: MissingRunsError naming `make`. Runs timed per phase
    (run.sync_phases, Table 9's) only with `synced`: a speed table never reads them, as on a GPU the syncs cost
    time the paper's and AR's runs do not pay."""
    candidates = read_runs(results_dir, experiment=EXPERIMENT, dataset=dataset, greedy=True, batch_size=1,
                           model=model, keep=lambda r: synced or not r.sync_phases)
    if draft is not None:
        candidates = [r for r in candidates if drafter(r) in (None, draft)]
    p = pool(candidates, lambda r: r.method == "holistic", model, dataset=dataset)
    if not p.runs:
        what = f" with draft {draft}" if draft is not None else ""
        raise MissingRunsError(f"no holistic runs on {dataset}{what} in {results_dir} ({make})")
    return dataclasses.replace(p, draft=draft or latest_drafter(p.runs))


def ladder_run(p: Pool, lvl: str, length: int) -> Run | None:
    """The latest run of a ladder level at a draft length."""
    return p.latest(lambda r: level(r) == lvl and draft_length(r) == length)


def draft_lengths(p: Pool, lvl: str) -> list[int]:
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


def footer(p: Pool, used: list[Run | None]) -> list[str]:
    return [(f"Ours: {p.model}, draft: {describe(p.draft)}, machine {p.machine or '—'}, max_new_tokens "
             f"{p.max_new_tokens or '—'}, {p.dataset}."),
            "Runs: " + (", ".join(used_ids(used)) or "none") + "."]
