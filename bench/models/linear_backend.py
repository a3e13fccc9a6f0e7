"""How a model's linear layers multiply on CPU: `plain` (torch's own fp32 `linear`, i.e. MKL) or `onednn`
(the same fp32 product through oneDNN with the weight reordered once, the path torch's inductor uses).

Why: at the 1-16 rows that decoding and verification multiply, MKL's fp32 GEMM behaves almost like one GEMV per
row, so a 2-token forward cost ~1.5x a 1-token one on a 2-core EPYC although both are bound by reading the same
weights. With prepacked oneDNN weights the forward is ~1.7x faster at 1 token and T(8)/T(1) drops from ~1.55 to
~1.3 (`make bench-engine` prints the side-by-side comparison on the machine at hand). Both are fp32 arithmetic;
their sums are accumulated in another order, so results differ in the last bits, like MKL at 1 vs 2 rows.

The switch swaps modules after loading, as torch's quantization utilities do (no patching of transformers):
every `nn.Linear` becomes a `PrepackedLinear` that keeps the same weight and bias Parameters (tied weights stay
tied, state dicts and `.weight` readers are unchanged) plus the packed copy (the weights' memory twice).
`auto` picks by a short measurement of the model's own forward at 1 and 8 tokens, cached per machine, model and
dtype (results/cache/linear_backend/); CUDA and non-fp32 models are always `plain`.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from bench.cachefile import CorruptCache, atomic_write, load_or_build
from bench.core.machine import machine_id
from bench.errors import HarnessError

BACKENDS = ("plain", "onednn")
CHOICES = ("auto", *BACKENDS)


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
                or (torch.is_grad_enabled() and (w.requires_grad or x.requires_grad))):
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
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def set_backend(module: nn.Module, backend: str) -> int:
    """Swap every linear layer of `module` (in place) to `backend`; returns how many were swapped."""
    if backend not in BACKENDS:
        raise HarnessError(f"unknown linear backend '{backend}' (known: {', '.join(BACKENDS)})")
    if backend == "onednn" and not onednn_available():
        raise HarnessError("linear backend 'onednn' needs a torch built with oneDNN (mkldnn); use 'plain'")
    swapped = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if backend == "onednn" and type(child) is nn.Linear:
                setattr(parent, name, PrepackedLinear(child))
                swapped += 1
            elif backend == "plain" and isinstance(child, PrepackedLinear):
                setattr(parent, name, child.to_linear())
                swapped += 1
    return swapped


def backend_of(module: nn.Module) -> str:
    """The backend `module`'s linear layers run on (`plain` if it has none swapped)."""
    return "onednn" if any(isinstance(m, PrepackedLinear) for m in module.modules()) else "plain"


def eligible(device: torch.device, dtype: torch.dtype) -> bool:
    return torch.device(device).type == "cpu" and dtype == torch.float32 and onednn_available()


@torch.inference_mode()
def time_forwards(model, backends=BACKENDS, sizes=(1, 8), prefix_tokens: int = 128, reps: int = 5) -> dict:
    """Median ms of one forward over n tokens after a prefix, per backend; backends and sizes interleaved in each
    repeat so drift hits them alike (the first repeat is a warm-up). Leaves the model on its first backend."""
    from transformers import DynamicCache

    vocab = model.get_output_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, vocab, (1, prefix_tokens), generator=gen)
    inputs = {n: torch.randint(0, vocab, (1, n), generator=gen) for n in sizes}
    cache = DynamicCache(config=model.config)
    model(input_ids=prefix, past_key_values=cache, use_cache=True, logits_to_keep=1)
    times = {b: {n: [] for n in sizes} for b in backends}
    for _ in range(reps + 1):
        for b in backends:
            set_backend(model, b)
            model(input_ids=inputs[sizes[0]], past_key_values=cache, use_cache=True)  # packs the weights, untimed
            cache.crop(-sizes[0])
            for n, ids in inputs.items():
                t0 = time.perf_counter()
                model(input_ids=ids, past_key_values=cache, use_cache=True)
                times[b][n].append(time.perf_counter() - t0)
                cache.crop(-n)
    set_backend(model, backends[0])
    return {b: {n: 1000 * statistics.median(t[1:]) for n, t in per.items()} for b, per in times.items()}


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
        ms = time_forwards(model)
        best = min(ms, key=lambda b: sum(ms[b].values()))
        choice = {"backend": best, "ms": {b: {str(n): v for n, v in t.items()} for b, t in ms.items()},
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
    if not eligible(model_cfg.device, dtype):
        return "plain"
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
