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
# # DySpec, Figure 4: time per component of a decoding step, per method
#
# Reads the latest DySpec runs (dyspec, sequoia, specinfer, ar; every dataset and temperature, pooled)
# under `$SPECREPRO_RESULTS` (default `results/`); never runs a model. Our phases map to the paper's
# components (draft forward, target forward with the prefill, tree construction, mask building, sampling,
# verification, other). The paper gives no values for Figure 4, only claims, printed under ours. Writes
# `<results>/tables/dyspec_time_breakdown.{md,csv}` and `<results>/figures/dyspec_time_breakdown.png`
# (also `python -m bench.report dyspec/time_breakdown`). Optional: `$SPECREPRO_MODEL`,
# `$SPECREPRO_DATASET` and `$SPECREPRO_TEMPERATURE` (only those runs).

# %%
import os
from pathlib import Path

from bench.report.dyspec.time_breakdown import (
    FIG4_COMPONENTS,
    build_dyspec_time_breakdown,
    dyspec_time_breakdown,
)
from bench.report.plots import notebook_model, notebook_results, show

RESULTS = notebook_results()
MODEL = notebook_model()
DATASET = os.environ.get("SPECREPRO_DATASET") or None
TEMPERATURE = float(os.environ["SPECREPRO_TEMPERATURE"]) if os.environ.get("SPECREPRO_TEMPERATURE") else None
print(f"results: {RESULTS}")

# %%
md = dyspec_time_breakdown(RESULTS, model=MODEL, dataset=DATASET, temperature=TEMPERATURE)
written = [Path(RESULTS, "tables", f"dyspec_time_breakdown.{ext}") for ext in ("md", "csv")]
written.append(Path(RESULTS, "figures", "dyspec_time_breakdown.png"))
for path in written:
    print(path)

# %%
show(written[-1])

# %%
show(md)

# %% [markdown]
# The shares behind the figure (of the summed phase times; each row sums to 1), and our raw phase seconds:

# %%
shares = build_dyspec_time_breakdown(RESULTS, model=MODEL, dataset=DATASET, temperature=TEMPERATURE)
show(shares[["label", "runs", "prompts", *(key for key, _, _ in FIG4_COMPONENTS), "phase_sum_over_wall"]])
show(shares[["label", "phases"]])
