"""The tables of no paper: `runs`, `project` (the same on a cost profile) and `draft_sd`."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.cost.profiles import load_profile
from bench.cost.replay import host_cost, loops_priced, priced, replayed
from bench.errors import MissingRunsError
from bench.metrics import speedup, speedup_interval, summarize, tokens_per_s
from bench.report import tables
from bench.report.output import Report
from bench.report.phase_timing import exact_phases, unsynced_note
from bench.report.select import RunSet, footer, paired_baseline
from bench.report.tables import MISSING, fmt, lossless_text, markdown, with_interval
from bench.run.store import Run

FOOTER = ("MAT: tokens per target forward incl. the bonus token, pooled over steps; tok/s: mean of "
          "per-question rates; speedup: ratio of mean rates on the same questions, baseline at the same "
          "temperature T; overhead: share of "
          "wall time outside model forwards (— for HF generate, timed as one phase); lossless: "
          "prompt-turns token-identical to greedy AR (near-tie: a divergence within the dtype's rounding; "
          "docs/metrics.md). [low, high]: 95% bootstrap interval over questions (paired "
          "for speedups).")
PROJECTED = ("Projected: each prompt-turn's target forwards replayed on the profile at its recorded verified sizes "
             "and contexts (HF's own loop's forwards first priced at this machine's cost, fitted to the timed runs), "
             "its other time (drafting, tree, verification, updates, HF's loop) priced for the profile's host where "
             "its hardware entry has a host price (docs/cost_model.md), else as measured here; a projection of "
             "the acceptance measured on these runs, not a measurement. Speedup: ratio of mean per-question tokens/s "
             "over AR's, paired on the same questions; [low, high]: 95% bootstrap interval over questions.")
DRAFT_SD = "draft_sd_lambda"  # the experiment of the draft's sd table


def per_key(runs: RunSet, **labels) -> tuple[list[Run], dict[tuple, Run]]:
    """(the runs with these labels, the latest batch-1 run per Run.key); none: MissingRunsError."""
    mine = runs.where(**labels)
    if not (latest := mine.latest_per(lambda r: r.key, batch_size=1)):
        asked = [(k, v) for k, v in labels.items() if isinstance(v, str)]
        have = [f"{k} '{v}' not among the runs' ({', '.join(sorted({str(getattr(r, k)) for r in runs.runs}))})"
                for k, v in asked if runs.runs and all(getattr(r, k) != v for r in runs.runs)]
        why = f": {'; '.join(have)}" if have else ""
        raise MissingRunsError(f"no complete runs match under {Path(runs.folder, 'runs')}{why}")
    return mine.runs, latest


def speedups(records: list[dict], base: list[dict] | None) -> tuple:
    return (speedup(records, base), speedup_interval(records, base)) if base else (None, None)


def method_label(run: Run) -> str:
    return run.method + (f"[{run.variant}]" if run.variant else "")


def runs_table(runs: RunSet, model: str | None = None, paper_size: str | None = None,
               dataset: str | None = None, max_new_tokens: int | None = None) -> Report:
    """Latest run per method for one model and dataset: MAT, tok/s, speedups, overhead, losslessness."""
    mine, latest = per_key(runs, model=model, dataset=dataset, max_new_tokens=max_new_tokens)
    rows, unpaired = [], []
    for key, run in latest.items():
        s = summarize(run.records)
        speed = {}
        for m in ("hf_generate", "ar"):
            b = paired_baseline(mine, run, m)  # measured like it, or none: never another length or machine
            if b is None and (key[0], m, None, key[3], key[4]) in latest:  # one of its dataset and T, measured otherwise
                unpaired.append(f"{method_label(run)} vs {m}")
            speed[m] = speedups(run.records, b.records if b else None)
        rows.append({
            "model": run.model, "dataset": run.dataset, "method": method_label(run), "T": f"{run.temperature:g}",
            "turns": s["n_turns"], "MAT": with_interval(s["mat"], s["intervals"]["mat"]),
            "tok/s": with_interval(s["tokens_per_s"]["mean_of_questions"], s["intervals"]["tokens_per_s"]),
            "speedup vs hf_generate": with_interval(*speed["hf_generate"]),
            "speedup vs ar": with_interval(*speed["ar"]),
            "overhead": fmt(s["overhead_share"] if exact_phases(run) else None),  # withheld: unsynced GPU phases
            "lossless": lossless_text(s["lossless"]) or MISSING,
        })
    note = unsynced_note(latest.values())
    if unpaired:
        alike = (f"No baseline measured alike (temperature, batch size, machine, max_new_tokens): "
                 f"{', '.join(unpaired)}.")
        note = " ".join(filter(None, [note, alike]))
    foot = footer(FOOTER, latest.values(), [note] if note else [])
    return Report.tables("runs", {"md": markdown(pd.DataFrame(rows), None, foot)})


def project_table(runs: RunSet, profile: str, model: str | None = None, dataset: str | None = None,
                  max_new_tokens: int | None = None) -> Report:
    """The latest run per method, its speed here beside its speed replayed on `profile` (bench.cost.profiles)."""
    prof, host = load_profile(profile), host_cost(profile)
    mine, latest = per_key(runs, model=model, dataset=dataset, max_new_tokens=max_new_tokens)
    # HF's own loop has its forwards priced at this machine's cost (a baseline, AR, is timed: as it is)
    records = dict(zip([r.run_id for r in latest.values()], loops_priced([r.records for r in latest.values()])))

    def on_profile(run):
        return replayed(records.get(run.run_id, run.records), prof,
                        rest=priced(run.method, host, temperature=run.temperature, batch_size=run.batch_size,
                                    before_batched_drafting=run.before_batched_drafting) or True)

    rows, used = [], []
    for run in latest.values():
        ar = paired_baseline(mine, run, "ar")
        used += [run, ar]
        projected, base = on_profile(run), on_profile(ar) if ar else None
        rows.append({"model": run.model, "dataset": run.dataset, "method": method_label(run),
                     "T": f"{run.temperature:g}",
                     "tok/s here": f"{tokens_per_s(run.records)['mean_of_questions']:.1f}",
                     "speedup vs ar here": with_interval(*speedups(run.records, ar.records if ar else None)),
                     "tok/s projected": f"{tokens_per_s(projected)['mean_of_questions']:.1f}",
                     "speedup vs ar projected": with_interval(*speedups(projected, base))})
    caption = (f"Projected on {prof.name} ({prof.source}: {prof.model} on {prof.hardware}, {prof.dtype}), beside "
               f"the speed measured here. "
               + (f"The rest of each step priced for its host: {host.launch_us:g} µs a launch, host factor "
                  f"{host.host_factor:g} ({host.source})." if host else "The rest of each step as measured here."))
    return Report.tables("projection", {"md": markdown(pd.DataFrame(rows), caption, footer(PROJECTED, used),
                                                       numparse=False)})


def draft_sd_table(runs: RunSet, model: str | None = None) -> Report:
    """sd at draft length 4, 8, 12 beside AR, one row per (dataset, draft, draft length): the latest such run; the
    draft is named by its label (id, depth, V', report digest), so an older draft's runs stay as their own rows."""
    mine = runs.where(experiment=DRAFT_SD, method="sd", model=model)
    if not mine.runs:
        raise MissingRunsError(f"no sd runs of experiment {DRAFT_SD} in {runs.folder} (make reproduce-draft-sd)")
    latest = mine.latest_per(lambda r: (r.dataset, r.settings.get("draft_label") or r.settings.get("draft"),
                                        r.settings.get("draft_length"), r.temperature))
    rows = []
    def order(item):  # dataset, draft, then lambda as a number
        dataset, draft, length, temperature = item[0]
        return str(dataset), str(draft), float(temperature), int(length or 0)

    for (dataset, draft, length, temperature), r in sorted(latest.items(), key=order):
        s = r.summary
        # the intervals bench.run.runner stored with the run (bench.metrics); a run older than them has none
        ci = s.get("intervals") or {}
        vs_ar = (r.speedup or {}).get("vs_ar") or {}
        rows.append({"dataset": dataset, "draft": draft, "draft_vocab": r.settings.get("draft_vocab"),
                     "lambda": length, "T": temperature, "questions": s.get("n_questions"), "mat": s.get("mat"),
                     "tok_s": (s.get("tokens_per_s") or {}).get("mean_of_questions"),
                     "speedup_vs_ar": vs_ar.get("value"),
                     **tables.interval_columns("mat", ci.get("mat")),
                     **tables.interval_columns("tok_s", ci.get("tokens_per_s")),
                     **tables.interval_columns("speedup_vs_ar", vs_ar.get("interval")),
                     "lossless": lossless_text(s.get("lossless") or {"checked": 0}), "run": r.path.name})
    data = pd.DataFrame(rows)
    display = data.assign(mat=tables.ours_cells(data, "mat"), tok_s=tables.ours_cells(data, "tok_s"),
                          speedup_vs_ar=tables.ours_cells(data, "speedup_vs_ar"))
    display = display.drop(columns=["run", *(c for c in data.columns if c.endswith(("_lo", "_hi")))])
    caption = (f"sd with a trained draft at draft length lambda 4, 8, 12 ({model or 'all models'}); speedup: mean "
               "per-question tok/s over AR's on the same questions, machine and length.")
    foot = footer(("MAT: tokens per target forward incl. the bonus token. draft: id-depth-V'-report digest "
                   "(bench.models.loading.ModelBundle.draft_label). [low, high]: 95% bootstrap interval over "
                   "questions (paired with AR for the speedup), as stored with the run."), latest.values())
    return Report.tables("draft_sd", tables.render(display, caption, foot, data))
