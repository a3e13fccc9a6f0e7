"""Sweeps through Hydra launchers: parallel local jobs (joblib) and submitit (SLURM's code path, local executor)."""

from __future__ import annotations

import os
import subprocess
import sys

import joblib
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from bench.errors import HarnessError
from bench.paths import PROJECT
from bench.run.store import load_runs

TINY = ("method=ar,pld", "dataset=humaneval", "run.limit=1", "run.max_new_tokens=8", "run.warmup=0", "logger=none")


def sweep(tmp_path, *args):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled",
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "bench.run", "-m", *TINY, *args, f"paths.results={tmp_path / 'results'}",
           f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    proc = subprocess.run(cmd, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def launcher(name: str):
    with initialize_config_dir(config_dir=str(PROJECT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra/launcher={name}"], return_hydra_config=True)
    return OmegaConf.to_container(cfg.hydra.launcher, resolve=True)


def test_launcher_configs_compose():
    assert launcher("local_parallel")["_target_"].endswith("JoblibLauncher")
    assert launcher("local_parallel")["n_jobs"] == -1  # one job per core
    slurm = launcher("slurm")
    assert slurm["_target_"].endswith("SlurmLauncher")
    assert slurm["max_num_timeout"] >= 1  # a preempted job is requeued and resumes from its checkpoint


@pytest.mark.model
@pytest.mark.slow
def test_local_parallel_sweep_labels_its_machine(tmp_path, smollm):
    sweep(tmp_path, "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=2")
    runs = load_runs(tmp_path / "results")
    assert sorted(r.meta["method"] for r in runs) == ["ar", "pld"]
    for r in runs:
        assert "/1t/2jobs" in r.meta["machine"] and r.meta["provenance"]["parallel_jobs"] == 2
    pld = next(r for r in runs if r.meta["method"] == "pld")
    assert pld.meta["summary"]["lossless"]["equal"] == 1


@pytest.mark.model
@pytest.mark.slow
def test_submitit_local_sweep_finds_two_complete_runs(tmp_path, smollm):
    sweep(tmp_path, "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10")
    runs = load_runs(tmp_path / "results")
    assert sorted(r.meta["method"] for r in runs) == ["ar", "pld"]
    assert all(len(r.records) == 1 for r in runs)
    # the same command again: both jobs are complete and skipped
    again = sweep(tmp_path, "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10")
    assert len(load_runs(tmp_path / "results")) == 2
    logs = again.stderr + "".join(p.read_text() for p in (tmp_path / "sweep").rglob("*_log.err"))
    assert logs.count("skip: ") == 2


def test_jobs_started_beside_a_run_count_in_its_label(monkeypatch):
    from bench.core.machine import JOBS_ENV, machine_id
    from bench.run.jobs import set_threads

    threads = torch.get_num_threads()
    monkeypatch.setenv(JOBS_ENV, "1")
    try:
        set_threads(OmegaConf.create({"threads": None, "jobs_beside": 1}))
        assert machine_id("cpu").endswith(f"/{torch.get_num_threads()}t/2jobs")
        assert torch.get_num_threads() == max(1, joblib.cpu_count() // 2)
        monkeypatch.setenv(JOBS_ENV, "2")  # set by hand, not counted by the config: refused, never overwritten
        with pytest.raises(HarnessError, match="run.jobs_beside=1"):
            set_threads(OmegaConf.create({"threads": None, "jobs_beside": 0}))
    finally:
        torch.set_num_threads(threads)
