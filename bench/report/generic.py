"""The artifacts of no paper, and the old names that keep working (the store-level tools, `reproduced`, `evidence`
and `makefile`, are commands of the CLI: bench/report/__main__.py)."""

from bench.report.declare import Artifact, Recipe, option
from bench.report.runs import draft_sd_table, project_table, runs_table

SD = "$(PY) -m bench.run $(SWEEP) experiment=draft/{} model=$(MODEL) run.limit=$(LIMIT) run.max_new_tokens=$(MAX_NEW) \
logger=$(LOGGER) $(DRAFT_ARGS)"


ARTIFACTS = (
    Artifact("runs", "latest run per method (MAT, tok/s, speedups) -> tables/runs.md", runs_table,
             options=(option("--dataset", help="only runs on this dataset"),
                      option("--max-new-tokens", type=int, help="only runs with this limit"))),
    Artifact("draft_sd", "sd at draft length 4/8/12 with the model's draft, beside AR -> tables/draft_sd.{md,csv,tex}",
             draft_sd_table, common=("model",),
             recipes=(Recipe("reproduce-draft-sd", "sd at draft length 4, 8, 12 on MT-Bench and HumanEval with MODEL's "
                             "draft, beside AR (LIMIT per dataset)",
                             (SD.format("sd_lambda_ar"), SD.format("sd_lambda"),
                              "$(PY) -m bench.report draft_sd --model $(MODEL)")),)),
    Artifact("project", "the latest run per method, its speed here beside its speed replayed on a cost profile "
             "-> tables/projection.md", project_table, common=("model",),
             options=(option("--profile", required=True, help="a profile JSON (make validate-projection; a gpu-check "
                             "folder's profiles/*.json, its rest priced for that GPU's host) or a roofline "
                             "<shape>@<hardware>[:<dtype>][+offloaded], e.g. llama-2-7b@a100-80gb"),
                      option("--dataset", help="only runs on this dataset"),
                      option("--max-new-tokens", type=int, help="only runs with this limit"))),
)

# Names from before the paper packages; they keep working.
ALIASES = {
    "token_recycling_table1": "token_recycling/table1",
    "tr_fig3": "token_recycling/fig3",
    "tr_fig4": "token_recycling/fig4",
    "tr_auto": "token_recycling/auto",
    "dyspec_table": "dyspec/table",
    "dyspec_time_breakdown": "dyspec/time_breakdown",
    "dyspec_table5": "dyspec/table5",
}
