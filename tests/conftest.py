"""Shared fixtures: the embedded model is loaded once per test session (a few seconds once cached)."""

from __future__ import annotations

import pytest

from bench.run.compose import compose_config


def compose_cfg(*overrides: str):
    return compose_config(overrides)


@pytest.fixture(scope="session")
def smollm():
    from bench.run.runner import get_bundle

    return get_bundle(compose_cfg("model=smollm2-135m").model)


def tiny_llama(vocab_size: int = 64, attn_implementation: str = "eager", max_positions: int = 128):
    """A 2-layer random Llama: fast engine tests with real transformers attention and cache code."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        initializer_range=0.1,  # the default 0.02 collapses greedy output into one repeated token
        attn_implementation=attn_implementation,
    )
    return LlamaForCausalLM(cfg).eval()
