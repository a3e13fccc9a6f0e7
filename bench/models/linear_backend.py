"""How a model's linear layers multiply on CPU: `plain` (torch's own fp32 `linear`, i.e. MKL), `onednn` (the same
fp32 product through oneDNN with the weight reordered once, the path torch's inductor uses) or `mixed` (below).

Why: at the 1-16 rows that decoding and verification multiply, MKL's fp32 GEMM behaves almost like one GEMV per
row, so a 2-token forward cost ~1.5x a 1-token one on a 2-core EPYC although both are bound by reading the same
weights. There, with prepacked oneDNN weights, the forward was 1.3-1.4x faster at 1 token and T(8)/T(1) dropped from
1.49-1.67 to 1.14-1.24 (docs/engine.md; `make bench-engine` prints the comparison on the machine at hand). Both are fp32 arithmetic;
their sums are accumulated in another order, so results differ in the last bits, like MKL at 1 vs 2 rows.

Neither wins everywhere: on a 2-core Intel Xeon VM with AMX the embedded model's one-token forward took 18-33% longer
on oneDNN than on torch's kernel, and its 8-token forward 7-31% less (evidence/cpu_linear/, four sittings). The
third backend, `mixed`, runs a call of at most `plain_rows` rows (batch x tokens) on torch's kernel and a wider one
on oneDNN; `auto` measures that crossover (bench.models.backend_choice).

The switch swaps modules after loading, as torch's quantization utilities do (no patching of transformers):
every `nn.Linear` becomes a `PrepackedLinear` that keeps the same weight and bias Parameters (tied weights stay
tied, state dicts and `.weight` readers are unchanged) plus the packed copy (the weights' memory twice).
Which backend a model config gets (`auto` measures) is bench.models.backend_choice's business.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from bench.errors import HarnessError

KERNELS = ("plain", "onednn")
BACKENDS = (*KERNELS, "mixed")


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PrepackedLinear(nn.Module):
    """An nn.Linear whose fp32 CPU forward runs oneDNN on a weight reordered once. The packed copy follows the
    weight: a weight changed in place (an optimizer step, load_state_dict) is repacked on the next call, and a
    forward that needs gradients, another device or another dtype takes the plain `F.linear`."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight  # the same Parameter objects: ties and state-dict keys stay
        self.bias = linear.bias
        self._packed_version = -1
        self._packed = None
        # Calls of at most this many rows (batch x tokens) take torch's own kernel (`mixed`); 0 = always oneDNN.
        self.plain_rows = 0

    def _pack(self) -> torch.Tensor:
        w = self.weight
        # Inference tensors (made under inference_mode) have no version counter; they cannot change in place either.
        key = (w.data_ptr(), None if w.is_inference() else w._version)
        if self._packed is None or self._packed_version != key:
            self._packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), None)
            self._packed_version = key
        return self._packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if (x.device.type != "cpu" or x.dtype != torch.float32 or w.dtype != torch.float32
                or (torch.is_grad_enabled() and (w.requires_grad or x.requires_grad))
                or (self.plain_rows and x.numel() <= self.plain_rows * self.in_features)):
            return F.linear(x, w, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self._pack(), self.bias, "none", [], "")

    def __getstate__(self):
        # The packed copy is an opaque oneDNN tensor that cannot be copied or pickled: copies repack on first use.
        state = super().__getstate__()
        state.update(_packed=None, _packed_version=-1)
        return state

    def to_linear(self) -> nn.Linear:
        plain = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                          device="meta", dtype=self.weight.dtype)
        plain.weight, plain.bias = self.weight, self.bias
        return plain

    def extra_repr(self) -> str:
        rows = f", plain_rows={self.plain_rows}" if self.plain_rows else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}{rows}"


def set_backend(module: nn.Module, backend: str, plain_rows: int = 0) -> int:
    """Swap every linear layer of `module` (in place) to `backend`; returns how many were swapped. `mixed` needs
    `plain_rows` > 0, the crossover: calls of at most that many rows run torch's kernel, wider ones oneDNN."""
    if backend not in BACKENDS:
        raise HarnessError(f"unknown linear backend '{backend}' (known: {', '.join(BACKENDS)})")
    if backend != "plain" and not onednn_available():
        raise HarnessError(f"linear backend '{backend}' needs a torch built with oneDNN (mkldnn); use 'plain'")
    if backend == "mixed" and plain_rows < 1:
        raise HarnessError("linear backend 'mixed' needs its crossover (plain_rows >= 1)")
    swapped = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if backend != "plain" and type(child) is nn.Linear:
                child = PrepackedLinear(child)
                setattr(parent, name, child)
                swapped += 1
            elif backend == "plain" and isinstance(child, PrepackedLinear):
                setattr(parent, name, child.to_linear())
                swapped += 1
            if isinstance(child, PrepackedLinear) and backend != "plain":
                child.plain_rows = int(plain_rows) if backend == "mixed" else 0
    return swapped


def backend_of(module: nn.Module) -> str:
    """The backend `module`'s linear layers run on (`plain` if it has none swapped)."""
    packed = [m for m in module.modules() if isinstance(m, PrepackedLinear)]
    return "plain" if not packed else "mixed" if any(m.plain_rows for m in packed) else "onednn"


def rows_of(module: nn.Module) -> int:
    """The crossover `module`'s layers run on under `mixed` (0 otherwise)."""
    return max((m.plain_rows for m in module.modules() if isinstance(m, PrepackedLinear)), default=0)


def follow(module: nn.Module, target: nn.Module) -> None:
    """Put `module` (a draft, heads) on the backend `target` runs on, with its crossover."""
    set_backend(module, backend_of(target), rows_of(target))


def eligible(device: torch.device, dtype: torch.dtype) -> bool:
    return torch.device(device).type == "cpu" and dtype == torch.float32 and onednn_available()
