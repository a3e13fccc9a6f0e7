"""Runs and sweeps that survive a kill: the checkpoint's rules, and a sweep SIGKILLed in the middle of a job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from bench.errors import HarnessError
from bench.paths import PROJECT
from bench.run.checkpoint import Checkpoint, config_key
from bench.run.store import load_runs


def record(i: int) -> dict:
    return {"question_id": f"q{i}", "turn": 0, "output_ids": [i, i + 1]}


def test_config_key_ignores_what_does_not_change_a_measurement():
    cfg = OmegaConf.create({"run": {"limit": 3, "resume": True}, "logger": {"name": "none"},
                            "paths": {"results": "a"}, "method": {"name": "pld"}})
    other = OmegaConf.merge(cfg, {"run": {"resume": False}, "logger": {"name": "wandb"}, "paths": {"results": "b"}})
    assert config_key(cfg) == config_key(other)
    assert config_key(cfg) != config_key(OmegaConf.merge(cfg, {"run": {"limit": 4}}))
    # run.record_steps off is the key runs had before the switch existed (a resumed sweep still finds them); on, the
    # records differ, so the run is another
    assert config_key(OmegaConf.merge(cfg, {"run": {"record_steps": False}})) == config_key(cfg)
    assert config_key(OmegaConf.merge(cfg, {"run": {"record_steps": True}})) != config_key(cfg)


def test_checkpoint_resumes_after_the_last_saved_record(tmp_path):
    ck = Checkpoint(tmp_path, "k").open("run-1")
    ck.save(record(0), {"adj": torch.arange(4)})
    ck.save(record(1), {"adj": torch.arange(4) * 2})
    ck.lock.release()  # as a killed process would
    with (ck.dir / "records.jsonl").open("a") as f:  # a record whose state never got written, then a torn line
        f.write(json.dumps(record(2)) + "\n" + '{"question_id": "q3", "tu')
    again = Checkpoint(tmp_path, "k").open("run-2")
    assert again.run_id == "run-1" and again.resumed_at == 2
    assert [r["question_id"] for r in again.records] == ["q0", "q1"]
    assert torch.equal(again.proposer_state["adj"], torch.arange(4) * 2)
    assert len((again.dir / "records.jsonl").read_text().splitlines()) == 2
    again.save(record(2), {})
    again.close(done=True)
    assert not again.dir.exists()


def test_a_run_resumed_in_another_sitting_says_so_and_pairs_only_with_a_baseline_of_the_same(tmp_path, monkeypatch):
    from bench.report.select import paired_baseline
    from bench.run import checkpoint
    from bench.run.store import Run

    monkeypatch.setattr(checkpoint, "boot_id", lambda: "boot-a")
    ck = Checkpoint(tmp_path, "k").open("run-1")
    ck.save(record(0), {})
    ck.lock.release()
    monkeypatch.setattr(checkpoint, "boot_id", lambda: "boot-b")  # the machine rebooted (another session)
    again = Checkpoint(tmp_path, "k").open("run-2")
    assert again.boots() == ["boot-a", "boot-b"] and again.resumes[0]["boot_id"] == "boot-b"
    again.lock.release()
    assert Checkpoint(tmp_path, "k").open("run-3").boots() == ["boot-a", "boot-b"]  # a third try, same boot
    rows = [{"question_id": "q0", "turn": 0}]
    labels = {"method": "ar", "model": "m", "dataset": "d", "machine": "x", "max_new_tokens": 8, "temperature": 0.0,
              "batch_size": 1, "created": "2026-11-30T10:00:00"}

    def run(name, created, **prov):
        r = Run(Path(name), {**labels, "run_id": name, "created": created, "provenance": prov})
        r.__dict__["records"] = rows  # the prompt-turns pairing reads, without files
        return r

    in_b = run("ar-b", "2026-11-30T12:00:00", boot_id="boot-b")
    in_a = run("ar-a", "2026-11-30T09:00:00", boot_id="boot-a")
    assert paired_baseline([in_a, in_b], run("plain", "2026-11-30T09:00:00", boot_id="boot-b"), "ar") is in_b
    # a run resumed in boot-b has no sitting of its own: the AR nearest in time, not boot-b's for being its last
    assert paired_baseline([in_a, in_b], run("mixed", "2026-11-30T09:30:00", boot_ids=["boot-a", "boot-b"],
                                             boot_id="boot-b"), "ar") is in_a


def test_no_resume_and_completed_runs_start_over(tmp_path):
    ck = Checkpoint(tmp_path, "k").open("run-1")
    ck.save(record(0), {})
    ck.lock.release()
    fresh = Checkpoint(tmp_path, "k").open("run-2", resume=False)
    assert fresh.run_id == "run-2" and not fresh.records and fresh.resumed_at is None
    fresh.save(record(0), {})
    fresh.lock.release()
    (tmp_path / "runs" / "run-2").mkdir()
    (tmp_path / "runs" / "run-2" / "summary.json").write_text("{}")  # it completed before its checkpoint went
    after = Checkpoint(tmp_path, "k").open("run-3")
    assert after.run_id == "run-3" and not after.records


def test_corrupt_state_starts_over_with_one_line(tmp_path, capsys):
    ck = Checkpoint(tmp_path, "k").open("run-1")
    ck.save(record(0), {})
    ck.lock.release()
    (ck.dir / "state.pt").write_bytes(b"not a checkpoint")
    again = Checkpoint(tmp_path, "k").open("run-2")
    assert again.run_id == "run-2" and not again.records
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "state.pt" in err[0]


def test_a_complete_jobs_leftover_checkpoint_goes_unless_another_process_holds_it(tmp_path):
    ck = Checkpoint(tmp_path, "k").open("run-1")
    ck.save(record(0), {})
    code = "import sys; from bench.run.checkpoint import Checkpoint; Checkpoint(sys.argv[1], 'k').drop_leftover()"
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=PROJECT, check=True)
    assert (ck.dir / "state.pt").is_file()  # held here: the other process leaves it
    ck.lock.release()  # as a process killed after writing its run would
    Checkpoint(tmp_path, "k").drop_leftover()
    assert not ck.dir.exists() and not Path(ck.lock.lock_file).exists()
    Checkpoint(tmp_path, "k").drop_leftover()  # nothing left: nothing to do


def test_one_process_per_job(tmp_path):
    """A second process on the same job stops at once (file locks are per process, hence a subprocess)."""
    held = Checkpoint(tmp_path, "k").open("run-1")
    code = ("import sys; from bench.run.checkpoint import Checkpoint\n"
            "try: Checkpoint(sys.argv[1], 'k').open('run-2')\nexcept Exception as e: print(type(e).__name__, e)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=PROJECT, capture_output=True, text=True,
                         check=False)
    assert out.stdout.startswith(f"{HarnessError.__name__} this run is in progress"), out.stdout + out.stderr
    held.close(done=True)


# ---- a sweep killed in the middle of a job, then the same command again

# Token Recycling carries its adjacency matrix across prompts (hot start): the checkpoint must restore it for the
# resumed prompts to draft, and accept, what the uninterrupted run did. On an 8-node tree rather than the default
# 80 (each step verifies 9 tokens, not 81), and without the AR reference behind the lossless check: the resumed
# run is compared with the uninterrupted one below, token for token and step for step.
SWEEP = ("-m", "method=pld,token_recycling", "dataset=humaneval", "run.limit=3", "run.max_new_tokens=24",
         "run.warmup=0", "logger=none", "run.check_lossless=false",
         "tree.paths=[[0],[1],[2],[3],[0,0],[1,0],[0,0,0],[0,0,0,0]]")


def sweep(results: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "WANDB_MODE": "disabled"}
    return subprocess.Popen([sys.executable, "-m", "bench.run", *SWEEP, f"paths.results={results}"],
                            cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def finish(proc: subprocess.Popen) -> str:
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return err


def saved_a_prompt(partial: Path, finished: set[str]) -> bool:
    """A checkpoint that counts a prompt-turn, of a run not yet complete. state.pt is written after a prompt-turn's
    record and makes it count (bench.run.checkpoint): waiting for the record alone raced the state's write under
    load. And a complete run's checkpoint lives on for a moment after its run is written (jobs: written, then
    removed): taking pld's for token_recycling's killed the sweep before token_recycling began (CI, 2026-12-01)."""
    for state in partial.glob("*/state.pt"):
        try:
            if torch.load(state, weights_only=True)["run_id"] not in finished:
                return True
        except (OSError, EOFError, RuntimeError, KeyError):  # removed or replaced while read: look again
            continue
    return False


def by_method(results: Path) -> dict:
    runs = load_runs(results)
    assert len(runs) == len({r.meta["method"] for r in runs}), "a job ran twice"
    return {r.meta["method"]: r for r in runs}


@pytest.mark.model
@pytest.mark.slow
def test_killed_sweep_resumes_to_the_uninterrupted_result(tmp_path, smollm):
    finish(sweep(tmp_path / "whole"))
    whole = by_method(tmp_path / "whole")

    killed = tmp_path / "killed"
    proc = sweep(killed)
    partial = killed / "runs" / ".partial"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:  # kill once token_recycling has saved a prompt
        done = {r.run_id for r in load_runs(killed) if r.meta["method"] == "pld"}
        if done and saved_a_prompt(partial, done):
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the sweep ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    (before,) = load_runs(killed)
    assert before.meta["method"] == "pld"

    err = finish(sweep(killed))
    assert "skip: pld on humaneval" in err and "resuming" in err
    resumed = by_method(killed)
    assert sorted(resumed) == ["pld", "token_recycling"]
    assert resumed["token_recycling"].meta["resumed"] and not resumed["pld"].meta["resumed"]
    assert resumed["pld"].run_id == before.run_id
    for method, run in resumed.items():
        got = [(r["question_id"], r["turn"]) for r in run.records]
        assert len(got) == len(set(got)) == 3, f"{method}: every prompt exactly once"
        ref = whole[method]
        assert [r["output_ids"] for r in run.records] == [r["output_ids"] for r in ref.records]
        assert [r["accept_lengths"] for r in run.records] == [r["accept_lengths"] for r in ref.records]
        assert run.meta["summary"]["mat"] == ref.meta["summary"]["mat"]
    assert not list(partial.glob("*/"))  # pld's too, had the kill come before its checkpoint went


@pytest.mark.model
def test_a_resumed_batched_run_numbers_its_batches_after_the_saved_ones(smollm, tmp_path):
    """Metrics key a batch's timed region by its id: a resumed process (whose warm-up counts from 0 again) must not
    reuse a saved batch's id, or that batch's wall time is dropped and the aggregate rate inflated."""
    from types import SimpleNamespace

    from bench.metrics import timed_regions
    from bench.run.runner import Runner
    from tests.conftest import compose_cfg

    def runner():
        return Runner(compose_cfg("model=smollm2-135m", "dataset=humaneval", "method=ar", "run.limit=4",
                                  "run.batch_size=2", "run.max_new_tokens=4", "run.warmup=1", "logger=none",
                                  f"paths.results={tmp_path}"))

    whole = runner().run()
    saved = whole[:2]  # the first batch, as a killed run's checkpoint holds it
    ckpt = SimpleNamespace(resumed_at=2, proposer_state={}, records=saved, run_id="r", save=lambda *a: None)
    resumed = runner().run(ckpt)
    ids = [r["batch"]["id"] for r in resumed]
    assert ids[0] == ids[1] < ids[2] == ids[3] and len(timed_regions(resumed)) == 2
