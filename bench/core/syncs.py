"""Counting the decode loop's host waits on any device, a CPU included.

On a GPU the host waits for the device whenever Python reads a tensor's value (`.item()`, `.tolist()`, `bool(t)`,
`int(t)`, `torch.equal`, `t[i]` with a 0-dim integer tensor `i` (torch indexes with its value), ops whose output
shape depends on values such as `nonzero` and `unique`) and whenever a tensor crosses between host and device: torch's blocking copies synchronize the stream both ways, so a
host-to-device copy (`torch.tensor(data, device=...)`, `host.to(device)`, `dev.copy_(host)`, `dev[host_index]`,
`dev[[1, 2]]`, whose list becomes a host index tensor) stalls as a read does. A CPU runs the same Python, so a
torch-function mode sees the same calls there.

On a CPU every tensor is on the host, so the mode keeps track of which tensors would be on the host on a GPU: those
made from Python data or by a factory without a device (`torch.tensor(xs)`, `torch.zeros(n)`), by `.cpu()`, and
whatever is computed from those alone. Every other tensor (made with a device, computed on the device, or made
before counting started: the model, trees built at setup) is taken as a device tensor. Reading a host tensor
costs nothing; moving one to the device, or mixing it into a device op, counts as a transfer. Limits: a
device-to-host copy written as `.to("cpu")` looks like a no-op move on a CPU (write `.cpu()` or `.tolist()`), a
host tensor made before counting started is taken as a device one, and so is one made by `torch.from_numpy`, which
no torch-function mode sees (write `torch.as_tensor`: REST's draft tokens went uncounted so, a copy a drafting step
that CUDA's sync debug mode saw on the H200). Used by tests that pin waits per step.
"""

from __future__ import annotations

import os
import traceback
import warnings
import weakref
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode

Tensor = torch.Tensor
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep  # torch's own frames (not "/torch/": a venv may be /opt/torch/)
SCALAR_READS = {Tensor.item: "item", Tensor.tolist: "tolist", Tensor.__bool__: "bool", Tensor.__int__: "int",
                Tensor.__float__: "float", Tensor.__index__: "index", Tensor.numpy: "numpy", torch.equal: "equal",
                Tensor.equal: "equal", torch.nonzero: "nonzero", Tensor.nonzero: "nonzero", torch.unique: "unique",
                Tensor.unique: "unique", torch.masked_select: "masked_select", Tensor.masked_select: "masked_select"}
# Factories that make a host tensor unless given a device; the first two copy Python data when given one.
FROM_DATA = (torch.tensor, torch.as_tensor)
FACTORIES = {*FROM_DATA, torch.zeros, torch.ones, torch.full, torch.empty, torch.arange, torch.eye,
             torch.rand, torch.randn, torch.randint, torch.randperm, torch.linspace}
INDEXING = (Tensor.__getitem__, Tensor.__setitem__)


class HostSyncCounter(TorchFunctionMode):
    """`with HostSyncCounter() as c: ...` then `c.reads`, `c.transfers` (Counters by kind) and `c.total`."""

    def __init__(self):
        super().__init__()
        self.reads: Counter = Counter()
        self.transfers: Counter = Counter()
        self.host_made: dict[int, weakref.ref] = {}  # id -> tensor that would live on the host on a GPU

    @property
    def total(self) -> int:
        return sum(self.reads.values()) + sum(self.transfers.values())

    def on_host(self, t) -> bool:
        ref = self.host_made.get(id(t))
        return ref is not None and ref() is t

    def mark_host(self, out) -> None:
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, Tensor):
                self.host_made[id(t)] = weakref.ref(t)
        if len(self.host_made) > 100_000:  # drop the dead
            self.host_made = {k: r for k, r in self.host_made.items() if r() is not None}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        tensors = [t for t in flat(args, kwargs) if isinstance(t, Tensor)]
        host = [t for t in tensors if self.on_host(t)]
        if func in FACTORIES:
            data = args[0] if args else kwargs.get("data")
            if kwargs.get("device") is not None:
                empty = isinstance(data, (list, tuple)) and len(data) == 0  # nothing to copy (a cache's placeholder)
                if func in FROM_DATA and not empty and not (isinstance(data, Tensor) and not self.on_host(data)):
                    self.transfers["from_host"] += 1  # Python data (or a host tensor) copied to the device
            elif not (func in FROM_DATA and isinstance(data, Tensor) and not self.on_host(data)):
                self.mark_host(out)
            return out
        if func in SCALAR_READS:
            if not host:  # a host tensor's value is read without waiting
                self.reads[SCALAR_READS[func]] += 1
            elif isinstance(out, Tensor):  # nonzero, unique, ... of a host tensor: a host tensor
                self.mark_host(out)
            return out
        if func is Tensor.cpu:
            if not host:
                self.transfers["cpu"] += 1
            self.mark_host(out)
            return out
        if func is Tensor.cuda or (func is Tensor.to and names_device(args[1:], kwargs)):
            if host:
                self.transfers["to"] += 1
                if out is args[0]:  # on a CPU the move returns the host tensor itself; on a GPU it is a new one
                    out = out.clone()
            return out
        device = [t for t in tensors if not self.on_host(t)]
        if func in INDEXING and any(is_scalar_index(p) and not self.on_host(p) for p in parts_of(args[1])):
            self.reads["scalar_index"] += 1  # t[i] with a 0-dim integer device tensor i: torch reads i's value
        if func in INDEXING and not self.on_host(args[0]) and (has_list(args[1]) or any_host(self, args[1:])):
            self.transfers["index"] += 1  # a host index (or written value) is copied to the device
        elif func in INDEXING and self.on_host(args[0]) and device:
            self.transfers["index"] += 1  # a device value is copied to the host, or a device index read
        elif host and device and (func is Tensor.copy_ or any(t.dim() > 0 for t in host)):
            self.transfers["mixed"] += 1  # a host tensor meets device ones: a copy (or, on CUDA, an error)
        elif func is Tensor.__getitem__ and is_bool_index(args[1]):
            self.reads["bool_index"] += 1  # the output's shape is the mask's count
        if host and not device:
            self.mark_host(out)
        return out


def flat(args, kwargs):
    for a in (*args, *kwargs.values()):
        if isinstance(a, (list, tuple)):
            yield from a
        else:
            yield a


def any_host(counter: HostSyncCounter, parts) -> bool:
    parts = [q for p in parts for q in (p if isinstance(p, tuple) else (p,))]
    return any(isinstance(p, Tensor) and counter.on_host(p) for p in parts)


def names_device(args, kwargs) -> bool:
    if "device" in kwargs:
        return True
    return any(isinstance(a, (str, torch.device, Tensor)) for a in args[:1])


def has_list(index) -> bool:
    """A Python list (or range) in an index: torch turns it into a host index tensor."""
    return any(isinstance(p, (list, range)) for p in parts_of(index))


def parts_of(index) -> tuple:
    return index if isinstance(index, tuple) else (index,)


def is_scalar_index(part) -> bool:
    return isinstance(part, Tensor) and part.dim() == 0 and not part.dtype.is_floating_point and part.dtype != torch.bool


def is_bool_index(index) -> bool:
    return any(isinstance(p, Tensor) and p.dtype == torch.bool for p in parts_of(index))


class CudaSyncWarnings:
    """`with CudaSyncWarnings(device) as c: ...`: on CUDA, torch's own count of the synchronizing calls
    (`torch.cuda.set_sync_debug_mode("warn")` warns at each blocking copy, `.item()`, `nonzero`, ...), which
    confirms on a real device what HostSyncCounter infers on any. `c.total` (None off CUDA) and `c.sites`, the
    count per caller: the innermost frame outside torch's package and this file (a HostSyncCounter around the code
    would otherwise be named), as folder/file.py:line."""

    def __init__(self, device):
        self.on = torch.device(device).type == "cuda"
        self.sites: Counter = Counter()
        self.total: int | None = None

    def seen(self, message, *args, **kwargs) -> None:
        if "synchroniz" in str(message):
            self.total += 1
            self.sites[caller()] += 1

    def __enter__(self):
        if self.on:
            self.total, self.catcher = 0, warnings.catch_warnings()
            self.catcher.__enter__()
            warnings.simplefilter("always")  # every call, not once per line
            warnings.showwarning = self.seen  # restored by the catcher
            self.before = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc):
        if self.on:
            torch.cuda.set_sync_debug_mode(self.before)
            self.catcher.__exit__(*exc)
        return False


def caller() -> str:
    for frame in reversed(traceback.extract_stack()[:-2]):
        path = frame.filename.replace("\\", "/")
        if not frame.filename.startswith(TORCH_DIR) and frame.filename != __file__ and not path.endswith("/warnings.py"):
            return "/".join(path.split("/")[-2:]) + f":{frame.lineno}"
    return "unknown"
