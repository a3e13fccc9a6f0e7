"""Reports: runs on disk (results/runs/<run_id>/) -> paper-style tables, ours beside the paper's numbers.

    python -m bench.report token_recycling_table1 [--results results] [--model M] [--paper-size 7B]
    python -m bench.report dyspec_table [--paper-table 1]     # DySpec Tables 1-3
    python -m bench.report dyspec_time_breakdown [--dataset D] [--temperature T]   # DySpec Figure 4

Every number is recomputed from records.jsonl through bench.metrics (records are the source of truth;
the summary.json of a run only says what the run was). A run directory without summary.json is still
being written, or died, and is skipped. Published numbers come from bench/paper_tables/ and are only ever
printed next to ours. New reports register in REPORTS with the same keyword signature.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

import pandas as pd

from bench.errors import HarnessError
from bench.run.metrics import mat, phase_totals, speedup, summarize

PAPER_TABLES = Path(__file__).parent / "paper_tables"
DEFAULT_MODEL = "smollm2-135m"
DEFAULT_PAPER_SIZE = "7B"
MISSING = "—"


@dataclass
class Run:
    path: Path
    meta: dict = field(repr=False)

    @property
    def run_id(self) -> str:
        return self.meta.get("run_id") or self.path.name

    @property
    def temperature(self) -> float:
        # Summaries before sampling existed have no temperature: they were greedy.
        return round(float(self.meta.get("temperature") or 0.0), 6)

    @property
    def key(self) -> tuple:
        # "" and null both mean the method's default configuration. The temperature is part of the key so
        # runs at 0 and 0.6 (DySpec's tables) never shadow each other.
        return (self.meta.get("model"), self.meta.get("method"), self.meta.get("variant") or None,
                self.meta.get("dataset"), self.temperature)

    @property
    def created(self) -> datetime:
        # Naive and aware stamps cannot be compared; treat naive ones as UTC.
        try:
            t = datetime.fromisoformat(self.meta.get("created") or "")
        except ValueError:
            return datetime.min.replace(tzinfo=UTC)
        return t if t.tzinfo else t.replace(tzinfo=UTC)

    @cached_property
    def records(self) -> list[dict]:
        with open(self.path / "records.jsonl") as f:
            return [json.loads(line) for line in f if line.strip()]


def load_runs(results_dir: str | Path) -> list[Run]:
    """Complete runs under results_dir/runs, oldest first."""
    runs = []
    for d in sorted(Path(results_dir, "runs").glob("*/")):
        if not (d / "summary.json").is_file() or not (d / "records.jsonl").is_file():
            continue
        try:
            runs.append(Run(d, json.loads((d / "summary.json").read_text())))
        except json.JSONDecodeError:
            print(f"report: skipping {d} (unreadable summary.json)", file=sys.stderr)
    return sorted(runs, key=lambda r: (r.created, r.run_id))


def latest_runs(runs: list[Run]) -> dict[tuple, Run]:
    """(model, method, variant, dataset, temperature) -> the most recent run; runs sorted oldest first."""
    return {r.key: r for r in runs}


def group_records(records: list[dict]) -> dict[str, list[dict]]:
    # Same grouping key as metrics.by_group, but keeping the records: speedup needs both sides' records.
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(r.get("group") or r.get("category") or "all", []).append(r)
    return groups


def write_atomic(path: Path, text: str) -> None:
    """Readers (notebooks, CI) never see a half-written table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as f:
        f.write(text)
    os.replace(f.name, path)


def _fmt(x) -> str:
    return MISSING if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def _latex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#")):
        s = s.replace(a, b)
    return s


# ---------------------------------------------------------------- Token Recycling, Table 1

# (our method, our variant, paper row, shown label, paper's name); paper row None: not in the paper.
TR_ROWS = [
    ("hf_generate", None, "vanilla", "hf_generate", "Vanilla"),
    ("ar", None, None, "ar", None),
    ("lookahead", None, "lookahead", "lookahead", "Lookahead"),
    ("pld", None, "pld", "pld", "PLD"),
    ("hf_pld", None, None, "hf_pld", None),
    ("rest", None, "rest", "rest", "REST"),
    ("medusa", None, "medusa", "medusa", "Medusa*"),
    ("token_recycling", None, "token_recycling", "token_recycling", "Ours (Token Recycling)"),
    ("token_recycling", "shuffle", "token_recycling_shuffle", "token_recycling[shuffle]", "shuffle"),
]
# Spec-Bench group name in our records -> paper column.
TR_GROUPS = {"mt_bench": "mt", "translation": "trans", "summarization": "sum", "qa": "qa",
             "math_reasoning": "math", "rag": "rag"}
TR_DATASETS = {"specbench": "spec_bench", "mbpp": "mbpp_tr"}
TR_METRICS = [*TR_GROUPS.values(), "specbench_mat", "specbench_tok_s", "specbench_speedup",
              "mbpp_mat", "mbpp_tok_s", "mbpp_speedup"]
TR_HEADERS = {"mt": "MT", "trans": "Trans", "sum": "Sum", "qa": "QA", "math": "Math", "rag": "RAG",
              "specbench_mat": "SB MAT", "specbench_tok_s": "SB tok/s", "specbench_speedup": "SB speedup",
              "mbpp_mat": "MBPP MAT", "mbpp_tok_s": "MBPP tok/s", "mbpp_speedup": "MBPP speedup",
              "specbench_lossless": "SB lossless", "mbpp_lossless": "MBPP lossless"}

TR_DEFINITIONS = (
    "Cells: ours (paper); — = no run / no published value. MAT: mean tokens committed per target forward, "
    "bonus token included, pooled over all steps. tok/s: mean over questions of per-question tokens/s. "
    "Speedup: ratio of those means vs our hf_generate run on the same model and dataset (questions in "
    "both runs); MT..RAG are SpecBench per-category speedups. Lossless: outputs equal to the greedy "
    "reference / outputs checked."
)


def _lossless(records: list[dict]) -> str | None:
    c = summarize(records)["lossless"]
    return f"{c['equal']}/{c['checked']}" if c["checked"] else None  # None: nothing was checked


def _dataset_cells(prefix: str, run: Run | None, base: Run | None) -> dict:
    """MAT, tok/s, speedup (and lossless) of one run on one dataset; None where not measurable."""
    if run is None:
        return {}
    s = summarize(run.records)
    return {f"{prefix}_mat": s["mat"], f"{prefix}_tok_s": s["tokens_per_s"]["mean_of_questions"],
            f"{prefix}_speedup": speedup(run.records, base.records) if base else None,
            f"{prefix}_lossless": _lossless(run.records), f"{prefix}_run_id": run.run_id}


def build_token_recycling_table1(results_dir: str | Path, model: str | None = None,
                                 paper_size: str | None = None, mbpp_model: str | None = None) -> pd.DataFrame:
    """One row per paper row (paper order); `<col>` is ours (NaN: no run), `<col>_paper` the paper's.

    The paper ran Vicuna on SpecBench and Code Llama on MBPP: `mbpp_model` (default: `model`) names the
    model whose mbpp_tr runs fill the MBPP columns. Run provenance and caveats are in df.attrs.
    """
    runs = load_runs(results_dir)
    model = model or (runs[-1].meta.get("model") if runs else None) or DEFAULT_MODEL
    mbpp_model = mbpp_model or model
    models = {"spec_bench": model, "mbpp_tr": mbpp_model}
    mine = [r for r in runs if r.meta.get("model") == models.get(r.meta.get("dataset"))]
    paper_size = paper_size or next((r.meta["paper_size"] for r in reversed(mine)
                                     if r.meta.get("paper_size")), DEFAULT_PAPER_SIZE)
    latest = latest_runs(mine)
    paper = pd.read_csv(PAPER_TABLES / "token_recycling_table1.csv")
    paper = paper[paper["size"] == paper_size].set_index("method")

    used: list[Run] = []
    notes = [] if len(paper) else [f"the paper has no {paper_size} rows"]
    rows = []
    # Token Recycling is greedy: only temperature-0 runs fill its table.
    def latest_of(method, variant, dataset):
        return latest.get((models[dataset], method, variant, dataset, 0.0))

    # The paper's speedups are against HF's AR, so the baseline is always hf_generate.
    bases = {dataset: latest_of("hf_generate", None, dataset) for dataset in TR_DATASETS.values()}
    for method, variant, paper_row, label, paper_name in TR_ROWS:
        row = {"method": method, "variant": variant, "label": label, "paper_method": paper_name}
        found = {dataset: latest_of(method, variant, dataset) for dataset in TR_DATASETS.values()}
        if paper_row is None and not any(found.values()):
            continue  # our extra rows (ar, hf_pld) appear only when run; the paper's rows always do
        for prefix, dataset in TR_DATASETS.items():
            run, base = found[dataset], bases[dataset]
            row.update(_dataset_cells(prefix, run, base))
            if run is None:
                continue
            used.append(run)
            if base is None:
                notes.append(f"no hf_generate run on {dataset}: {label} has no speedup")
                continue
            if base.meta.get("max_new_tokens") != run.meta.get("max_new_tokens"):
                notes.append(f"{label} on {dataset}: max_new_tokens {run.meta.get('max_new_tokens')} "
                             f"vs baseline {base.meta.get('max_new_tokens')}")
            if base.meta.get("machine") != run.meta.get("machine"):
                notes.append(f"{label} on {dataset}: machine differs from the baseline's")
            if prefix == "specbench":
                base_groups = group_records(base.records)
                for group, rs in group_records(run.records).items():
                    if group in TR_GROUPS and group in base_groups:
                        row[TR_GROUPS[group]] = speedup(rs, base_groups[group])
        for col in TR_METRICS:
            row[f"{col}_paper"] = paper.at[paper_row, col] if paper_row in paper.index else None
        rows.append(row)

    numeric = [c for col in TR_METRICS for c in (col, f"{col}_paper")]
    df = pd.DataFrame(rows).reindex(columns=["method", "variant", "label", "paper_method", *numeric,
                                             "specbench_lossless", "mbpp_lossless",
                                             "specbench_run_id", "mbpp_run_id"])
    df[numeric] = df[numeric].astype(float)  # None -> NaN, so the CSV has empty cells, not "None"
    df.attrs.update(model=model if mbpp_model == model else f"{model} (SpecBench), {mbpp_model} (MBPP)",
                    paper_size=paper_size, notes=list(dict.fromkeys(notes)),
                    machines=sorted({str(r.meta.get("machine")) for r in used}),
                    run_ids={_run_label(r): r.run_id for r in used})
    return df


def _run_label(run: Run) -> str:
    variant = run.meta.get("variant")
    return f"{run.meta.get('method')}{f'[{variant}]' if variant else ''}/{run.meta.get('dataset')}"


def _tr_display(df: pd.DataFrame) -> pd.DataFrame:
    """String cells "ours (paper)"; "—" for a missing side, just "—" when both are missing."""
    out = pd.DataFrame({"Method": df["label"], "Paper": df["paper_method"].fillna(MISSING)})
    for col in TR_METRICS:
        cells = []
        for ours, theirs in zip(df[col], df[f"{col}_paper"]):
            o, p = _fmt(ours), _fmt(theirs)
            cells.append(MISSING if o == p == MISSING else f"{o} ({p})")
        out[TR_HEADERS[col]] = cells
    for col in ("specbench_lossless", "mbpp_lossless"):
        out[TR_HEADERS[col]] = [v if isinstance(v, str) else MISSING for v in df[col]]
    return out


def render_token_recycling_table1(df: pd.DataFrame) -> dict[str, str]:
    """{"md", "csv", "tex"} texts of the table built by build_token_recycling_table1."""
    a = df.attrs
    caption = (f"Token Recycling Table 1, ours (paper): model {a['model']} vs the paper's {a['paper_size']} "
               f"(Vicuna on SpecBench, Code Llama on MBPP, A100-80GB).")
    footer = [
        f"Machine: {', '.join(a['machines']) or MISSING}.",
        TR_DEFINITIONS,
        "Runs: " + (", ".join(f"{k}={v}" for k, v in a["run_ids"].items()) or "none") + ".",
        *(f"Note: {n}." for n in a["notes"]),
    ]
    display = _tr_display(df)
    md = "\n\n".join([caption, display.to_markdown(index=False), "\n".join(footer)]) + "\n"
    tex = (display.style.format(escape="latex").hide(axis="index")
           .to_latex(hrules=True, caption=_latex_escape(caption)))
    return {"md": md, "csv": df.to_csv(index=False), "tex": tex}


def token_recycling_table1(results_dir: str | Path, model: str | None = None,
                           paper_size: str | None = None, mbpp_model: str | None = None) -> str:
    """Build, write results/tables/token_recycling_table1.{md,csv,tex}; returns the markdown."""
    df = build_token_recycling_table1(results_dir, model, paper_size, mbpp_model)
    texts = render_token_recycling_table1(df)
    for ext, text in texts.items():
        write_atomic(Path(results_dir, "tables", f"token_recycling_table1.{ext}"), text)
    return texts["md"]


def runs_table(results_dir: str | Path, model: str | None = None, paper_size: str | None = None,
               dataset: str | None = None, max_new_tokens: int | None = None) -> str:
    """Latest run per method for one model and dataset: MAT, tok/s, speedups, overhead, losslessness."""
    runs = [r for r in load_runs(results_dir)
            if (model is None or r.meta.get("model") == model)
            and (dataset is None or r.meta.get("dataset") == dataset)
            and (max_new_tokens is None or r.meta.get("max_new_tokens") == max_new_tokens)]
    latest = latest_runs(runs)
    rows = []
    for key, run in latest.items():
        s = summarize(run.records)
        speed = {}
        for m in ("hf_generate", "ar"):
            b = latest.get((key[0], m, None, key[3], key[4]))
            speed[m] = speedup(run.records, b.records) if b else None
        rows.append({
            "model": key[0], "dataset": key[3], "method": key[1] + (f"[{key[2]}]" if key[2] else ""),
            "T": f"{key[4]:g}",
            "turns": s["n_turns"], "MAT": _fmt(s["mat"]),
            "tok/s": _fmt(s["tokens_per_s"]["mean_of_questions"]),
            "speedup vs hf_generate": _fmt(speed["hf_generate"]), "speedup vs ar": _fmt(speed["ar"]),
            "overhead": _fmt(s["overhead_share"]), "lossless": _lossless(run.records) or MISSING,
        })
    if not rows:
        return "no complete runs match\n"
    footer = ("MAT: tokens per target forward incl. the bonus token, pooled over steps; tok/s: mean of "
              "per-question rates; speedup: ratio of mean rates on the same questions, baseline at the same "
              "temperature T; overhead: share of "
              "wall time outside model forwards (— for HF generate, timed as one phase); lossless: "
              "prompt-turns token-identical to greedy AR.")
    md = pd.DataFrame(rows).to_markdown(index=False) + "\n\n" + footer + "\n"
    write_atomic(Path(results_dir) / "tables" / "runs.md", md)
    return md


# ---------------------------------------------------------------- DySpec, Tables 1-3 and Figure 4

DYSPEC_PAPER_CSV = PAPER_TABLES / "dyspec_tables_latency_per_token.csv"
DYSPEC_DATASETS = {"c4": "C4", "openwebtext": "OWT", "cnn_dailymail": "CNN"}  # ours -> the paper's name
DYSPEC_TEMPERATURES = (0.0, 0.6)
DYSPEC_METHODS = ("dyspec", "sequoia", "specinfer")  # paper column order: Ours, Sequoia, Specinfer
DYSPEC_BASELINE = "ar"  # the paper's "Baseline" (autoregressive decoding)
DYSPEC_LABELS = {"dyspec": "DySpec", "sequoia": "Sequoia", "specinfer": "SpecInfer", "ar": "AR"}
# Our model's paper_size -> the paper table whose target size matches (Table 3: 7B draft, 70B target).
DYSPEC_TABLE_FOR_SIZE = {"7B": 1, "13B": 2, "70B": 3}
DYSPEC_PAPER_SETUP = {1: "one A100 40GB", 2: "one A100 40GB", 3: "one A100 40GB, target CPU-offloaded",
                      4: "one A100 40GB, target CPU-offloaded"}
DYSPEC_DEFINITIONS = (
    "Cells: ours (paper); — = no run / no published value. Latency: total wall time / total new tokens over "
    "all prompts of the run, in ms per token (Sequoia's accounting: the target prefill is inside the timed "
    "region). Accepted: tokens committed per target forward, bonus token included, pooled over all steps "
    "(MAT); our prefill counts as one step of one token, while Sequoia's first verification step includes "
    "the target prefill, so ours is lower by about MAT/steps. Speedup: our AR latency / the method's latency "
    "on the prompts of both runs (same dataset and temperature); the paper's: its Baseline / its latency."
)
DYSPEC_AR_NOTE = ("Sequoia's AR baseline (the paper's Baseline) times only 32 decoding steps per prompt "
                  "(prefill as step 0) and reports time / steps; our AR runs the full max_new_tokens with the "
                  "same engine, cache and dtype as the methods.")
DYSPEC_DATA_NOTES = {
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
    return sum(r["wall_time"] for r in records) / tokens if tokens > 0 else None


def latency_speedup(records: list[dict], baseline: list[dict]) -> float | None:
    """Baseline latency / our latency, over the questions present in both runs."""
    common = {r["question_id"] for r in records} & {r["question_id"] for r in baseline}
    mine = latency_per_token([r for r in records if r["question_id"] in common])
    base = latency_per_token([r for r in baseline if r["question_id"] in common])
    return base / mine if mine and base is not None else None


def dyspec_paper(table: int) -> pd.DataFrame:
    """The paper's rows of one table: index (paper dataset, temperature, method)."""
    df = pd.read_csv(DYSPEC_PAPER_CSV)
    df = df[df["table"] == table]
    if df.empty:
        known = sorted(pd.read_csv(DYSPEC_PAPER_CSV)["table"].unique())
        raise HarnessError(f"DySpec has no Table {table} in {DYSPEC_PAPER_CSV.name} (tables: "
                           f"{', '.join(map(str, known))})")
    return df.assign(temperature=df["temperature"].astype(float)).set_index(["dataset", "temperature", "method"])


def _paper_value(paper: pd.DataFrame, dataset: str, temperature: float, method: str, col: str) -> float | None:
    key = (DYSPEC_DATASETS[dataset], temperature, "baseline" if method == DYSPEC_BASELINE else method)
    if key not in paper.index:
        return None
    v = paper.at[key, col]
    return None if pd.isna(v) else float(v)


def _dyspec_runs(results_dir, model: str | None, methods=(*DYSPEC_METHODS, DYSPEC_BASELINE)) -> tuple[list[Run], str]:
    """Complete runs of DySpec's methods on its datasets for `model` (default: the latest such run's)."""
    runs = [r for r in load_runs(results_dir)
            if r.meta.get("dataset") in DYSPEC_DATASETS and r.meta.get("method") in methods]
    model = model or (runs[-1].meta.get("model") if runs else None) or DEFAULT_MODEL
    return [r for r in runs if r.meta.get("model") == model], model


def _dyspec_table_number(runs: list[Run], paper_table: int | str | None) -> int:
    if paper_table is not None:
        return int(paper_table)
    size = next((r.meta["paper_size"] for r in reversed(runs) if r.meta.get("paper_size")), None)
    return DYSPEC_TABLE_FOR_SIZE.get(size, 1)


def build_dyspec_table(results_dir: str | Path, model: str | None = None,
                       paper_table: int | str | None = None) -> pd.DataFrame:
    """One row per (dataset, temperature) in the paper's order; per method `<m>_latency_s`, `<m>_accepted`,
    `<m>_speedup` (ours; NaN: no run) and the same with `_paper`; `ar_latency_s(_paper)`. Provenance in attrs.

    Runs are the latest per (model, method, dataset, temperature) with no variant; default model: that of
    the most recent run of these methods on these datasets; default table: the one whose target size is the
    model's paper_size (7B -> 1, 13B -> 2, 70B -> 3).
    """
    runs, model = _dyspec_runs(results_dir, model)
    table = _dyspec_table_number(runs, paper_table)
    paper = dyspec_paper(table)
    latest = latest_runs(runs)
    used: list[Run] = []
    notes: list[str] = []
    rows = []
    for dataset, paper_name in DYSPEC_DATASETS.items():
        for t in DYSPEC_TEMPERATURES:
            row = {"dataset": dataset, "paper_dataset": paper_name, "temperature": t}
            base = latest.get((model, DYSPEC_BASELINE, None, dataset, t))
            row["ar_latency_s"] = latency_per_token(base.records) if base else None
            row["ar_latency_s_paper"] = paper_base = _paper_value(paper, dataset, t, DYSPEC_BASELINE,
                                                                  "latency_s_per_token")
            row["ar_run_id"] = base.run_id if base else None
            if base:
                used.append(base)
            for m in DYSPEC_METHODS:
                run = latest.get((model, m, None, dataset, t))
                paper_lat = _paper_value(paper, dataset, t, m, "latency_s_per_token")
                row.update({
                    f"{m}_latency_s": latency_per_token(run.records) if run else None,
                    f"{m}_accepted": mat(run.records) if run else None,
                    f"{m}_speedup": latency_speedup(run.records, base.records) if run and base else None,
                    f"{m}_latency_s_paper": paper_lat,
                    f"{m}_accepted_paper": _paper_value(paper, dataset, t, m, "accepted_per_step"),
                    f"{m}_speedup_paper": paper_base / paper_lat if paper_base and paper_lat else None,
                    f"{m}_run_id": run.run_id if run else None,
                })
                if run is None:
                    continue
                used.append(run)
                if base is not None and base.meta.get("max_new_tokens") != run.meta.get("max_new_tokens"):
                    notes.append(f"{m} on {dataset} at T={t:g}: max_new_tokens {run.meta.get('max_new_tokens')}"
                                 f" vs AR's {base.meta.get('max_new_tokens')}")
                if base is not None and base.meta.get("machine") != run.meta.get("machine"):
                    notes.append(f"{m} on {dataset} at T={t:g}: machine differs from AR's")
            rows.append(row)

    numeric = [f"{c}{suffix}" for c in ["ar_latency_s", *(f"{m}_{k}" for m in DYSPEC_METHODS
                                                           for k in ("latency_s", "accepted", "speedup"))]
               for suffix in ("", "_paper")]
    run_cols = ["ar_run_id", *(f"{m}_run_id" for m in DYSPEC_METHODS)]
    df = pd.DataFrame(rows).reindex(columns=["dataset", "paper_dataset", "temperature", *numeric, *run_cols])
    df[numeric] = df[numeric].astype(float)  # None -> NaN: empty CSV cells, never "None"
    first = paper.iloc[0]
    missing = [f"{DYSPEC_LABELS[k[1]]} {k[3]} T={k[4]:g}"
               for k in ((model, m, None, d, t) for d in DYSPEC_DATASETS for t in DYSPEC_TEMPERATURES
                         for m in (*DYSPEC_METHODS, DYSPEC_BASELINE)) if k not in latest]
    df.attrs.update(
        model=model, table=table, paper_pair=f"{first['draft']} -> {first['target']}",
        paper_budget=int(first["tree_budget"]), paper_setup=DYSPEC_PAPER_SETUP.get(table, "?"),
        drafts=sorted({str((r.meta.get("method_settings") or {}).get("draft")) for r in used
                       if r.meta.get("method") != DYSPEC_BASELINE}),
        dtypes=sorted({str((r.meta.get("provenance") or {}).get("dtype")) for r in used}),
        budgets=sorted({_budget(r) for r in used if r.meta.get("method") != DYSPEC_BASELINE}),
        machines=sorted({str(r.meta.get("machine")) for r in used}),
        max_new_tokens=sorted({str(r.meta.get("max_new_tokens")) for r in used}),
        selections={d: sorted({_selection(r) for r in used if r.meta.get("dataset") == d}) for d in DYSPEC_DATASETS},
        prompts={d: sorted({len({rec["question_id"] for rec in r.records}) for r in used
                            if r.meta.get("dataset") == d}) for d in DYSPEC_DATASETS},
        notes=list(dict.fromkeys(notes)), missing=missing,
        run_ids={f"{r.meta.get('method')}/{r.meta.get('dataset')}/T={r.temperature:g}": r.run_id for r in used})
    return df


def _budget(run: Run) -> str:
    ms = run.meta.get("method_settings") or {}
    size = next((ms[k] for k in ("budget", "tree_size", "size") if ms.get(k) is not None), None)
    if size is None and ms.get("branches") and ms.get("depth"):
        size = int(ms["branches"]) * int(ms["depth"])  # SpecInfer's K x D tree
    return f"{run.meta.get('method')} {size if size is not None else '?'}"


def _selection(run: Run) -> str:
    sel = run.meta.get("selection")
    if sel is None:
        return "not recorded"
    return sel if isinstance(sel, str) else json.dumps(sel, sort_keys=True)


def _ms(x) -> str:
    return MISSING if x is None or (isinstance(x, float) and math.isnan(x)) else f"{1000 * x:.2f}"


def _pair(ours: str, theirs: str) -> str:
    return MISSING if ours == theirs == MISSING else f"{ours} ({theirs})"


def _dyspec_display(df: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame({"Dataset": [f"{d} ({p})" for d, p in zip(df["dataset"], df["paper_dataset"])],
                        "T": [f"{t:g}" for t in df["temperature"]]})
    for m in DYSPEC_METHODS:
        label = DYSPEC_LABELS[m]
        out[f"{label} ms/tok"] = [_pair(_ms(a), _ms(b)) for a, b in zip(df[f"{m}_latency_s"], df[f"{m}_latency_s_paper"])]
        out[f"{label} accepted"] = [_pair(_fmt(a), _fmt(b))
                                    for a, b in zip(df[f"{m}_accepted"], df[f"{m}_accepted_paper"])]
        out[f"{label} speedup"] = [_pair(_fmt(a), _fmt(b))
                                   for a, b in zip(df[f"{m}_speedup"], df[f"{m}_speedup_paper"])]
    out["AR ms/tok"] = [_pair(_ms(a), _ms(b)) for a, b in zip(df["ar_latency_s"], df["ar_latency_s_paper"])]
    return out


def render_dyspec_table(df: pd.DataFrame) -> dict[str, str]:
    """{"md", "csv", "tex"} texts of the table built by build_dyspec_table."""
    a = df.attrs
    caption = (f"DySpec Table {a['table']}, ours (paper): latency per token (ms) and accepted tokens per step. "
               f"Ours: target {a['model']}, draft {', '.join(a['drafts']) or MISSING}; paper: {a['paper_pair']}, "
               f"tree budget {a['paper_budget']}, {a['paper_setup']}.")
    examples = []
    for d in DYSPEC_DATASETS:
        sel = "; ".join(a["selections"][d]) or "no runs"
        n = "/".join(map(str, a["prompts"][d])) or MISSING
        examples.append(f"{d}: {n} prompts measured; selection: {sel}")
    footer = [
        (f"Machine: {', '.join(a['machines']) or MISSING}. dtype: {', '.join(a['dtypes']) or MISSING}. "
        f"max_new_tokens: {', '.join(a['max_new_tokens']) or MISSING}. "
        f"Trees: {', '.join(a['budgets']) or MISSING} (paper: {a['paper_budget']})."),
        "Examples: " + " | ".join(examples) + ".",
        *(f"Data: {n}." for n in DYSPEC_DATA_NOTES.values()),
        DYSPEC_DEFINITIONS,
        DYSPEC_AR_NOTE,
        "Runs: " + (", ".join(f"{k}={v}" for k, v in a["run_ids"].items()) or "none") + ".",
        *(f"Note: {n}." for n in a["notes"]),
        *([f"No run: {', '.join(a['missing'])}."] if a["missing"] else []),
    ]
    display = _dyspec_display(df)
    md = "\n\n".join([caption, display.to_markdown(index=False), "\n".join(footer)]) + "\n"
    tex = (display.style.format(escape="latex").hide(axis="index")
           .to_latex(hrules=True, caption=_latex_escape(caption)))
    return {"md": md, "csv": df.to_csv(index=False), "tex": tex}


def dyspec_table(results_dir: str | Path, model: str | None = None, paper_size: str | None = None,
                 paper_table: int | str | None = None) -> str:
    """Build, write results/tables/dyspec_table{N}.{md,csv,tex}; returns the markdown.

    paper_size (the CLI's --paper-size) picks the table by target size when paper_table is not given.
    """
    if paper_table is None and paper_size is not None:
        if paper_size not in DYSPEC_TABLE_FOR_SIZE:
            raise HarnessError(f"DySpec has no table for paper size {paper_size!r} "
                               f"(sizes: {', '.join(DYSPEC_TABLE_FOR_SIZE)})")
        paper_table = DYSPEC_TABLE_FOR_SIZE[paper_size]
    df = build_dyspec_table(results_dir, model, paper_table)
    texts = render_dyspec_table(df)
    for ext, text in texts.items():
        write_atomic(Path(results_dir, "tables", f"dyspec_table{df.attrs['table']}.{ext}"), text)
    return texts["md"]


# DySpec Figure 4 component, label, our phases. The target prefill is a target forward (Sequoia and DySpec
# run it inside the first verification); `update` (KV compaction, commit) and `draft` (any other proposer
# time, e.g. the draft's own prefill) are "other", as is any phase not named here.
DYSPEC_FIG4_COMPONENTS = [
    ("draft_forward", "Draft forward", ("draft_forward",)),
    ("target_forward", "Target forward", ("target_forward", "prefill")),
    ("tree_construction", "Tree construction", ("tree",)),
    ("mask_building", "Mask building", ("preprocess",)),
    ("sampling", "Sampling", ("sampling",)),
    ("verification", "Verification", ("verify",)),
    ("other", "Other", ("update", "draft")),
]
DYSPEC_FIG4_PAPER = ("Paper (Figure 4, no values in the text): tree construction is under 2% of the time for "
                     "JF68M/Llama2-7B and JF68M/Llama2-13B; mask building, sampling and verification take "
                     "significant time there (mostly waiting on CUDA sync); with Llama2-7B/70B offloaded, "
                     "everything but the two models' inference is under 2%.")


def dyspec_component_shares(phase_times: dict[str, float]) -> dict[str, float]:
    """Our phase seconds -> share of each Figure 4 component in their sum (the timed region); sums to 1."""
    total = sum(phase_times.values())
    if total <= 0:
        return {}
    mapped = {p for _, _, phases in DYSPEC_FIG4_COMPONENTS for p in phases}
    shares = {key: sum(phase_times.get(p, 0.0) for p in phases) / total
              for key, _, phases in DYSPEC_FIG4_COMPONENTS}
    shares["other"] += sum(v for p, v in phase_times.items() if p not in mapped) / total
    return shares


def build_dyspec_time_breakdown(results_dir: str | Path, model: str | None = None,
                                dataset: str | None = None, temperature: float | None = None) -> pd.DataFrame:
    """One row per method (DySpec's order, AR last): share of each Figure 4 component, pooled over the latest
    run per (dataset, temperature) of that method (optionally only one dataset / temperature)."""
    runs, model = _dyspec_runs(results_dir, model)
    latest = [r for r in latest_runs(runs).values() if r.meta.get("variant") in (None, "")
              and (dataset is None or r.meta.get("dataset") == dataset)
              and (temperature is None or math.isclose(r.temperature, float(temperature)))]
    if not latest:
        where = "".join([f" on {dataset}" if dataset else "", f" at T={float(temperature):g}"
                         if temperature is not None else ""])
        raise HarnessError(f"no complete dyspec/sequoia/specinfer/ar runs of model '{model}'{where} under "
                           f"{Path(results_dir, 'runs')} (produced by `make reproduce-dyspec-table1`)")
    rows = []
    for m in (*DYSPEC_METHODS, DYSPEC_BASELINE):
        mine = [r for r in latest if r.meta.get("method") == m]
        if not mine:
            continue
        records = [rec for r in mine for rec in r.records]
        totals = phase_totals(records)
        wall = sum(rec["wall_time"] for rec in records)
        shares = dyspec_component_shares(totals)
        rows.append({"method": m, "label": DYSPEC_LABELS[m], "runs": len(mine),
                     "datasets": ",".join(sorted({r.meta["dataset"] for r in mine})),
                     "temperatures": ",".join(sorted({f"{r.temperature:g}" for r in mine})),
                     "prompts": len(records), "wall_s": wall,
                     "phase_sum_over_wall": sum(totals.values()) / wall if wall > 0 else None,
                     **{key: shares.get(key) for key, _, _ in DYSPEC_FIG4_COMPONENTS},
                     "phases": json.dumps({k: round(v, 6) for k, v in sorted(totals.items())}),
                     "run_ids": ",".join(r.run_id for r in mine)})
    df = pd.DataFrame(rows)
    df.attrs.update(model=model, machines=sorted({str(r.meta.get("machine")) for r in latest}),
                    dataset=dataset, temperature=temperature)
    return df


def _plot_dyspec_breakdown(df: pd.DataFrame, path: Path) -> Path:
    from bench.figures import new_figure, save_figure  # lazy: bench.figures imports this module

    fig = new_figure(figsize=(8, 4.8))
    ax = fig.subplots()
    bottom = [0.0] * len(df)
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:gray"]
    for (key, label, phases), color in zip(DYSPEC_FIG4_COMPONENTS, colors):
        values = [100 * (v or 0.0) for v in df[key]]
        ax.bar(df["label"], values, bottom=bottom, label=f"{label} ({'+'.join(phases)})", color=color)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("% of timed region")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    a = df.attrs
    ax.set_title(f"DySpec Figure 4, time per component: ours ({a['model']}, {', '.join(a['machines'])})",
                 fontsize=9)
    ax.text(0.5, -0.14, "\n".join(textwrap.wrap(DYSPEC_FIG4_PAPER, 100)), transform=ax.transAxes,
            ha="center", va="top", fontsize=7, style="italic")
    return save_figure(fig, path)


def dyspec_time_breakdown(results_dir: str | Path, model: str | None = None, paper_size: str | None = None,
                          dataset: str | None = None, temperature: float | None = None) -> str:
    """Writes results/tables/dyspec_time_breakdown.{md,csv} and results/figures/dyspec_time_breakdown.png."""
    df = build_dyspec_time_breakdown(results_dir, model, dataset, temperature)
    display = pd.DataFrame({"Method": df["label"], "runs": df["runs"], "prompts": df["prompts"]})
    for key, label, phases in DYSPEC_FIG4_COMPONENTS:
        display[f"{label} ({'+'.join(phases)})"] = [MISSING if v is None or math.isnan(v) else f"{100 * v:.1f}%"
                                                    for v in df[key]]
    a = df.attrs
    scope = ", ".join([a["dataset"] or "c4+openwebtext+cnn_dailymail",
                       f"T={float(a['temperature']):g}" if a["temperature"] is not None else "T=0 and 0.6"])
    png = _plot_dyspec_breakdown(df, Path(results_dir, "figures", "dyspec_time_breakdown.png"))
    footer = [
        f"Machine: {', '.join(a['machines'])}. Shares of the summed phase times of all prompts (the phases "
        f"tile the timed region; phase sum / wall: "
        + ", ".join(f"{lab} {_fmt(v)}" for lab, v in zip(df["label"], df["phase_sum_over_wall"])) + ").",
        "Our phase names in brackets; prefill (the target's prompt forward) counts as target forward.",
        DYSPEC_FIG4_PAPER,
        f"Figure: {png}.",
        "Runs: " + "; ".join(f"{lab}: {ids}" for lab, ids in zip(df["label"], df["run_ids"])) + ".",
    ]
    md = "\n\n".join([f"DySpec Figure 4, time breakdown per method: ours, {a['model']} on {scope}.",
                      display.to_markdown(index=False), "\n".join(footer)]) + "\n"
    write_atomic(Path(results_dir, "tables", "dyspec_time_breakdown.md"), md)
    write_atomic(Path(results_dir, "tables", "dyspec_time_breakdown.csv"), df.to_csv(index=False))
    return md


# Report name -> fn(results_dir, model=None, paper_size=None, ...) -> markdown; it writes its own files.
REPORTS = {"token_recycling_table1": token_recycling_table1, "runs": runs_table, "dyspec_table": dyspec_table,
           "dyspec_time_breakdown": dyspec_time_breakdown}


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        # One line on stderr (not argparse's usage block) so scripts and CI logs stay readable.
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    p = _OneLineParser(prog="bench.report", description=__doc__.splitlines()[0])
    p.add_argument("report", choices=sorted(REPORTS))
    p.add_argument("--results", default="results", help="results dir holding runs/ (tables/ is written)")
    p.add_argument("--model", default=None, help="default: the model of the most recent run")
    p.add_argument("--paper-size", default=None, help="paper rows to compare with; default: the runs'")
    p.add_argument("--mbpp-model", default=None, help="token_recycling_table1: model of the MBPP columns")
    p.add_argument("--dataset", default=None, help="runs, dyspec_time_breakdown: only this dataset")
    p.add_argument("--max-new-tokens", type=int, default=None, help="runs report: only runs with this limit")
    p.add_argument("--paper-table", type=int, default=None,
                   help="dyspec_table: the paper's table (1: 68M/7B, 2: 68M/13B, 3: 7B/70B); default: by size")
    p.add_argument("--temperature", type=float, default=None,
                   help="dyspec_time_breakdown: only runs at this temperature (default: all)")
    args = p.parse_args(argv)
    if not Path(args.results, "runs").is_dir():
        p.exit(1, f"{p.prog}: error: no runs/ under {args.results!r}\n")
    kwargs = {"model": args.model, "paper_size": args.paper_size}
    if args.report == "runs":
        kwargs.update(dataset=args.dataset, max_new_tokens=args.max_new_tokens)
    elif args.report == "dyspec_table":
        kwargs.update(paper_table=args.paper_table)
    elif args.report == "dyspec_time_breakdown":
        kwargs.update(dataset=args.dataset, temperature=args.temperature)
    else:
        kwargs.update(mbpp_model=args.mbpp_model)
    try:
        print(REPORTS[args.report](args.results, **kwargs), end="")
    except HarnessError as err:
        p.exit(1, f"{p.prog}: error: {err}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
