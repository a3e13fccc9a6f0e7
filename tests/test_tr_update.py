"""Token Recycling's matrix update is deterministic where a token is a tree input several times: each distinct
token's row is written once, from a defined occurrence (last for "parallel" and "last", first for "first"), so
CPU and CUDA give the same matrix and a resumed run decodes like an uninterrupted one."""

from __future__ import annotations

import pytest
import torch

from methods import build_method
from tests.conftest import compose_cfg, tiny_llama


def bundle(vocab=64):
    from types import SimpleNamespace

    model = tiny_llama(vocab)
    return SimpleNamespace(model=model, device=torch.device("cpu"), dtype=torch.float32, vocab_size=vocab,
                           name="tiny", eos_token_ids=[vocab - 1], max_context=128)


def serial_update(adj, inputs, top, first: bool):
    adj = adj.clone()
    order = range(len(inputs)) if not first else reversed(range(len(inputs)))
    for i in order:  # a serial loop: the last write of a row wins
        adj[inputs[i]] = top[i]
    return adj


@pytest.mark.parametrize("strategy", ["parallel", "last", "first"])
def test_duplicate_inputs_update_from_a_defined_occurrence(strategy):
    cfg = compose_cfg("method=token_recycling", f"method.update_strategy={strategy}").method
    tr = build_method(cfg, bundle())
    n = tr.tree.size + 1
    g = torch.Generator().manual_seed(0)
    inputs = torch.randint(0, 6, (n,), generator=g)  # few distinct tokens: many duplicates
    assert len(inputs.unique()) < n
    logits = torch.randn(n, 64, generator=g)
    before = tr.adj.clone()
    tr.update(inputs, logits, logits.argmax(-1), None)
    top = logits.topk(tr.k, dim=-1).indices
    assert torch.equal(tr.adj, serial_update(before, inputs, top, first=strategy == "first"))
    again = build_method(cfg, bundle())
    torch.use_deterministic_algorithms(True)  # an op that PyTorch calls nondeterministic would raise here
    try:
        again.update(inputs, logits, logits.argmax(-1), None)
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(again.adj, tr.adj)
