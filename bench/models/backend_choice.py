"""Which CPU linear backend (bench.models.linear_backend) a model config runs on: its `cpu_linear` option.

`plain` and `onednn` are taken as asked; `auto` picks the backend with the lowest T(1) + T(8), measured side by
side on the model itself (bench.models.forward_cost.measure_backends, a few seconds) once per machine, model and
dtype, and cached as JSON in the folder the caller names (the loader's: data/cache/linear_backend/). CUDA and
non-fp32 models are always `plain`. `planned` tells the backend before loading, for a sweep's skip-if-complete.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from types import SimpleNamespace

import torch

from bench.cachefile import CorruptCache, atomic_write, load_or_build
from bench.core.machine import machine_id
from bench.errors import HarnessError
from bench.models.forward_cost import measure_backends
from bench.models.linear_backend import BACKENDS, eligible, set_backend

CHOICES = ("auto", *BACKENDS)


def choice_dir(model_cache: str | Path) -> Path:
    """Choices live beside the model cache: data/cache/models -> data/cache/linear_backend/."""
    return Path(model_cache).parent / "linear_backend"


def choice_file(cache_dir: str | Path, name: str, dtype: torch.dtype, device) -> Path:
    machine = re.sub(r"[^A-Za-z0-9._-]+", "_", machine_id(device))
    return Path(cache_dir) / f"{name}-{str(dtype).replace('torch.', '')}-{machine}.json"


def read_choice(path: Path) -> dict:
    choice = json.loads(path.read_text())
    if choice.get("backend") not in BACKENDS or "ms" not in choice:
        raise CorruptCache("no backend or timings")
    return choice


def choose(model, name: str, cache_dir: str | Path) -> dict:
    """auto's measured choice for this machine, model and dtype: the backend with the lowest T(1) + T(8)."""

    def build(path: Path) -> dict:
        vocab = model.get_output_embeddings().weight.shape[0]
        probe = SimpleNamespace(model=model, device=model.device, dtype=model.dtype, vocab_size=vocab)
        with warnings.catch_warnings():  # a one-off timing on a new machine: transformers' deprecation notice
            # (past_key_values) would otherwise land in the first command's output, before its own error line
            warnings.filterwarnings("ignore", category=FutureWarning, message=".*past_key_values.*")
            seconds = measure_backends(probe, BACKENDS, sizes=(1, 8), prefix_tokens=128, reps=5)
        best = min(seconds, key=lambda b: sum(seconds[b].values()))
        choice = {"backend": best, "ms": {b: {str(n): 1000 * v for n, v in t.items()} for b, t in seconds.items()},
                  "machine": machine_id(model.device), "model": name}
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
    backend = choose(model, name, cache_dir)["backend"] if option == "auto" else option
    set_backend(model, backend)
    return backend
