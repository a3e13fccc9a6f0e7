"""Token Recycling Table 1: SpecBench per-category speedups, MAT, tok/s and speedup on SpecBench and MBPP, ours
(greedy runs only) beside the paper's; speedups are over our hf_generate run, as the paper's are over HF's AR."""

from __future__ import annotations

import pandas as pd

from bench.metrics import group_records, speedup, speedup_interval, summarize
from bench.report.declare import Artifact, Cover, Recipe, Shown, option
from bench.report.output import Report
from bench.report.select import RunSet, default_model, footer
from bench.report.tables import MISSING, interval_columns, lossless_text, paired_cells, render
from bench.report.token_recycling import PAPER
from bench.run.store import Run, same_weights

DEFAULT_PAPER_SIZE = "7B"
# run.experiment of conf/experiment/token_recycling/table1_*.yaml; "table1" is what runs made before the label was
# scoped to the paper carry (evidence/, the fixtures): both are Table 1's sweeps.
EXPERIMENTS = ("tr_table1", "table1")

# (our method, our variant, paper row, shown label, paper's name); paper row None: not in the paper.
ROWS = [
    ("hf_generate", None, "vanilla", "hf_generate", "Vanilla"),
    ("ar", None, None, "ar", None),
    ("lookahead", None, "lookahead", "lookahead", "Lookahead"),
    ("pld", None, "pld", "pld", "PLD"),
    ("hf_pld", None, None, "hf_pld", None),
    ("rest", None, "rest", "rest", "REST"),
    ("medusa", None, "medusa", "medusa", "Medusa*"),
    ("eagle", None, None, "eagle", None),  # the paper has no EAGLE rows: ours only (the model's trained head)
    ("eagle2", None, None, "eagle2", None),
    ("eagle3", None, None, "eagle3", None),
    ("token_recycling", None, "token_recycling", "token_recycling", "Ours (Token Recycling)"),
    ("token_recycling", "shuffle", "token_recycling_shuffle", "token_recycling[shuffle]", "shuffle"),
]
# Spec-Bench group name in our records -> paper column.
GROUPS = {"mt_bench": "mt", "translation": "trans", "summarization": "sum", "qa": "qa",
          "math_reasoning": "math", "rag": "rag"}
DATASETS = {"specbench": "spec_bench", "mbpp": "mbpp_tr"}
METRICS = [*GROUPS.values(), "specbench_mat", "specbench_tok_s", "specbench_speedup",
           "mbpp_mat", "mbpp_tok_s", "mbpp_speedup"]
HEADERS = {"mt": "MT", "trans": "Trans", "sum": "Sum", "qa": "QA", "math": "Math", "rag": "RAG",
           "specbench_mat": "SB MAT", "specbench_tok_s": "SB tok/s", "specbench_speedup": "SB speedup",
           "mbpp_mat": "MBPP MAT", "mbpp_tok_s": "MBPP tok/s", "mbpp_speedup": "MBPP speedup",
           "specbench_lossless": "SB lossless", "mbpp_lossless": "MBPP lossless"}

DEFINITIONS = (
    "Cells: ours (paper); — = no run / no published value. MAT: mean tokens committed per target forward, "
    "bonus token included, pooled over all steps. tok/s: mean over questions of per-question tokens/s. "
    "Speedup: ratio of those means vs our hf_generate run on the same model and dataset (questions in "
    "both runs); MT..RAG are SpecBench per-category speedups. Lossless: outputs equal to the greedy "
    "reference / outputs checked. Ours carry a 95% bootstrap interval over questions [low, high] (paired for "
    "speedups; the csv's _lo/_hi columns). eagle and eagle2 (EAGLE-1 and EAGLE-2 with the model's trained EAGLE "
    "head) and eagle3 (EAGLE-3 with its head) are not in the paper, which has no EAGLE rows."
)


def dataset_cells(prefix: str, run: Run, base: Run | None) -> dict:
    """MAT, tok/s, speedup (and lossless) of one run on one dataset; None where not measurable."""
    s = summarize(run.records)
    return {f"{prefix}_mat": s["mat"], f"{prefix}_tok_s": s["tokens_per_s"]["mean_of_questions"],
            f"{prefix}_speedup": speedup(run.records, base.records) if base else None,
            **interval_columns(f"{prefix}_mat", s["intervals"]["mat"]),
            **interval_columns(f"{prefix}_tok_s", s["intervals"]["tokens_per_s"]),
            **interval_columns(f"{prefix}_speedup", speedup_interval(run.records, base.records) if base else None),
            f"{prefix}_lossless": lossless_text(s["lossless"]), f"{prefix}_run_id": run.run_id}


def build_token_recycling_table1(runs: RunSet, model: str | None = None, paper_size: str | None = None,
                                 mbpp_model: str | None = None) -> pd.DataFrame:
    """One row per paper row (paper order); `<col>` is ours (NaN: no run), `<col>_paper` the paper's; `mbpp_model`
    (default: `model`) fills the MBPP columns. Runs: the table's own sweeps and hand-made ones, each paired with the
    baseline measured like it (else the latest over the same weights, whatever its machine or length: a note says
    so)."""
    table = runs.where(experiment=(*runs.experiments, None))
    model = default_model(table.runs, model, PAPER.model)
    mbpp_model = mbpp_model or model
    models = {"spec_bench": model, "mbpp_tr": mbpp_model}
    mine = table.where(keep=lambda r: r.model == models.get(r.dataset))
    sized = mine.latest(lambda r: r.paper_size)
    paper_size = paper_size or (sized.paper_size if sized else DEFAULT_PAPER_SIZE)
    # Token Recycling is greedy: only temperature-0 runs fill its table; a batched run never stands in.
    latest = mine.where(greedy=True, batch_size=1).latest_per(lambda r: r.key)
    paper = runs.paper().loc[lambda p: p["size"] == paper_size].set_index("method")

    used: dict[str, Run] = {}  # "<row label>/<dataset>" -> its run (the footer's Runs line)
    notes = [] if len(paper) else [f"the paper has no {paper_size} rows"]
    rows = []

    def run_of(method, variant, dataset):
        return latest.get((models[dataset], method, variant, dataset, 0.0))

    # The paper's speedups are against HF's AR, so the baseline is always hf_generate.
    hf_runs = mine.where(greedy=True, batch_size=1, method="hf_generate", keep=lambda r: r.variant is None)
    for method, variant, paper_row, label, paper_name in ROWS:
        row = {"method": method, "variant": variant, "label": label, "paper_method": paper_name}
        found = {dataset: run_of(method, variant, dataset) for dataset in DATASETS.values()}
        if paper_row is None and not any(found.values()):
            continue  # our extra rows (ar, hf_pld) appear only when run; the paper's rows always do
        for prefix, dataset in DATASETS.items():
            run = found[dataset]
            if run is None:
                continue
            # prefer the baseline measured the same way (machine label, threads, jobs); else the latest over the
            # same weights: a run over other weights under the model's name is another model
            base = mine.baseline(run, "hf_generate") or hf_runs.latest(
                lambda b, run=run: b.dataset == run.dataset and same_weights(b.meta, run.meta))
            other_weights = base is None and hf_runs.latest(dataset=dataset) is not None
            row.update(dataset_cells(prefix, run, base))
            used[f"{label}/{dataset}"] = run
            if base is None:
                why = "over the same weights " if other_weights else ""
                notes.append(f"no hf_generate run {why}on {dataset}: {label} has no speedup")
                continue
            if base.max_new_tokens != run.max_new_tokens:
                notes.append(f"{label} on {dataset}: max_new_tokens {run.max_new_tokens} vs baseline {base.max_new_tokens}")
            if base.machine != run.machine:
                notes.append(f"{label} on {dataset}: machine differs from the baseline's")
            if prefix == "specbench":
                base_groups = group_records(base.records)
                for group, rs in group_records(run.records).items():
                    if group in GROUPS and group in base_groups:
                        row[GROUPS[group]] = speedup(rs, base_groups[group])
                        row.update(interval_columns(GROUPS[group], speedup_interval(rs, base_groups[group])))
        for col in METRICS:
            row[f"{col}_paper"] = paper.at[paper_row, col] if paper_row in paper.index else None
        rows.append(row)

    if not used:  # the paper's numbers alone, and what measures ours
        notes.append(f"no runs of model {model} yet: `{PAPER.make('table1')}` measures them")
    numeric = [c for col in METRICS for c in (col, f"{col}_lo", f"{col}_hi", f"{col}_paper")]
    df = pd.DataFrame(rows).reindex(columns=["method", "variant", "label", "paper_method", *numeric,
                                             "specbench_lossless", "mbpp_lossless",
                                             "specbench_run_id", "mbpp_run_id"])
    df[numeric] = df[numeric].astype(float)  # None -> NaN, so the CSV has empty cells, not "None"
    df.attrs.update(model=model if mbpp_model == model else f"{model} (SpecBench), {mbpp_model} (MBPP)",
                    paper_size=paper_size, notes=list(dict.fromkeys(notes)),
                    machines=sorted({str(r.machine) for r in used.values()}),
                    run_ids={k: r.run_id for k, r in used.items()})
    return df


def display(df: pd.DataFrame) -> pd.DataFrame:
    """String cells "ours (paper)"; "—" for a missing side, just "—" when both are missing."""
    out = pd.DataFrame({"Method": df["label"], "Paper": df["paper_method"].fillna(MISSING)})
    for col in METRICS:
        out[HEADERS[col]] = paired_cells(df, col, f"{col}_paper")
    for col in ("specbench_lossless", "mbpp_lossless"):
        out[HEADERS[col]] = [v if isinstance(v, str) else MISSING for v in df[col]]
    return out


def token_recycling_table1(runs: RunSet, model: str | None = None, paper_size: str | None = None,
                           mbpp_model: str | None = None) -> Report:
    df = build_token_recycling_table1(runs, model, paper_size, mbpp_model)
    a = df.attrs
    caption = (f"Token Recycling Table 1, ours (paper): model {a['model']} vs the paper's {a['paper_size']} "
               f"(Vicuna on SpecBench, Code Llama on MBPP, A100-80GB).")
    # The Runs line names each run by its row and dataset (label=id), as the page always has.
    foot = footer(f"Machine: {', '.join(a['machines']) or MISSING}.", a["run_ids"], [DEFINITIONS], a["notes"])
    return Report.tables("token_recycling_table1", render(display(df), caption, foot, df))


TABLE1 = "$(PY) -m bench.run $(SWEEP) experiment=token_recycling/{} $(TABLE1_ARGS) model=$(MODEL)"
# Another MBPP model (Code Llama in the paper) needs its own REST store, and has no Medusa heads (the paper's MBPP
# Medusa cells are empty): its sweep then leaves medusa out rather than stop at it.
MBPP_STORE = "$(if $(filter-out $(MODEL),$(MBPP_MODEL)),$(PY) scripts/build_datastore.py model=$(MBPP_MODEL))"
MBPP_NO_HEADS = ("$(if $(shell grep -qs '^heads:' conf/model/$(MBPP_MODEL).yaml && echo y),,"
                 " method=ar,hf_generate,pld,lookahead,rest,token_recycling)")
ARTIFACT = Artifact(
    "table1", "Table 1 (SpecBench, MBPP) -> tables/token_recycling_table1.{md,csv,tex}", token_recycling_table1,
    covers=(Cover("Table 1"),), rank=1, experiments=EXPERIMENTS, paper_csv=("token_recycling_table1.csv",),
    recipes=(Recipe("reproduce-tr-table1", "Token Recycling Table 1: 8 rows x {spec_bench, mbpp_tr}, LIMIT per group, "
                    "then the report",
                    (TABLE1.format("table1_spec_bench"), TABLE1.format("table1_shuffle"), MBPP_STORE,
                     TABLE1.format("table1_mbpp").replace("$(MODEL)", "$(MBPP_MODEL)") + MBPP_NO_HEADS,
                     "$(PY) -m bench.report token_recycling/table1 --model $(MODEL) --mbpp-model $(MBPP_MODEL)"),
                    ("datastore", "heads")),
             Recipe("reproduce-table1", "the short name of reproduce-tr-table1 (Token Recycling Table 1)", (),
                    ("reproduce-tr-table1",))),
    shown=(Shown("make reproduce-tr-table1 LIMIT=5"),),
    options=(option("--mbpp-model", help="the MBPP columns' model (default: --model)"),))
