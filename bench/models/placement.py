"""Where a model's weights go: one device (the default), or a device map through accelerate for models larger than
one device (a 70B target in fp16 is ~138 GB of weights), with CPU and disk offload.

A model config may set `device_map` (auto | balanced | sequential | a {module: device} map), `max_memory`
({device: size}, e.g. {0: 70GiB, cpu: 100GiB}) and `offload_folder` (disk offload; null = no disk). Before any
weight is read, the weights' size is estimated from the model's config alone (the model built on the meta device)
and a model that cannot fit where the config puts it fails in one line naming the sizes (host RAM included where
the map puts weights on the host). Without a device map the weights are loaded straight onto the device. With a
strategy (`auto`, ...) and no `max_memory`, the first GPU keeps room for the draft or heads that go onto it.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from bench.errors import HarnessError

GB = 1e9
# Kept free on every GPU of a device map: the CUDA context, activations and the KV cache (a 70B target's KV cache
# is ~0.3 MB per token). Set model.max_memory to choose otherwise.
GPU_HEADROOM = 2 * 2**30
STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")  # device maps accelerate works out


def weight_bytes(path: str, dtype: torch.dtype, revision: str | None = None) -> int:
    """Bytes of the model's weights in `dtype`, from its config.json alone (no weight is read); `revision`: a hub
    repo's pinned one."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path, revision=revision)
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
    """(bytes, description) of where the config puts the model. Each device counts for what it can hold: a
    `max_memory` entry above it (e.g. `cpu: 200GiB` on a host with 32 GB free) counts for the device's own size."""
    from accelerate.utils import convert_file_size_to_int

    if cfg.get("device_map") is None:
        return memory_of(device), f"{device.type} ({'available host memory' if device.type == 'cpu' else 'total'})"
    if cfg.get("offload_folder"):
        return math.inf, "the device map with disk offload"
    max_memory = cfg.get("max_memory")
    if max_memory:
        room = sum(min(convert_file_size_to_int(str(v)), device_room(k)) for k, v in max_memory.items())
        return room, f"max_memory {dict(max_memory)} on this machine"
    gpus = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    total = sum(memory_of(d) for d in gpus) + memory_of(torch.device("cpu"))
    return total, f"{len(gpus)} GPU(s) and the host's available memory"


def device_room(key) -> float:
    """What the device a `max_memory` key names can hold here: a GPU's memory (0 if this machine lacks it), the
    host's available memory, or no limit for disk."""
    if str(key) == "disk":
        return math.inf
    if str(key) in ("cpu", "mps"):
        return memory_of(torch.device("cpu"))
    index = int(key) if isinstance(key, int) or str(key).isdigit() else torch.device(str(key)).index or 0
    return memory_of(torch.device("cuda", index)) if index < torch.cuda.device_count() else 0


def check_fits(cfg, path: str, dtype: torch.dtype, device: torch.device, revision: str | None = None) -> None:
    """One `error:` line, before any weight is read, when the weights alone cannot fit."""
    need = weight_bytes(path, dtype, revision)
    room, where = capacity(cfg, device)
    if need > room:
        raise HarnessError(
            f"model '{cfg.name}' needs {need / GB:.1f} GB for its {str(dtype).replace('torch.', '')} weights alone, "
            f"more than {where} holds ({room / GB:.1f} GB): set model.device_map=auto (and model.max_memory, "
            f"model.offload_folder) to split or offload it")


def straight_to(device: torch.device) -> dict:
    """from_pretrained's argument that loads each weight straight onto a GPU, instead of building the whole model in
    host memory first and moving it (a 34B target in fp16 would need ~68 GB of host RAM); {} on the CPU."""
    return {} if device.type == "cpu" else {"device_map": device}


def load_kwargs(cfg, device: torch.device, reserve: int = 0) -> dict:
    """from_pretrained's placement arguments: straight onto `device` without a device map, else the device map and
    its limits. A strategy (auto, balanced, sequential) without `max_memory` gets one that keeps `reserve` bytes
    (the draft or heads, which go whole onto the first GPU) and GPU_HEADROOM free."""
    if cfg.get("device_map") is None:
        return straight_to(device)
    kwargs = {"device_map": cfg.device_map if isinstance(cfg.device_map, str) else dict(cfg.device_map)}
    if cfg.get("max_memory"):
        kwargs["max_memory"] = dict(cfg.max_memory)
    elif cfg.device_map in STRATEGIES and torch.cuda.device_count() > 0:
        kwargs["max_memory"] = reserved_max_memory(reserve)
    if cfg.get("offload_folder"):
        Path(cfg.offload_folder).mkdir(parents=True, exist_ok=True)
        kwargs["offload_folder"] = str(cfg.offload_folder)
    return kwargs


def reserved_max_memory(reserve: int) -> dict:
    """max_memory for accelerate's placement: every GPU less GPU_HEADROOM, the first also less `reserve`, and 90% of
    the host's available memory (transformers' own default for the host). accelerate's balancing fills the GPUs
    before the last up to their share and leaves the last its whole budget, so a 70B target in fp16 still fits two
    80 GB GPUs beside a 7B draft on the first."""
    gpus = range(torch.cuda.device_count())
    room = {i: int(max(0, memory_of(torch.device("cuda", i)) - GPU_HEADROOM)) for i in gpus}
    room[0] = max(0, room[0] - int(reserve))
    room["cpu"] = int(0.9 * memory_of(torch.device("cpu")))
    return room


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
