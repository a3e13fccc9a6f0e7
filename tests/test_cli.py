"""The run CLI end to end: a real run's files. Bad input (one clear error line) is tests/test_bad_inputs.py."""

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


@pytest.mark.model
def test_real_run_writes_complete_results(tmp_path, smollm):
    # PLD: the cheapest drafting method on a CPU (Token Recycling's 80-node tree runs ~3x longer for the same check)
    proc = run_cli("method=pld", "dataset=humaneval", "run.limit=2", "run.max_new_tokens=16", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("results: ")
    run_dir = Path(last.split(" ", 1)[1])
    summary = json.loads((run_dir / "summary.json").read_text())
    records = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2 and (run_dir / "config.yaml").is_file()
    s = summary["summary"]
    assert s["lossless"] == {"checked": 2, "equal": 2, "identical": 2, "near_tie": 0, "mismatch": 0, "passed": True,
                             "first_divergences": []}
    assert abs(s["phase_sum_over_wall"] - 1) < 0.02
    for r in records:
        assert abs(sum(r["phase_times"].values()) - r["wall_time"]) <= 0.02 * r["wall_time"]
    prov = summary["provenance"]
    assert prov["torch"] and prov["transformers"] and prov["dtype"] == "float32"
    assert summary["method_settings"]["num_draft_tokens"] == 10
    assert summary["draft_rows_at_once"] is False  # PLD drafts on the host, row by row (the projection reads it)


@pytest.mark.model
@pytest.mark.slow  # the CLI's one end-to-end run in make test is test_real_run_writes_complete_results
def test_batched_run_writes_rows_and_throughput(tmp_path, smollm):
    """run.batch_size=2 over 3 HumanEval questions (the last batch has one row; HumanEval ships in a package, so
    this runs offline without the data mirror): per-row records, each lossless, the batch's timed region once
    per batch, aggregate and per-sequence throughput named. Multi-turn batches: tests/test_batch.py and the
    MT-Bench runs in the README."""
    proc = run_cli("method=pld", "dataset=humaneval", "run.limit=3", "run.max_new_tokens=16", "run.batch_size=2",
                   "run.warmup=0", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "batch 2:" in proc.stdout and "aggregate" in proc.stdout
    run_dir = Path(proc.stdout.strip().splitlines()[-1].split(" ", 1)[1])
    summary = json.loads((run_dir / "summary.json").read_text())
    records = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    assert summary["batch_size"] == 2 and len(records) == 3
    assert {r["batch"]["size"] for r in records} == {1, 2} and len({r["batch"]["id"] for r in records}) == 2
    s = summary["summary"]
    assert s["lossless"]["checked"] == s["lossless"]["equal"] == 3
    t = s["throughput"]
    assert t["batch_size"] == 2 and t["aggregate_tokens_per_s"] > 0 and t["per_sequence_tokens_per_s"] > 0
    assert abs(s["phase_sum_over_wall"] - 1) < 0.02
    for r in records:  # a row's latency is within its batch's wall time
        assert 0 < r["wall_time"] <= r["batch"]["wall_time"] + 1e-6
