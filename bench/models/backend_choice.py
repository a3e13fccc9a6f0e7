"""Which CPU linear backend (bench.models.linear_backend) a model config runs on: its `cpu_linear` option.

`plain` and `onednn` are taken as asked; `auto` times the model's forward over 1, 2, 4, 8 and 16 tokens on both
kernels, side by side (bench.models.forward_cost.measure_backends, ~10 s), once per machine, model and dtype, and
caches the choice as JSON in the folder the caller names (the loader's: data/cache/linear_backend/): `onednn` where
oneDNN was faster from one token, else `mixed` with the crossover (`crossover`). The whole forward is timed, not
each layer alone: on the Intel VM oneDNN's lm_head won alone at one row and lost in the forward. CUDA and non-fp32
models are always `plain`. `planned` tells the backend before loading, for a sweep's skip-if-complete. A timing that
other processes intruded on is used by its own process and not cached (`intruded`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import torch

from bench.cachefile import CorruptCache, atomic_write, load_or_build
from bench.core.machine import machine_id, parallel_jobs
from bench.errors import HarnessError
from bench.models.forward_cost import measure_backends
from bench.models.linear_backend import KERNELS, eligible, set_backend

CHOICES = ("auto", *KERNELS)  # `mixed` needs a measured crossover: only `auto` gives it
SIZES = (1, 2, 4, 8, 16)
# Part of the file name: a choice made by an older rule (the lower T(1) + T(8), no crossover) is not read.
RULE = "crossover"
# Other processes on the cores a timing needs make it slow and erratic (beside one busy loop, two threads' forwards
# took 2.5-5.2x their time alone), and a choice cached from such a moment lasts: on the AMD EPYC VM it ran every
# later two-thread run on plain kernels at one row, where oneDNN was faster alone (evidence/cpu_linear/
# vm_AMD_EPYC-20261201-intrusion/). The cores' worth of CPU others may take beyond those left free:
INTRUSION_CORES = 0.25


def choice_dir(model_cache: str | Path) -> Path:
    """Choices live beside the model cache: data/cache/models -> data/cache/linear_backend/."""
    return Path(model_cache).parent / "linear_backend"


def choice_file(cache_dir: str | Path, name: str, dtype: torch.dtype, device) -> Path:
    machine = re.sub(r"[^A-Za-z0-9._-]+", "_", machine_id(device))
    return Path(cache_dir) / f"{name}-{str(dtype).replace('torch.', '')}-{machine}-{RULE}.json"


def read_choice(path: Path) -> dict:
    choice = json.loads(path.read_text())
    if choice.get("backend") not in ("onednn", "mixed") or not isinstance(choice.get("plain_rows"), int):
        raise CorruptCache("no backend or crossover")
    return choice


def crossover(seconds: dict[str, dict[int, float]]) -> int:
    """The largest size up to which torch's kernel was faster at every measured size; 0 where oneDNN was faster
    from the smallest (a tie goes to oneDNN). seconds: {kernel: {n: forward seconds}}."""
    rows = 0
    for n in sorted(seconds["plain"]):
        if seconds["plain"][n] >= seconds["onednn"][n]:
            break
        rows = n
    return rows


def machine_busy_seconds() -> float:
    """CPU seconds every process has used so far (steal time too: a hypervisor's other guests take it)."""
    import psutil

    t = psutil.cpu_times()._asdict()
    for counted_twice_or_idle in ("guest", "guest_nice", "idle", "iowait"):  # guest time is in user's already
        t.pop(counted_twice_or_idle, None)
    return sum(t.values())


@contextlib.contextmanager
def others_load():
    """Yields a dict that gets `cores` on exit: the cores' worth of CPU other processes used meanwhile."""
    load = {}
    wall, busy, own = time.perf_counter(), machine_busy_seconds(), time.process_time()
    try:
        yield load
    finally:
        others = (machine_busy_seconds() - busy) - (time.process_time() - own)
        load["cores"] = max(0.0, others) / max(time.perf_counter() - wall, 1e-9)


def intruded(others_cores: float, threads: int, cpus: int) -> bool:
    """Whether others took more than INTRUSION_CORES beyond the cores this timing's threads left free. A job meant
    to run beside others (run.jobs_beside, a label of its own) is timed as it will run."""
    return parallel_jobs() == 1 and others_cores - max(0, cpus - threads) > INTRUSION_CORES


def choose(model, name: str, cache_dir: str | Path) -> dict:
    """auto's measured choice for this machine, model and dtype: `mixed` at the crossover, or `onednn`."""

    def build(path: Path) -> dict:
        vocab = model.get_output_embeddings().weight.shape[0]
        probe = SimpleNamespace(model=model, device=model.device, dtype=model.dtype, vocab_size=vocab)
        with warnings.catch_warnings():  # a one-off timing on a new machine: transformers' deprecation notice
            # (past_key_values) would otherwise land in the first command's output, before its own error line
            warnings.filterwarnings("ignore", category=FutureWarning, message=".*past_key_values.*")
            with others_load() as load:
                seconds = measure_backends(probe, KERNELS, sizes=SIZES, prefix_tokens=128, reps=5)
        rows = crossover(seconds)
        choice = {"backend": "mixed" if rows else "onednn", "plain_rows": rows,
                  "ms": {k: {str(n): 1000 * v for n, v in t.items()} for k, t in seconds.items()},
                  "machine": machine_id(model.device), "model": name, "others_cores": round(load["cores"], 2)}
        # The machine's cores, not this process's affinity: psutil's times (others_load) are machine-wide.
        if intruded(load["cores"], torch.get_num_threads(), os.cpu_count() or 1):
            print(f"cache: other processes took {load['cores']:.1f} cores while the CPU linear backend was timed; "
                  f"this process runs on its choice ({choice['backend']}), not cached: the next one times it again",
                  file=sys.stderr)
            return choice
        atomic_write(path, json.dumps(choice, indent=2))
        return choice

    return load_or_build(choice_file(cache_dir, name, model.dtype, model.device), read_choice, build,
                         "linear-backend choice")


def planned(model_cfg, cache_dir: str | Path) -> str | None:
    """The backend a model config will run on, known before loading it; None when `auto` has not measured yet."""
    option = model_cfg.get("cpu_linear", "auto")
    dtype = getattr(torch, str(model_cfg.dtype), None)
    if option not in CHOICES or not isinstance(dtype, torch.dtype):
        return None  # loading says what is wrong
    if not eligible(model_cfg.device, dtype) or model_cfg.get("device_map") is not None:
        return "plain"  # a device map always runs plain (bench.models.loading)
    if option != "auto":
        return option
    try:
        return read_choice(choice_file(cache_dir, model_cfg.name, dtype, model_cfg.device))["backend"]
    except (OSError, ValueError, KeyError, CorruptCache):
        return None


def apply(model, option: str, name: str, cache_dir: str | Path) -> str:
    """Put `model` on the backend the model option asks for (auto | plain | onednn); returns the one in effect."""
    if option not in CHOICES:
        raise HarnessError(f"unknown model.cpu_linear '{option}' (known: {', '.join(CHOICES)})")
    if not eligible(model.device, model.dtype):
        if option == "onednn":
            raise HarnessError(f"model.cpu_linear=onednn needs an fp32 model on a CPU with oneDNN "
                               f"(this one: {model.dtype} on {model.device})")
        return "plain"
    choice = choose(model, name, cache_dir) if option == "auto" else {"backend": option}
    set_backend(model, choice["backend"], choice.get("plain_rows", 0))
    return choice["backend"]
