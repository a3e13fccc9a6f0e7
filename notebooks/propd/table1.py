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
# # ProPD, Table 1: speedup of ProPD over autoregressive decoding per batch size
#
# Reads the propd (pruning and dynamic tree on) and ar runs at batch 1, 2, 4, 8, 16 under `$SPECREPRO_RESULTS`
# (default `results/`); never runs a model. `make reproduce-propd-table1` produces them. Built by
# `bench.report.propd.table1` (also `python -m bench.report propd/table1`), written to
# `<results>/tables/propd_table1.{md,csv,tex}`. Optional: `$SPECREPRO_MODEL`, `$SPECREPRO_DATASET` (default
# mt_bench).

# %%
import os
from pathlib import Path

from bench.report.plots import notebook_model, notebook_results, show
from bench.report.propd.table1 import build_propd_table1, render_propd_table1
from bench.report.tables import write_texts

RESULTS = notebook_results()
MODEL = notebook_model()
DATASET = os.environ.get("SPECREPRO_DATASET") or "mt_bench"
print(f"results: {RESULTS}")

# %%
table1 = build_propd_table1(RESULTS, model=MODEL, dataset=DATASET)
texts = render_propd_table1(table1)
for path in write_texts(Path(RESULTS, "tables"), "propd_table1", texts):
    print(path)

# %% [markdown]
# Our row (the embedded model) above the paper's Vicuna rows; "—" is an empty cell, its reason in the footer.
# At batch 1 the speedup is Spec-Bench's (mean per-question rates), above it the ratio of aggregate rates.

# %%
show(texts["md"])

# %% [markdown]
# The numbers behind it (NaN where missing), with the mean prune rate and nodes drafted per step of each run:

# %%
show(table1.drop(columns=["propd_run_id", "ar_run_id"]))
