"""DySpec Tables 1-4: latency per token, accepted tokens per step and speedup vs AR of DySpec, Sequoia and
SpecInfer, ours beside the paper's, from one drafter's runs (AR's are every drafter's baseline)."""

from __future__ import annotations

import json
from math import fsum

import pandas as pd

from bench.errors import HarnessError
from bench.metrics import mat, mat_interval, verdict
from bench.report.claims import overall, paired_ratio_interval, per_question, sums_interval
from bench.report.declare import Artifact, Cover, Recipe, Shown, option
from bench.report.drafter import describe
from bench.report.dyspec import PAPER
from bench.report.output import Report
from bench.report.select import RunSet, footer
from bench.report.steps import has_steps
from bench.report.tables import MISSING, listed, measure, paired_cells, render, with_interval
from bench.run.store import Run

PAPER_CSV = "dyspec_tables_latency_per_token.csv"
DATASETS = {"c4": "C4", "openwebtext": "OWT", "cnn_dailymail": "CNN"}  # ours -> the paper's name
TEMPERATURES = (0.0, 0.6)
METHODS = ("dyspec", "sequoia", "specinfer")  # paper column order: Ours, Sequoia, Specinfer
BASELINE = "ar"  # the paper's "Baseline" (autoregressive decoding)
LABELS = {"dyspec": "DySpec", "sequoia": "Sequoia", "specinfer": "SpecInfer", "ar": "AR"}
# Our model's paper_size -> the paper table whose target size matches (Table 3: 7B draft, 70B target).
TABLE_FOR_SIZE = {"7B": 1, "13B": 2, "70B": 3}
# The run.variant a table's method runs carry (conf/experiment/dyspec/table4.yaml: budget 768 as "b768"); the
# AR baseline has no budget, so it is always the no-variant run.
TABLE_VARIANTS = {4: "b768"}
PAPER_SETUP = {1: "one A100 40GB", 2: "one A100 40GB", 3: "one A100 40GB, target CPU-offloaded",
               4: "one A100 40GB, target CPU-offloaded"}
# The csv's numbers: each with `_paper` beside it, then their intervals (`_lo`, `_hi`), AR's last.
QUANTITIES = ["ar_latency_s", *(f"{m}_{k}" for m in METHODS for k in ("latency_s", "accepted", "speedup"))]
NUMERIC = [*(f"{c}{s}" for c in QUANTITIES for s in ("", "_paper")),
           *(f"{c}_{e}" for c in (*QUANTITIES[1:], QUANTITIES[0]) for e in ("lo", "hi"))]
DEFINITIONS = (
    "Cells: ours [95% bootstrap interval over questions; paired with AR for speedups] (paper); — = no run. "
    "Latency: total wall time / total new tokens over "
    "all prompts of the run, in ms per token (Sequoia's accounting: the target prefill is inside the timed "
    "region). Accepted: tokens committed per target forward, bonus token included, pooled over all steps "
    "(MAT); our prefill counts as one step of one token, while Sequoia's first verification step includes "
    "the target prefill, so ours is lower by about MAT/steps. Speedup: our AR latency / the method's latency "
    "on the prompts of both runs (same dataset and temperature); the paper's: its Baseline / its latency."
)
AR_NOTE = ("Sequoia's AR baseline (the paper's Baseline) times only 32 decoding steps per prompt "
           "(prefill as step 0) and reports time / steps; our AR runs the full max_new_tokens with the "
           "same engine, cache and dtype as the methods.")
DATA_NOTES = {
    "c4": "c4 from the data mirror is C4 en/train (first 1000 documents), not the en/validation shard "
          "Sequoia and DySpec evaluate on (only the hub fallback is validation)",
    "openwebtext": "openwebtext is the head of the hub copy stas/openwebtext-10k (train), not Sequoia's "
                   "pre-tokenized local copy",
    "cnn_dailymail": "cnn_dailymail from the mirror has 100 test articles, fewer than the rows Sequoia's "
                     "selection skips, so all 100 are used",
}


def latency_per_token(records: list[dict]) -> float | None:
    """Seconds per generated token: all wall time / all new tokens (Sequoia's total_time / tokens)."""
    tokens = sum(r["new_tokens"] for r in records)
    return fsum(r["wall_time"] for r in records) / tokens if tokens > 0 else None


def latency_speedup(records: list[dict], baseline: list[dict]) -> float | None:
    """Baseline latency / our latency, over the questions present in both runs."""
    common = {r["question_id"] for r in records} & {r["question_id"] for r in baseline}
    mine = latency_per_token([r for r in records if r["question_id"] in common])
    base = latency_per_token([r for r in baseline if r["question_id"] in common])
    return base / mine if mine and base is not None else None


def tokens_and_time(records: list[dict]) -> dict:
    """question_id -> [new tokens, wall time] over its turns."""
    return per_question(records, lambda r: r["new_tokens"], lambda r: r["wall_time"])


def latency_interval(records: list[dict]) -> list[float] | None:
    """latency_per_token's 95% interval, questions resampled with their wall time and tokens."""
    return sums_interval(tokens_and_time(records), 1, 0, guard=False)


def latency_speedup_interval(records: list[dict], baseline: list[dict]) -> list[float] | None:
    """latency_speedup's interval, paired over the questions of both runs."""
    return paired_ratio_interval(tokens_and_time(records), tokens_and_time(baseline))


def dyspec_paper(every: pd.DataFrame, table: int) -> pd.DataFrame:
    """The paper's rows of one table (of its CSV `every`): index (paper dataset, temperature, method)."""
    df = every[every["table"] == table]
    if df.empty:
        raise HarnessError(f"DySpec has no Table {table} in {PAPER_CSV} (tables: "
                           f"{', '.join(map(str, sorted(every['table'].unique())))})")
    return df.assign(temperature=df["temperature"].astype(float)).set_index(["dataset", "temperature", "method"])


def paper_value(paper: pd.DataFrame, dataset: str, temperature: float, method: str, col: str) -> float | None:
    key = (DATASETS[dataset], temperature, "baseline" if method == BASELINE else method)
    v = paper.at[key, col] if key in paper.index else None
    return None if pd.isna(v) else float(v)


# DySpec's methods on its datasets. Runs that recorded per-step draft lists (Figure 2's) paid for it in time: the
# tables and breakdowns leave them out (RunSet.where's keywords).
COMPARED = {"dataset": tuple(DATASETS), "method": (*METHODS, BASELINE), "keep": lambda r: not has_steps(r)}


def table_number(runs: list[Run], paper_table: int | str | None) -> int:
    if paper_table is not None:
        return int(paper_table)
    size = next((r.paper_size for r in reversed(runs) if r.paper_size), None)
    return TABLE_FOR_SIZE.get(size, 1)


def method_cells(m: str, run: Run | None, base: Run | None, paper: pd.DataFrame, dataset: str, t: float,
                 paper_base: float | None) -> dict:
    paper_lat = paper_value(paper, dataset, t, m, "latency_s_per_token")
    return {
        **measure(f"{m}_latency_s", run, latency_per_token, latency_interval),
        **measure(f"{m}_accepted", run, mat, mat_interval),
        **measure(f"{m}_speedup", run if base else None, lambda recs: latency_speedup(recs, base.records),
                  lambda recs: latency_speedup_interval(recs, base.records)),
        f"{m}_latency_s_paper": paper_lat,
        f"{m}_accepted_paper": paper_value(paper, dataset, t, m, "accepted_per_step"),
        f"{m}_speedup_paper": paper_base / paper_lat if paper_base and paper_lat else None,
        f"{m}_run_id": run.run_id if run else None,
    }


def build_dyspec_table(runs: RunSet, model: str | None = None, paper_table: int | str | None = None,
                       draft: str | None = None) -> pd.DataFrame:
    """One row per (dataset, temperature) in the paper's order; per method `<m>_latency_s`, `<m>_accepted`,
    `<m>_speedup` (ours; NaN: no run) and the same with `_paper`; `ar_latency_s(_paper)`; the footer in attrs. Runs:
    the latest per cell with no variant (Table 4: TABLE_VARIANTS[4]); default table: by the model's paper_size."""
    mine = runs.where(**COMPARED)
    table = table_number(mine.pin(model=model, draft=draft).runs, paper_table)  # the model's paper size
    paper = dyspec_paper(runs.paper(), table)
    variant = TABLE_VARIANTS.get(table)
    runs = mine.pin(model=model, draft=draft, own=lambda r: r.variant == variant)
    model = runs.model or PAPER.model
    latest = runs.latest_per(lambda r: r.key, batch_size=1)
    used: list[Run] = []
    notes: list[str] = list(runs.notes)
    rows, missing = [], []
    versus: list[tuple] = []  # (cell, Sequoia's latency / DySpec's, its paired interval)
    for dataset, paper_name in DATASETS.items():
        for t in TEMPERATURES:
            base = latest.get((model, BASELINE, None, dataset, t))
            cell = {m: latest.get((model, m, variant, dataset, t)) for m in METHODS}
            paper_base = paper_value(paper, dataset, t, BASELINE, "latency_s_per_token")
            row = {"dataset": dataset, "paper_dataset": paper_name, "temperature": t,
                   **measure("ar_latency_s", base, latency_per_token, latency_interval),
                   "ar_latency_s_paper": paper_base, "ar_run_id": base.run_id if base else None}
            if base:
                used.append(base)
            ours, theirs = cell["dyspec"], cell["sequoia"]
            if ours and theirs:  # the paper's claim: DySpec's latency below Sequoia's in every cell
                versus.append((f"{paper_name} T={t:g}", latency_speedup(ours.records, theirs.records),
                               latency_speedup_interval(ours.records, theirs.records)))
            for m, run in cell.items():
                paired = runs.baseline(run, BASELINE)  # the pin keeps one machine and max_new_tokens
                row.update(method_cells(m, run, paired, paper, dataset, t, paper_base))
                if run is None:
                    continue
                used.append(run)
                if paired is not base:  # an older AR covers more of the run's prompts
                    used.append(paired)
                    notes.append(f"{m} on {dataset} at T={t:g}: speedup against AR run {paired.run_id} (same machine)")
            rows.append(row)
            missing += [f"{LABELS[m]} {dataset} T={t:g}" for m, run in {**cell, BASELINE: base}.items()
                        if run is None]

    run_cols = ["ar_run_id", *(f"{m}_run_id" for m in METHODS)]
    df = pd.DataFrame(rows).reindex(columns=["dataset", "paper_dataset", "temperature", *NUMERIC, *run_cols])
    df[NUMERIC] = df[NUMERIC].astype(float)  # None -> NaN: empty CSV cells, never "None"
    first = paper.iloc[0]
    df.attrs.update(model=model, table=table, drafter=runs.drafter, paper_budget=int(first["tree_budget"]),
                    paper_pair=f"{first['draft']} -> {first['target']}")
    df.attrs["footer"] = [*footer(setting_line(used, df.attrs["paper_budget"]),
                                  {f"{r.method}/{r.dataset}/T={r.temperature:g}": r.run_id for r in used},
                                  [examples_line(used), *(f"Data: {n}." for n in DATA_NOTES.values()), DEFINITIONS,
                                   AR_NOTE], dict.fromkeys(notes), sequoia_claim(versus)),
                          *([f"No run: {', '.join(missing)}."] if missing else [])]
    return df


def sequoia_claim(versus: list[tuple]) -> list[str]:
    """The paper's claim over Sequoia, decided per cell from the paired interval of Sequoia's latency over
    DySpec's (above 1: DySpec faster)."""
    if not versus:
        return []
    cells = [verdict(ci, 1.0) for _, _, ci in versus]
    each = "; ".join(f"{name} {with_interval(p, ci)}" for name, p, ci in versus)
    return [(f"Claim, DySpec faster than Sequoia in every cell (the paper's): {overall(cells)} ({cells.count('holds')} "
            f"of {len(cells)} cells hold, {cells.count('undecided')} undecided, {cells.count('does not hold')} "
            f"not; Sequoia's latency / DySpec's, paired 95% interval: {each}).")]


def setting_line(used: list[Run], paper_budget: int) -> str:
    """The footer's first line: how the runs used were measured."""
    return (f"Machine: {listed(r.machine for r in used)}. dtype: {listed(r.provenance.get('dtype') for r in used)}. "
            f"max_new_tokens: {listed(r.max_new_tokens for r in used)}. "
            f"Trees: {listed(budget(r) for r in used if r.method != BASELINE)} (paper: {paper_budget}).")


def examples_line(used: list[Run]) -> str:
    """Per dataset, the prompts the runs measured and how they were selected."""
    out = []
    for d in DATASETS:
        mine = [r for r in used if r.dataset == d]
        n = "/".join(map(str, sorted({len({rec["question_id"] for rec in r.records}) for r in mine}))) or MISSING
        out.append(f"{d}: {n} prompts measured; selection: {'; '.join(sorted({selection(r) for r in mine})) or 'no runs'}")
    return "Examples: " + " | ".join(out) + "."


def budget(run: Run) -> str:
    ms = run.settings
    size = next((ms[k] for k in ("budget", "tree_size", "size") if ms.get(k) is not None), None)
    if size is None and ms.get("branches") and ms.get("depth"):
        size = int(ms["branches"]) * int(ms["depth"])  # SpecInfer's K x D tree
    return f"{run.method} {size if size is not None else '?'}"


def selection(run: Run) -> str:
    sel = run.selection
    if sel is None:
        return "not recorded"
    return sel if isinstance(sel, str) else json.dumps(sel, sort_keys=True)


def ms_cells(df: pd.DataFrame, col: str) -> list[str]:
    """A latency column (seconds per token) as ms cells, ours beside the paper's."""
    return paired_cells(df[[col, f"{col}_lo", f"{col}_hi", f"{col}_paper"]] * 1000, col, f"{col}_paper")


def display(df: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame({"Dataset": [f"{d} ({p})" for d, p in zip(df["dataset"], df["paper_dataset"])],
                        "T": [f"{t:g}" for t in df["temperature"]]})
    for m in METHODS:
        out[f"{LABELS[m]} ms/tok"] = ms_cells(df, f"{m}_latency_s")
        out[f"{LABELS[m]} accepted"] = paired_cells(df, f"{m}_accepted", f"{m}_accepted_paper")
        out[f"{LABELS[m]} speedup"] = paired_cells(df, f"{m}_speedup", f"{m}_speedup_paper")
    out["AR ms/tok"] = ms_cells(df, "ar_latency_s")
    return out


def dyspec_table(runs: RunSet, model: str | None = None, paper_size: str | None = None,
                 paper_table: int | str | None = None, draft: str | None = None) -> Report:
    """paper_size (--paper-size) picks the table by target size when paper_table is not given."""
    if paper_table is None and paper_size is not None:
        if paper_size not in TABLE_FOR_SIZE:
            raise HarnessError(f"DySpec has no table for paper size {paper_size!r} "
                               f"(sizes: {', '.join(TABLE_FOR_SIZE)})")
        paper_table = TABLE_FOR_SIZE[paper_size]
    df = build_dyspec_table(runs, model, paper_table, draft)
    a = df.attrs
    caption = (f"DySpec Table {a['table']}, ours (paper): latency per token (ms) and accepted tokens per step. "
               f"Ours: target {a['model']}, draft: {describe(a['drafter'])}; paper: {a['paper_pair']}, "
               f"tree budget {a['paper_budget']}, {PAPER_SETUP.get(a['table'], '?')}.")
    return Report.tables(f"dyspec_table{a['table']}", render(display(df), caption, a["footer"], df))


DRAFT_COMMON = ("model", "paper_size", "draft")  # --draft: one drafter's runs (bench/report/drafter.py)
# The sweep of every DySpec recipe, with its experiment (conf/experiment/dyspec/<name>.yaml) and extra overrides.
RUN = ("$(PY) -m bench.run $(SWEEP) experiment=dyspec/{} model=$(MODEL) run.limit=$(LIMIT) "
       "run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER) $(DRAFT_ARGS)")
HUB_RUN = "$(PY) -m bench.run $(SWEEP) experiment=dyspec/table1 model={} run.limit=$(LIMIT) logger=$(LOGGER) $(DRAFT_ARGS)"
TABLE = "$(PY) -m bench.report dyspec/table --model {} --paper-table {}"

ARTIFACT = Artifact(
    "table", "Tables 1-3 (latency, accepted tokens) -> tables/dyspec_table{N}.{md,csv,tex}", dyspec_table,
    rank=1, per_drafter=True, experiments=("dyspec_table1", "dyspec_table4"), paper_csv=(PAPER_CSV,),
    covers=(Cover("Table 1", {"paper_table": 1}),
            Cover("Table 2", {"paper_table": 2}, offline="llama-68m -> Llama-2-13B: the hub and a GPU"),
            Cover("Table 3", {"paper_table": 3}, offline="Llama-2-7B -> Llama-2-70B: the hub and GPUs"),
            Cover("Table 4", {"paper_table": 4})),
    recipes=(
        Recipe("reproduce-dyspec-table1",
               "DySpec Table 1: ar, specinfer, sequoia, dyspec x 3 datasets x T {0, 0.6}, then the table",
               (RUN.format("table1"), TABLE.format("$(MODEL)", 1))),
        Recipe("reproduce-dyspec-table2", "DySpec Table 2 (llama-68m -> Llama-2-13B; needs the hub and a GPU)",
               (HUB_RUN.format("llama-2-13b"), TABLE.format("llama-2-13b", 2))),
        Recipe("reproduce-dyspec-table3", "DySpec Table 3 (Llama-2-7B -> Llama-2-70B; needs the hub and GPUs)",
               (HUB_RUN.format("llama-2-70b"), TABLE.format("llama-2-70b", 3))),
        # AR (Table 1's runs, reused when complete) and dyspec at budget 768 with Algorithm 2, variant b768.
        Recipe("reproduce-dyspec-table4", "DySpec Table 4: dyspec at budget 768 (threshold 0.001) x 3 datasets x "
               "T {0, 0.6}, beside AR",
               (RUN.format("table1 method=ar"), RUN.format("table4"), TABLE.format("$(MODEL)", 4)))),
    shown=(Shown("make draft && make reproduce-dyspec-table1 LIMIT=10", {"paper_table": 1}),
           Shown("make draft && make reproduce-dyspec-table4 LIMIT=5", {"paper_table": 4})),
    options=(option("--paper-table", type=int,
                    help="the paper's table (1: 68M/7B, 2: 68M/13B, 3: 7B/70B); "
                         "default: by --paper-size, else by the runs' paper size"),),
    common=DRAFT_COMMON)
