#!/bin/bash
# Which transformers releases the harness works with, one test a release, under the checkout's own .venv (torch
# 2.13.0+cpu): each release goes into a --target folder put first on PYTHONPATH, with huggingface-hub 1.33.0
# (releases before 5.16 refuse hub 2.x) and, where a release refuses tokenizers 0.23, tokenizers 0.22.2 next.
# Usage: bisect.sh <venv python> <worktree before the crop fix> <worktree after it> <hub folder> <tokenizers folder>
PY=$1 OLD=$2 NEW=$3 HUB=$4 TOK=$5
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled PIP_CONFIG_FILE=/dev/null
try() {  # try <tree> <release> <command...>: the command's last line, with whichever folders the release imports with
  local tree=$1 v=$2; shift 2
  rm -rf /tmp/tfv && $PY -m pip install -q --no-deps --target /tmp/tfv transformers==$v >/dev/null 2>&1
  for extra in $HUB $HUB:$TOK; do
    out=$(cd $tree && PYTHONPATH=/tmp/tfv:$extra:$tree timeout 900 "$@" 2>&1 | tail -1)
    case "$out" in *"1 error"*|*ImportError*|*"pip install transformers -U"*) continue;; esac
    echo "transformers $v, $(git -C $tree rev-parse --short HEAD): $out"; return
  done
  echo "transformers $v: does not import"
}
echo "## tests/test_engine_tiny.py (AR and every tiny-model method against greedy)"
for v in 5.0.0 5.6.0 5.13.1 5.14.0 5.24.0; do try $OLD $v $PY -m pytest -q -p no:cacheprovider tests/test_engine_tiny.py; done
for v in 5.0.0 5.6.0 5.13.1; do try $NEW $v $PY -m pytest -q -p no:cacheprovider tests/test_engine_tiny.py; done
echo "## tests/test_graph_mode.py -k identical_to_greedy (graph mode's static cache)"
for v in 5.0.0 5.2.0 5.3.0 5.4.0 5.6.0; do try $NEW $v $PY -m pytest -q -x -p no:cacheprovider tests/test_graph_mode.py -k identical_to_greedy; done
echo "## tests/test_golden_runs.py -k 'ar_record_is_hf_greedy and plain' (the embedded model's committed AR outputs)"
for v in 5.2.0 5.3.0 5.5.4 5.6.0; do rm -rf $NEW/data/cache; try $NEW $v $PY -m pytest -q -p no:cacheprovider tests/test_golden_runs.py -k "ar_record_is_hf_greedy and plain"; done
echo "## prompt_probe.py: the first HumanEval prompt's first 12 ids, tokenizer converted from the GGUF and reloaded"
for v in 5.2.0 5.3.0 5.4.0 5.5.4 5.6.0; do try $NEW $v $PY $(dirname $0)/prompt_probe.py; done
