"""Where and with what a run was measured: enough to tell whether two runs are comparable."""

from __future__ import annotations

import platform
import socket
import subprocess
from pathlib import Path

import torch
import transformers

from bench.core.machine import cpu_name, machine_id, parallel_jobs
from bench.paths import PROJECT


def _git(*args) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=PROJECT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def boot_id() -> str | None:
    """This boot of this machine (Linux): two runs with the same one ran on the same machine instance, which a
    hostname alone cannot say on VMs that reuse theirs; reports pair a run with its baseline by it."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def provenance(device, dtype, linear_backend: str = "plain") -> dict:
    device = torch.device(device)
    status = _git("status", "--porcelain")
    return {
        "git_sha": _git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "device": str(device),
        "cpu": cpu_name(),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "threads": torch.get_num_threads(),
        "parallel_jobs": parallel_jobs(),
        "dtype": str(dtype).replace("torch.", ""),
        "hostname": socket.gethostname(),
        "boot_id": boot_id(),
        "linear_backend": linear_backend,
        "machine": machine_id(device, linear_backend),
    }
