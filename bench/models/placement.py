"""Where a model's weights go: one device (the default), or a device map through accelerate for models larger than
one device (a 70B target in fp16 is ~138 GB of weights), with CPU and disk offload.

A model config may set `device_map` (auto | balanced | sequential | a {module: device} map), `max_memory`
({device: size}, e.g. {0: 70GiB, cpu: 100GiB}) and `offload_folder` (disk offload; null = no disk). Before any
weight is read, the weights' size is estimated from the model's config alone (the model built on the meta device)
and a model that cannot fit where the config puts it fails in one line naming the sizes.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from bench.errors import HarnessError

GB = 1e9


def weight_bytes(path: str, dtype: torch.dtype) -> int:
    """Bytes of the model's weights in `dtype`, from its config.json alone (no weight is read)."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config)
    params = sum(p.numel() for p in model.parameters())
    out = model.get_output_embeddings()
    if getattr(config.get_text_config(), "tie_word_embeddings", False) and out is not None:
        params -= out.weight.numel()  # tied to the input embeddings when loaded (not on the meta device)
    return params * torch.tensor([], dtype=dtype).element_size()


def memory_of(device: torch.device) -> int:
    """What `device` can hold: a GPU's total memory, or the host's available memory."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    import psutil

    return psutil.virtual_memory().available


def capacity(cfg, device: torch.device) -> tuple[float, str]:
    """(bytes, description) of where the config puts the model."""
    from accelerate.utils import convert_file_size_to_int

    if cfg.get("device_map") is None:
        return memory_of(device), f"{device.type} ({'available host memory' if device.type == 'cpu' else 'total'})"
    if cfg.get("offload_folder"):
        return math.inf, "the device map with disk offload"
    max_memory = cfg.get("max_memory")
    if max_memory:
        return sum(convert_file_size_to_int(str(v)) for v in max_memory.values()), f"max_memory {dict(max_memory)}"
    gpus = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    total = sum(memory_of(d) for d in gpus) + memory_of(torch.device("cpu"))
    return total, f"{len(gpus)} GPU(s) and the host's available memory"


def check_fits(cfg, path: str, dtype: torch.dtype, device: torch.device) -> None:
    """One `error:` line, before any weight is read, when the weights alone cannot fit."""
    need = weight_bytes(path, dtype)
    room, where = capacity(cfg, device)
    if need > room:
        raise HarnessError(
            f"model '{cfg.name}' needs {need / GB:.1f} GB for its {str(dtype).replace('torch.', '')} weights alone, "
            f"more than {where} holds ({room / GB:.1f} GB): set model.device_map=auto (and model.max_memory, "
            f"model.offload_folder) to split or offload it")


def load_kwargs(cfg) -> dict:
    """from_pretrained's placement arguments: {} for one device, else the device map and its limits."""
    if cfg.get("device_map") is None:
        return {}
    kwargs = {"device_map": cfg.device_map if isinstance(cfg.device_map, str) else dict(cfg.device_map)}
    if cfg.get("max_memory"):
        kwargs["max_memory"] = dict(cfg.max_memory)
    if cfg.get("offload_folder"):
        Path(cfg.offload_folder).mkdir(parents=True, exist_ok=True)
        kwargs["offload_folder"] = str(cfg.offload_folder)
    return kwargs


def input_device(model, device: torch.device) -> torch.device:
    """Where inputs go: `device` for a model on one device; for a device map, its first GPU, else the CPU
    (accelerate's hooks move each module's inputs to where it executes, offloaded modules included)."""
    placed = getattr(model, "hf_device_map", None)
    if not placed:
        return device
    gpus = [v for v in placed.values() if v not in ("disk", "cpu")]
    if not gpus:
        return torch.device("cpu")
    return torch.device(f"cuda:{gpus[0]}" if isinstance(gpus[0], int) else str(gpus[0]))
