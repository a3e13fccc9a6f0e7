"""The decode step's host syncs, counted (bench.core.syncs) and pinned: greedy AR and Token Recycling read the device
once per step (how many tokens each row keeps) and move nothing between host and device. The one transfer counted
per step is transformers' rotary embedding calling `inv_freq.to(x.device)` on a buffer already there (a no-op on
one device; it is the model's code, counted because the counter cannot tell). Adding a `.item()` to the loop fails."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
import torch

import bench.core.engine as engine_module
from bench.core.engine import Engine
from bench.core.syncs import HostSyncCounter
from bench.core.timing import PhaseTimer
from methods import build_method
from tests.conftest import compose_cfg, tiny_llama

V = 64
PINNED = {"reads": {"tolist": 1}, "transfers": {"to": 1}}  # per decode step


@pytest.fixture(scope="module")
def tiny():
    model = tiny_llama(V, max_positions=512)
    bundle = SimpleNamespace(model=model, device=torch.device("cpu"), dtype=torch.float32, vocab_size=V,
                             name="tiny", eos_token_ids=[V + 5], max_context=512)
    return bundle, Engine(model, [V + 5], 512)


def per_step(tiny, method: str) -> dict[str, dict[str, float]]:
    """Counts of a decode step: (a 33-token generation - the prefill-only one) / its decode steps."""
    bundle, engine = tiny
    prompt = list(range(3, 20))
    counted = []
    for n in (1, 33):
        m = build_method(compose_cfg(f"method={method}").method, bundle)
        m.generate(engine, prompt, 4, PhaseTimer(sync=False))  # warm: trees built on the device once
        with HostSyncCounter() as c:
            steps = len(m.generate(engine, prompt, n, PhaseTimer(sync=False)).accept_lengths)
        counted.append((c, steps))
    (c1, s1), (c2, s2) = counted
    assert s2 > s1 + 3
    return {kind: {k: v / (s2 - s1) for k, v in (getattr(c2, kind) - getattr(c1, kind)).items()}
            for kind in ("reads", "transfers")}


@pytest.mark.parametrize("method", ["ar", "token_recycling"])
def test_decode_step_syncs_are_pinned(tiny, method):
    assert per_step(tiny, method) == PINNED


def test_an_item_added_to_the_loop_is_counted(tiny, monkeypatch):
    real = engine_module.greedy_accept

    def with_item(*args, **kwargs):
        acc = real(*args, **kwargs)
        acc.best[0].item()  # the kind of read that would slip into the loop
        return acc

    monkeypatch.setattr(engine_module, "greedy_accept", with_item)
    counts = per_step(tiny, "ar")
    assert counts != PINNED and counts["reads"] == {"tolist": 1, "item": 1}


def test_counter_sees_reads_and_transfers():
    t = torch.arange(5)
    with HostSyncCounter() as c:
        bool(t[0]), int(t[1]), t.tolist(), t[2].item(), t.nonzero(), t[t > 2], torch.equal(t, t)
        t.to("cpu"), t.to(torch.float32), torch.tensor([1], device="cpu")
    assert c.reads == Counter(bool=1, int=1, tolist=1, item=1, nonzero=1, bool_index=1, equal=1)
    assert c.transfers == Counter(to=1, from_host=1)  # a dtype cast is not a transfer
