"""The machine label runs are matched on before a speedup is computed (same machine, device, threads, jobs)."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path

import torch

# Set by bench.run when a parallel launcher runs several jobs side by side on this machine: their timings
# are not comparable with a job that had the machine to itself, so the label says so.
JOBS_ENV = "SPECREPRO_PARALLEL_JOBS"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def parallel_jobs() -> int:
    """How many jobs share this machine with this one (1: it runs alone)."""
    try:
        return max(1, int(os.environ.get(JOBS_ENV, "1")))
    except ValueError:
        return 1


def machine_id(device, linear_backend: str | None = None) -> str:
    """A short label runs are matched on before a speedup is computed (same machine, device, threads, jobs, and
    the CPU linear backend when it is not torch's plain one: bench.models.linear_backend)."""
    device = torch.device(device)
    jobs = parallel_jobs()
    shared = f"/{jobs}jobs" if jobs > 1 else ""
    backend = f"/{linear_backend}" if linear_backend and linear_backend != "plain" else ""
    if device.type == "cuda":
        return f"{socket.gethostname()}/{torch.cuda.get_device_name(device)}{shared}"
    return f"{socket.gethostname()}/{cpu_name()}/{torch.get_num_threads()}t{shared}{backend}"
