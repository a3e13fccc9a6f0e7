"""The run CLI end to end: a real run's files, and one clear error line (non-zero exit) for bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.paths import PROJECT


def run_cli(*args, tmp_path, env=None):
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "bench.run", f"paths.results={tmp_path / 'results'}", *args],
        cwd=PROJECT, capture_output=True, text=True, env=full_env, timeout=600, check=False,
    )


def assert_one_line_error(proc, *words):
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:")
    for w in words:
        assert w in lines[0]


@pytest.mark.parametrize("group", ["method", "dataset", "model"])
def test_unknown_name(group, tmp_path):
    proc = run_cli(f"{group}=nope", tmp_path=tmp_path)
    assert proc.returncode == 2
    assert_one_line_error(proc, f"unknown {group} 'nope'")
    assert not (tmp_path / "results" / "runs").exists()


def test_missing_data(tmp_path):
    proc = run_cli("dataset=gsm8k", f"paths.data_mirror={tmp_path / 'none'}",
                   f"paths.data_cache={tmp_path / 'cache'}", tmp_path=tmp_path)
    assert_one_line_error(proc, "gsm8k", "mirror", "cache", "hub")


def test_malformed_line(tmp_path):
    mirror = tmp_path / "mirror" / "mt_bench"
    mirror.mkdir(parents=True)
    (mirror / "question.jsonl").write_text('{"question_id": 1, "category": "x", "turns": ["hi"]}\n{oops\n')
    proc = run_cli("dataset=mt_bench", f"paths.data_mirror={tmp_path / 'mirror'}", tmp_path=tmp_path)
    assert_one_line_error(proc, "line 2")


@pytest.mark.model
def test_model_offline(tmp_path, smollm):  # smollm: the one-time GGUF conversion happens first
    proc = run_cli("model=vicuna-7b", "model.device=cpu", "run.limit=1", tmp_path=tmp_path)
    assert_one_line_error(proc, "vicuna-7b")


@pytest.mark.model
def test_prompt_longer_than_context(tmp_path, smollm):
    proc = run_cli("run.limit=1", "run.max_new_tokens=9000", tmp_path=tmp_path)
    assert_one_line_error(proc, "context")
    assert not list((tmp_path / "results").glob("runs/*"))


@pytest.mark.model
def test_real_run_writes_complete_results(tmp_path, smollm):
    proc = run_cli("method=token_recycling", "dataset=humaneval", "run.limit=2", "run.max_new_tokens=24",
                   tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("results: ")
    run_dir = Path(last.split(" ", 1)[1])
    summary = json.loads((run_dir / "summary.json").read_text())
    records = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2 and (run_dir / "config.yaml").is_file()
    s = summary["summary"]
    assert s["lossless"] == {"checked": 2, "equal": 2, "first_divergences": []}
    assert abs(s["phase_sum_over_wall"] - 1) < 0.02
    for r in records:
        assert abs(sum(r["phase_times"].values()) - r["wall_time"]) <= 0.02 * r["wall_time"]
    prov = summary["provenance"]
    assert prov["torch"] and prov["transformers"] and prov["dtype"] == "float32"
    assert summary["method_settings"]["tree_size"] == 80
