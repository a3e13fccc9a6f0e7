"""Which CPU linear backend (bench.models.linear_backend) a model config runs on: its `cpu_linear` option.

`plain` and `onednn` are taken as asked; `auto` measures, inside the model's own forwards, which kernel multiplies
each layer shape faster at 1-16 rows (bench.models.linear_crossover, ~10 s), once per machine, model and dtype, and
caches it as JSON in the folder the caller names (the loader's: data/cache/linear_backend/): `onednn` where oneDNN
won every shape from one row, else `mixed` (each shape on torch's kernel up to its crossover, oneDNN above). CUDA and
non-fp32 models are always `plain`. `planned` tells the backend before loading, for a sweep's skip-if-complete.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import torch

from bench.cachefile import CorruptCache, atomic_write, load_or_build
from bench.core.machine import machine_id
from bench.errors import HarnessError
from bench.models.linear_backend import KERNELS, eligible, set_backend
from bench.models.linear_crossover import crossovers, layer_times

CHOICES = ("auto", *KERNELS)  # `mixed` needs measured crossovers: only `auto` gives it
# Part of the file name: a choice made by an older rule (the whole model's T(1) + T(8), no crossovers) is not read.
RULE = "crossover"


def choice_dir(model_cache: str | Path) -> Path:
    """Choices live beside the model cache: data/cache/models -> data/cache/linear_backend/."""
    return Path(model_cache).parent / "linear_backend"


def choice_file(cache_dir: str | Path, name: str, dtype: torch.dtype, device) -> Path:
    machine = re.sub(r"[^A-Za-z0-9._-]+", "_", machine_id(device))
    return Path(cache_dir) / f"{name}-{str(dtype).replace('torch.', '')}-{machine}-{RULE}.json"


def read_choice(path: Path) -> dict:
    choice = json.loads(path.read_text())
    if choice.get("backend") not in ("onednn", "mixed") or not isinstance(choice.get("plain_rows"), dict):
        raise CorruptCache("no backend or crossovers")
    return choice


def decide(times: dict) -> dict:
    """The choice from layer_times' {shape: {kernel: {n: seconds}}}: crossovers, and `mixed` unless all are 0."""
    rows = crossovers(times)
    return {"backend": "mixed" if any(rows.values()) else "onednn", "plain_rows": rows,
            "layer_us": {shape: {k: {str(n): round(1e6 * s, 1) for n, s in t.items()} for k, t in by_kernel.items()}
                         for shape, by_kernel in times.items()}}


def choose(model, name: str, cache_dir: str | Path) -> dict:
    """auto's measured choice for this machine, model and dtype (decide)."""

    def build(path: Path) -> dict:
        with warnings.catch_warnings():  # a one-off timing on a new machine: transformers' deprecation notice
            # (past_key_values) would otherwise land in the first command's output, before its own error line
            warnings.filterwarnings("ignore", category=FutureWarning, message=".*past_key_values.*")
            times = layer_times(model)
        choice = {**decide(times), "machine": machine_id(model.device), "model": name}
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
    set_backend(model, choice["backend"], choice.get("plain_rows"))
    return choice["backend"]
