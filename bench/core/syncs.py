"""Counting the decode loop's host syncs on any device, a CPU included.

On a GPU the host waits for the device whenever Python reads a tensor's value (`.item()`, `.tolist()`, `bool(t)`,
`int(t)`, `torch.equal`, ops whose output shape depends on values such as `nonzero` and `unique`) and whenever a
tensor crosses between host and device (`.to(device)`, `.cpu()`, `torch.tensor(data, device=...)`). A CPU runs the
same Python, so a torch-function mode sees the same calls there. A CPU cannot tell whether a `.to(device)` would
cross (everything is on the host), so every call that names a device is counted as a transfer: the loop keeps
device tensors on the device instead of moving them each step. Used by tests that pin the loop's count per step.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.overrides import TorchFunctionMode

Tensor = torch.Tensor
SCALAR_READS = {Tensor.item: "item", Tensor.tolist: "tolist", Tensor.__bool__: "bool", Tensor.__int__: "int",
                Tensor.__float__: "float", Tensor.__index__: "index", Tensor.numpy: "numpy", torch.equal: "equal",
                Tensor.equal: "equal", torch.nonzero: "nonzero", Tensor.nonzero: "nonzero", torch.unique: "unique",
                Tensor.unique: "unique", torch.masked_select: "masked_select", Tensor.masked_select: "masked_select"}
TRANSFERS = {Tensor.cpu: "cpu", Tensor.cuda: "cuda"}


class HostSyncCounter(TorchFunctionMode):
    """`with HostSyncCounter() as c: ...` then `c.reads`, `c.transfers` (Counters by kind) and `c.total`."""

    def __init__(self):
        super().__init__()
        self.reads: Counter = Counter()
        self.transfers: Counter = Counter()

    @property
    def total(self) -> int:
        return sum(self.reads.values()) + sum(self.transfers.values())

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SCALAR_READS:
            self.reads[SCALAR_READS[func]] += 1
        elif func in TRANSFERS:
            self.transfers[TRANSFERS[func]] += 1
        elif func is Tensor.to and names_device(args[1:], kwargs):
            self.transfers["to"] += 1
        elif func in (torch.tensor, torch.as_tensor) and kwargs.get("device") is not None:
            self.transfers["from_host"] += 1
        elif func is Tensor.__getitem__ and len(args) > 1 and is_bool_index(args[1]):
            self.reads["bool_index"] += 1  # the output's shape is the mask's count
        return func(*args, **kwargs)


def names_device(args, kwargs) -> bool:
    if "device" in kwargs:
        return True
    return any(isinstance(a, (str, torch.device, Tensor)) for a in args[:1])


def is_bool_index(index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, Tensor) and p.dtype == torch.bool for p in parts)
