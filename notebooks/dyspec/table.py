# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.16.4
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # DySpec, Tables 1-3: latency per token, accepted tokens per step, speedup vs AR
#
# Reads the DySpec runs (dyspec, sequoia, specinfer, ar on c4 / openwebtext / cnn_dailymail at T 0 and 0.6)
# under `$SPECREPRO_RESULTS` (default `results/`, relative paths from the project root); never runs a model.
# `make reproduce-dyspec-table1` (and `-table2`, `-table3`) produce the runs. One table per target model
# found: the paper's table whose target size is the model's (7B: Table 1, 13B: Table 2, 70B: Table 3),
# built by `bench.report.dyspec.tables` (also `python -m bench.report dyspec/table`) and written to
# `<results>/tables/dyspec_table{N}.{md,csv,tex}`. Optional: `$SPECREPRO_MODEL` (only this target model).

# %%
from pathlib import Path

from bench.report.dyspec.tables import BASELINE, DATASETS, METHODS, build_dyspec_table, render_dyspec_table
from bench.report.plots import notebook_model, notebook_results, show
from bench.report.tables import write_texts
from bench.run.store import load_runs

RESULTS = notebook_results()
MODEL = notebook_model()
print(f"results: {RESULTS}")

# %% [markdown]
# The target models with DySpec runs, most recent last (without runs: the paper's numbers alone).

# %%
runs = [r for r in load_runs(RESULTS)
        if r.meta.get("dataset") in DATASETS and r.meta.get("method") in (*METHODS, BASELINE)]
models = [MODEL] if MODEL else list(dict.fromkeys(r.meta.get("model") for r in runs)) or [None]
tables = {}
for model in models:
    table = build_dyspec_table(RESULTS, model=model)
    texts = render_dyspec_table(table)
    tables[table.attrs["model"]] = (table, texts)
    for path in write_texts(Path(RESULTS, "tables"), f"dyspec_table{table.attrs['table']}", texts):
        print(path)

# %% [markdown]
# Cells read "ours (paper)"; "—" means no run or no published value. The footer says which runs, machine,
# trees and prompts each table used, and how our AR baseline differs from Sequoia's.

# %%
for table, texts in tables.values():
    show(texts["md"])

# %% [markdown]
# The numbers behind each table (ours and `_paper` columns, NaN where missing; latencies in seconds):

# %%
for table, _ in tables.values():
    show(table.drop(columns=[c for c in table.columns if c.endswith("_run_id")]))
