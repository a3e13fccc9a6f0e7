"""The machine label runs are matched on before a speedup is computed (same machine, same device, same threads)."""

from __future__ import annotations

import platform
import socket
from pathlib import Path

import torch


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
