"""Randomly initialised targets of a named shape (`model.random_init=<shape>`), so timing needs no weights.

A forward's cost depends on the shapes, the dtype and the kernels, not on the weights' values: `make gpu-check`
(bench.check.gpu_check) times the papers' 7B and 13B Llama targets on a node that has none of their weights.
The model is built with transformers' LlamaConfig + AutoModelForCausalLM.from_config directly on the device, in
the run's dtype, from a fixed seed. The tokenizer stays the model config's own (the embedded SmolLM2's by
default): its ids must stay below the shape's vocabulary, so runs of the 32000-token shapes feed token ids
(T(n) draws random ones) rather than text tokenized into 49152 ids. Outputs of random weights mean nothing;
only their cost and the code paths they run do.
"""

from __future__ import annotations

import torch

from bench import shapes
from bench.errors import HarnessError

# The papers' Llama targets (Llama-2 / Vicuna / Code Llama 7B and 13B: MHA, 32000 tokens, 4096 context) and the
# embedded model's own config (SmolLM2-135M), from their config.json fields in bench/shapes/ (which the cost
# model reads too); `tiny` is for CPU smoke runs (the suite), with the embedded tokenizer's 49152 ids.
SHAPES = {
    "llama-7b": shapes.shape_config("llama-2-7b"),
    "llama-13b": shapes.shape_config("llama-2-13b"),
    "smollm2-135m": shapes.shape_config("smollm2-135m"),
    # 6 layers: ProPD prunes after layer 4. initializer_range 0.1: at 0.02 a tiny model repeats one token.
    "tiny": {"hidden_size": 32, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
             "intermediate_size": 64, "vocab_size": 49152, "max_position_embeddings": 2048,
             "tie_word_embeddings": True, "initializer_range": 0.1},
}
SEED = 0


def shape_config(shape: str, attn_implementation: str = "sdpa"):
    from transformers import LlamaConfig

    if shape not in SHAPES:
        raise HarnessError(f"unknown model.random_init shape '{shape}' (known: {', '.join(SHAPES)})")
    return LlamaConfig(**{"rms_norm_eps": 1e-5, **SHAPES[shape]}, attn_implementation=attn_implementation)


def build(shape: str, dtype: torch.dtype, device, attn_implementation: str = "sdpa", device_map=None):
    """A Llama of `shape` with random weights, made on `device` in `dtype` (no host copy of a 13B model), seeded."""
    from transformers import AutoModelForCausalLM

    if device_map is not None:
        raise HarnessError("model.random_init builds the whole model on model.device: set model.device_map=null")
    config = shape_config(shape, attn_implementation)
    with torch.random.fork_rng(devices=[device] if torch.device(device).type == "cuda" else []):
        torch.manual_seed(SEED)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def label(cfg) -> str:
    """The bundle's name: random weights get their own, so no cache (AR references, T(n) curves) mixes them up
    with the real model's."""
    shape = cfg.get("random_init")
    return f"{cfg.name}+random-{shape}" if shape else cfg.name
