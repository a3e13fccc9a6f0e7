"""Reports: runs on disk (results/runs/<run_id>/) -> paper-style tables, ours beside the paper's numbers.

    python -m bench.report token_recycling_table1 [--results results] [--model M] [--paper-size 7B]

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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

import pandas as pd

from bench.metrics import speedup, summarize

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
    def key(self) -> tuple:
        # "" and null both mean the method's default configuration.
        return (self.meta.get("model"), self.meta.get("method"), self.meta.get("variant") or None,
                self.meta.get("dataset"))

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
    """(model, method, variant, dataset) -> the most recent run; runs must be sorted oldest first."""
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
    for method, variant, paper_row, label, paper_name in TR_ROWS:
        row = {"method": method, "variant": variant, "label": label, "paper_method": paper_name}
        for prefix, dataset in TR_DATASETS.items():
            run = latest.get((models[dataset], method, variant, dataset))
            # The paper's speedups are against HF's AR, so the baseline is always hf_generate.
            base = latest.get((models[dataset], "hf_generate", None, dataset))
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
            b = latest.get((key[0], m, None, key[3]))
            speed[m] = speedup(run.records, b.records) if b else None
        rows.append({
            "model": key[0], "dataset": key[3], "method": key[1] + (f"[{key[2]}]" if key[2] else ""),
            "turns": s["n_turns"], "MAT": _fmt(s["mat"]),
            "tok/s": _fmt(s["tokens_per_s"]["mean_of_questions"]),
            "speedup vs hf_generate": _fmt(speed["hf_generate"]), "speedup vs ar": _fmt(speed["ar"]),
            "overhead": _fmt(s["overhead_share"]), "lossless": _lossless(run.records) or MISSING,
        })
    if not rows:
        return "no complete runs match\n"
    footer = ("MAT: tokens per target forward incl. the bonus token, pooled over steps; tok/s: mean of "
              "per-question rates; speedup: ratio of mean rates on the same questions; overhead: share of "
              "wall time outside model forwards (— for HF generate, timed as one phase); lossless: "
              "prompt-turns token-identical to greedy AR.")
    md = pd.DataFrame(rows).to_markdown(index=False) + "\n\n" + footer + "\n"
    write_atomic(Path(results_dir) / "tables" / "runs.md", md)
    return md


# Report name -> fn(results_dir, model=None, paper_size=None, ...) -> markdown; it writes its own files.
REPORTS = {"token_recycling_table1": token_recycling_table1, "runs": runs_table}


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
    p.add_argument("--dataset", default=None, help="runs report: only this dataset")
    p.add_argument("--max-new-tokens", type=int, default=None, help="runs report: only runs with this limit")
    args = p.parse_args(argv)
    if not Path(args.results, "runs").is_dir():
        p.exit(1, f"{p.prog}: error: no runs/ under {args.results!r}\n")
    kwargs = {"model": args.model, "paper_size": args.paper_size}
    if args.report == "runs":
        kwargs.update(dataset=args.dataset, max_new_tokens=args.max_new_tokens)
    else:
        kwargs.update(mbpp_model=args.mbpp_model)
    print(REPORTS[args.report](args.results, **kwargs), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
