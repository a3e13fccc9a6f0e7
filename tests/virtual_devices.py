"""A CPU stand-in for a model split over several GPUs, to test the multi-device paths without GPUs.

Every tensor gets a *virtual device*: `torch.device("cpu", k)` plays cuda:k (a CPU tensor accepts a device index
and ignores it, so the data stays on the host). `VirtualDevices` is a torch-function mode that
- tags what factory functions and `.to()` make with the device they name (`device=torch.device("cpu", 1)`),
- gives every op's outputs the virtual device of its inputs,
- answers `tensor.device` with the virtual device, so code that places new tensors "where x is" does so,
- raises, like CUDA does, where one op meets tensors on two virtual devices (a tensor on the host, untagged,
  mixes with anything, as a 0-dim CPU tensor does on CUDA; the mode checks GPU-against-GPU only).
`split_model` dispatches a causal LM with accelerate's own `dispatch_model` (the hooks `device_map="auto"`
attaches: each block moves its inputs to its device, the top-level module returns outputs to the input's device),
the embedding on device 0, the layers split evenly, the final norm and lm_head on the last device.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

Tensor = torch.Tensor
TAG = "virtual_device"
# Ops that may take tensors from two devices: CUDA copies across devices; an indexed write reads its value from
# anywhere (its indices are still checked against the written tensor).
CROSS_DEVICE = {Tensor.copy_, Tensor.to, Tensor.cpu, Tensor.__setitem__}


def virtual(k: int) -> torch.device:
    return torch.device("cpu", k)


def device_index(device) -> int | None:
    """k for a virtual device cpu:k, None for the host (a plain "cpu") or no device."""
    if device is None or isinstance(device, int):
        return device
    device = torch.device(device)
    return device.index if device.type == "cpu" else None


def where(t) -> int | None:
    return getattr(t, TAG, None) if isinstance(t, Tensor) else None


def place(t: Tensor, k: int | None) -> None:
    setattr(t, TAG, k)


class DeviceMismatch(RuntimeError):
    pass


class VirtualDevices(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__self__", None) is Tensor.device:  # the `tensor.device` getter
            k = where(args[0])
            return virtual(k) if k is not None else func(*args, **kwargs)
        target, names_target = self.target(func, args, kwargs)
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, Tensor)]
        found = {where(t) for t in tensors} - {None}
        if func is Tensor.__setitem__:
            found = {where(t) for t in [args[0], *tree_flatten(args[1])[0]] if isinstance(t, Tensor)} - {None}
        if len(found) > 1 and func not in CROSS_DEVICE:
            a, b = sorted(found)[:2]
            raise DeviceMismatch(f"{getattr(func, '__name__', func)}: expected all tensors to be on the same "
                                 f"device, but found at least two devices, cuda:{a} and cuda:{b}")
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if func is Tensor.__setitem__ or (name.endswith("_") and not name.endswith("__")):
            return out  # in place: the written tensor keeps its device
        k = target if names_target else (found.pop() if len(found) == 1 else None)
        results = [t for t in tree_flatten(out)[0] if isinstance(t, Tensor)]
        if names_target and any(r is t for r in results for t in tensors) and k != where(tensors[0]):
            out = out.clone()  # a move to another device is a copy on CUDA, not the same tensor
            results = [out]
        for r in results:
            place(r, k)
        return out

    @staticmethod
    def target(func, args, kwargs) -> tuple[int | None, bool]:
        """(virtual device, whether the call names one) of a factory's `device=` or a `.to()` / `.cpu()`."""
        if func is Tensor.cpu:
            return None, True
        if func is Tensor.to:
            device = torch._C._nn._parse_to(*args[1:], **kwargs)[0]
            return device_index(device), device is not None
        if "device" in kwargs:
            return device_index(kwargs["device"]), True
        return None, False


def split_model(model, devices: int = 2) -> torch.device:
    """Dispatch a Llama-style causal LM over `devices` virtual GPUs as accelerate does; returns the input device."""
    from accelerate import dispatch_model

    layers = model.get_decoder().layers
    prefix = "model."
    device_map = {f"{prefix}embed_tokens": 0, f"{prefix}rotary_emb": 0, f"{prefix}norm": devices - 1,
                  "lm_head": devices - 1}
    for i in range(len(layers)):
        device_map[f"{prefix}layers.{i}"] = i * devices // len(layers)
    dispatch_model(model, {k: virtual(v) for k, v in device_map.items()}, main_device=virtual(0))
    for name, k in device_map.items():
        module = model.get_submodule(name)
        for t in [*module.parameters(), *module.buffers()]:
            place(t, k)
    return virtual(0)


def place_module(module: torch.nn.Module, k: int) -> torch.nn.Module:
    """Tag a module's own weights (heads, drafts) as living on virtual device k, shared target modules excluded
    when they are already placed."""
    for t in [*module.parameters(), *module.buffers()]:
        if where(t) is None:
            place(t, k)
    return module
