"""Where and with what a run was measured: enough to tell whether two runs are comparable."""

from __future__ import annotations

import platform
import socket
import subprocess
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parents[1]


def _git(*args) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_id(device) -> str:
    """A short label runs are matched on before a speedup is computed (same machine, same device)."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"{socket.gethostname()}/{torch.cuda.get_device_name(device)}"
    return f"{socket.gethostname()}/{cpu_name()}/{torch.get_num_threads()}t"


def provenance(device, dtype) -> dict:
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
        "dtype": str(dtype).replace("torch.", ""),
        "hostname": socket.gethostname(),
        "machine": machine_id(device),
    }
