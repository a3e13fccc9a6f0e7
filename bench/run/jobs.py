"""One job of `python -m bench.run`: threads and machine label, skip-if-complete, checkpointed measurement.

A parallel launcher (conf/hydra/launcher/local_parallel.yaml) runs several jobs side by side on one machine:
each then gets cores / jobs torch threads, and the machine label says how many jobs shared the machine, so a
speedup pairs a run only with a baseline measured the same way. A re-launched sweep skips every job whose
complete run (same config key, same machine label) exists, and resumes a killed one from its checkpoint.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from bench.core.machine import JOBS_ENV, machine_id, parallel_jobs
from bench.errors import HarnessError
from bench.models import backend_choice
from bench.models.identity import weights_id
from bench.paths import project_path
from bench.run.checkpoint import Checkpoint, config_key, job_key
from bench.run.runner import Runner, command_overrides, run_id, run_summary
from bench.run.store import find_complete, write_run
from bench.run.sweep_failures import in_sweep


def launcher_jobs() -> int:
    """Jobs the sweep's launcher runs at once on this machine: joblib's n_jobs (-1 = one per core), else 1."""
    if not in_sweep():
        return 1
    n = HydraConfig.get().launcher.get("n_jobs")
    if n is None:
        return 1
    return max(1, cpus() + 1 + int(n)) if int(n) < 0 else int(n)


def cpus() -> int:
    """Cores this process may use (affinity and cgroup limits included), as joblib counts them for n_jobs=-1."""
    from joblib import cpu_count

    return cpu_count()


def check_gpu_jobs(model_cfg, jobs: int) -> None:
    """HarnessError when a parallel launcher would run several jobs of a CUDA model at once: every job loads it
    on model.device, so they would share one GPU (n_jobs=-1 starts one per CPU core), and each would take the whole
    node's GPUs with a device map."""
    if jobs <= 1 or torch.device(model_cfg.device).type != "cuda" or not torch.cuda.is_available():
        return
    raise HarnessError(
        f"the parallel launcher runs {jobs} jobs at once, and every job loads model '{model_cfg.name}' on "
        f"{model_cfg.device} ({torch.cuda.device_count()} GPU(s) here): run the sweep with hydra.launcher.n_jobs=1, "
        "or one sweep per GPU (model.device=cuda:0, cuda:1, ... with run.jobs_beside), or hydra/launcher=slurm")


def set_threads(run_cfg) -> None:
    # jobs_beside: processes started by hand beside this one (a second sweep); they share the cores as the
    # launcher's jobs do, so they count in the label.
    jobs = launcher_jobs() + int(run_cfg.get("jobs_beside") or 0)
    if (preset := parallel_jobs()) > jobs:  # set by hand: overwriting it would label a shared run as run alone
        raise HarnessError(f"{JOBS_ENV}={preset} is set, but this job counts {jobs} (its launcher's jobs and "
                           f"run.jobs_beside): count the processes beside it with run.jobs_beside={preset - 1}")
    os.environ[JOBS_ENV] = str(jobs)  # read by machine_id, here and in anything this job starts
    threads = run_cfg.threads or (max(1, cpus() // jobs) if jobs > 1 else None)
    if threads:
        torch.set_num_threads(int(threads))


def describe(cfg) -> str:
    swept = " ".join(f"{k}={v}" for k, v in command_overrides().items())
    return f"{cfg.method.name} on {cfg.dataset.name}" + (f" ({swept})" if swept else "")


def measure(cfg, selection: tuple[list[dict], str] | None = None) -> Path | None:
    """Run one job and write its results; None when a sweep finds the job already complete. `selection`: its
    dataset's items, loaded already (Runner)."""
    check_gpu_jobs(cfg.model, launcher_jobs())
    set_threads(cfg.run)
    results = project_path(cfg.paths.results)
    device = torch.device(cfg.model.device)
    backend = backend_choice.planned(cfg.model, backend_choice.choice_dir(project_path(cfg.paths.model_cache)))
    usable = device.type != "cuda" or torch.cuda.is_available()
    machine = machine_id(device, backend) if usable and backend else None  # None: known once the model loads
    weights = weights_id(cfg.model)  # from the config and files: before the model loads
    if cfg.run.resume and in_sweep() and machine:
        done = find_complete(results, config_key(cfg), machine, weights)
        if done is not None:
            Checkpoint(results, job_key(cfg, machine, weights)).drop_leftover()
            print(f"skip: {describe(cfg)}: complete run {done.run_id} exists", file=sys.stderr)
            return None
    torch.manual_seed(cfg.run.seed)
    runner = Runner(cfg, selection)
    # the weights as loaded: a hub model downloaded by this run has its commit now, and a resume asks after it
    ckpt = Checkpoint(results, job_key(cfg, machine_id(runner.bundle.device, runner.bundle.linear_backend),
                                       runner.bundle.weights))
    ckpt.open(run_id(cfg), resume=cfg.run.resume)
    finished = False
    try:
        records = runner.run(ckpt)
        summary = run_summary(cfg, runner, records, ckpt)
        path = write_run(results, records, summary, OmegaConf.to_yaml(cfg, resolve=True))
        finished = True
    finally:
        ckpt.close(done=finished)
    return path
