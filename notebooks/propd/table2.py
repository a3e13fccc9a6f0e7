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
# # ProPD, Table 2: early pruning at batch 4, per pruning layer and top-k
#
# Reads the medusa run (the "w/o pruning" row) and the propd runs with pruning on and the dynamic tree off at
# batch 4 under `$SPECREPRO_RESULTS` (default `results/`); never runs a model. `make reproduce-propd-table2`
# produces them. Built by `bench.report.propd.table2` (also `python -m bench.report propd/table2`), written to
# `<results>/tables/propd_table2.{md,csv,tex}`. Optional: `$SPECREPRO_MODEL`, `$SPECREPRO_DATASET`.

# %%
import os
from pathlib import Path

from bench.report.plots import notebook_model, notebook_results, show
from bench.report.propd.table2 import build_propd_table2, claim_texts, render_propd_table2
from bench.report.tables import write_texts

RESULTS = notebook_results()
MODEL = notebook_model()
DATASET = os.environ.get("SPECREPRO_DATASET") or "mt_bench"
print(f"results: {RESULTS}")

# %%
table2 = build_propd_table2(RESULTS, model=MODEL, dataset=DATASET)
texts = render_propd_table2(table2)
for path in write_texts(Path(RESULTS, "tables"), "propd_table2", texts):
    print(path)

# %%
show(texts["md"])

# %% [markdown]
# The paper's hardware-independent claim (1), checked on our runs and, by the same rule, on the paper's numbers:

# %%
for line in claim_texts(table2):
    print(line)

# %% [markdown]
# The numbers behind the table (prune rate as a fraction, NaN where missing):

# %%
show(table2.drop(columns=["run_id"]))
