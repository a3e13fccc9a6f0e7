"""bench.core.step_profile: a profile's events charged to decode phases by the boundaries the timer marks."""

from __future__ import annotations

import pytest

from bench.core.engine import Engine
from bench.core.step_profile import MARK, QUANTITIES, Event, by_phase, step_profile
from bench.core.timing import PHASES
from methods.ar import Autoregressive
from methods.token_recycling.proposer import TokenRecycling
from tests.conftest import tiny_llama
from tests.test_engine_tiny import NO_EOS, PROMPTS, V, bundle, tr


def test_events_are_charged_to_the_phase_whose_mark_follows_them():
    us = 1000  # ns

    def host(name, start, end=None, id=0, linked=0):
        return Event(name, start * us, (start if end is None else end) * us, True, id, linked)

    def kernel(name, start, end, linked):
        return Event(name, start * us, end * us, False, 0, linked)

    events = [host("aten::mm", 1, id=1), kernel("gemm", 2, 9, 1),  # before any generation: nobody's
              host(MARK + "^", 10), host("aten::embedding", 11, 14), host(MARK + "prefill", 20),
              host("aten::mm", 21, 29, id=7), host("cudaLaunchKernel", 22, 26, linked=7),
              host("aten::copy_", 23, 25),  # called by aten::mm: its time is mm's, not counted again
              host("cudaMemsetAsync", 24),  # queued by the copy_ that mm called
              kernel("gemm", 35, 85, linked=7),  # runs later on the device: still the forward's
              host("cudaStreamSynchronize", 27, 28), host(MARK + "target_forward", 30),
              host("cudaMemcpyAsync", 31, 33), host(MARK + "verify", 40),
              host(MARK + "^", 60), Event(MARK + "^", 60, 61, False, 0, 9),  # a GPU copy of a range: not a kernel
              host("aten::softmax", 74, 78, id=9), host("cuLaunchKernelEx", 75, 76, linked=9),
              kernel("softmax", 81, 83, 9), host(MARK + "draft", 80),
              host("aten::add", 90, id=10), kernel("add", 91, 92, 10)]  # after the last mark: nobody's
    gens, kernels = by_phase(events)
    assert gens[0] == {
        "prefill": {"host_ms": 0.01, "op:aten::embedding": 0.003, "op_ms": 0.003},
        "target_forward": {"host_ms": 0.01, "launches": 1, "launch_ms": 0.004, "device_ms": 0.05, "waits": 1,
                           "wait_ms": 0.001, "op:aten::mm": 0.008, "op_ms": 0.008, "copies": 1, "copy_ms": 0.0,
                           "copy:mm > copy_": 1, "wait:mm": 1},
        "verify": {"host_ms": 0.01, "copies": 1, "copy_ms": 0.002, "copy:(no aten op)": 1}}
    assert gens[1] == {"draft": {"host_ms": 0.02, "launches": 1, "launch_ms": 0.001, "device_ms": 0.002,
                                 "op:aten::softmax": 0.004, "op_ms": 0.004}}
    assert kernels == {"gemm": 1, "softmax": 1}


@pytest.mark.parametrize("make", [lambda m: Autoregressive(None, bundle(m)), tr])
def test_a_cpu_profile_has_every_phase_and_no_device_work(make):
    model = tiny_llama(V, "sdpa", 512)
    engine = Engine(model, [NO_EOS], max_context=512)
    method = make(model)
    # every op a phase ran (top_ops), not the default top 5: the attention op's rank among the tiny model's few-
    # microsecond ops shifts between torch versions and runs (below the top 5 in a run under torch 2.7.1)
    out = step_profile(method, engine, PROMPTS[:2], 8, top_ops=100)
    assert set(out) == {*QUANTITIES, "kernels", "ops", "copy_ops", "wait_ops"} and out["kernels"] == {}
    assert not any(out["copy_ops"].values()) and not any(out["wait_ops"].values())
    assert set(PHASES) - {"prefill"} <= set(out["host_ms"]) and out["host_ms"]["target_forward"] > 0
    assert all(not any(out[q].values()) for q in QUANTITIES if q not in ("host_ms", "op_ms"))
    assert 0 < out["op_ms"]["target_forward"] < out["host_ms"]["target_forward"]
    # the ops a phase spends its host time in: Token Recycling's update takes the top-k of every tree slot's logits
    assert "aten::scaled_dot_product_attention" in out["ops"]["target_forward"]
    assert ("aten::topk" in out["ops"].get("update", {})) == isinstance(method, TokenRecycling)
