"""transformers' own static-cache generate, the graph regime's peer in gpu-check (issue 67: "HF generate with a
fixed-size StaticCache, compiled as transformers does on CUDA"), and whether a node can compile it."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sysconfig

import torch
from transformers import StaticCache

from bench.core.forward import cache_kw
from methods.hf import HFGenerate


def compiles(device: torch.device) -> tuple[bool, str]:
    """Whether transformers' generate can compile its static-cache forward here, and why not."""
    if device.type != "cuda":
        return False, "not CUDA: timed uncompiled"
    if importlib.util.find_spec("triton") is None:
        return False, "no triton: timed uncompiled"
    if not (shutil.which("cc") or shutil.which("gcc")):
        return False, "no C compiler: timed uncompiled"
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        return False, "no Python headers (triton builds a C extension): timed uncompiled"
    return True, "compiled by transformers (static cache)"


def compiled_by_transformers(model) -> bool:
    """Whether transformers' generate compiled `model`'s decode forward. `compiles` only says a node could: generate
    checks criteria of its own (`_valid_auto_compile_criteria`) and, unmet, decodes uncompiled without a word. Once
    compiled, the model keeps the compiled call (`get_compiled_call` sets `_compiled_call`: 5.17 and 5.24)."""
    return getattr(model, "_compiled_call", None) is not None


class StaticCacheGenerate(HFGenerate):
    """transformers' greedy generate with one StaticCache of `capacity` positions, made once and reset before each
    call, compiled on CUDA as transformers compiles a generate given a compileable cache, or not (`disable_compile`).
    One cache, as our graph engine keeps one: `cache_implementation="static"` makes a new one at every call
    (transformers 5.17 and 5.24), whose new addresses its compiled forward's CUDA graphs would meet inside the call."""

    def __init__(self, bundle, compiled: bool, capacity: int):
        super().__init__(None, bundle)
        self.compiled, self.capacity = compiled, capacity
        self.cache = StaticCache(config=bundle.model.config, max_cache_len=capacity)

    def describe(self):
        return {"generate_kwargs": {"cache": f"StaticCache({self.capacity})",
                                    "disable_compile": not self.compiled}}

    def generate_kwargs(self) -> dict:
        self.cache.reset()  # (zeroes it in place: the same tensors at every call)
        return {**cache_kw(self.bundle.model, self.cache), "disable_compile": not self.compiled}
