"""bench.core.launches: ops (kernel launches on a GPU) counted per decode phase on the CPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bench.core.engine import Engine
from bench.core.launches import OpCounter, OpTimer, ops_per_step
from bench.core.timing import PHASES, per_decode_step
from methods.ar import Autoregressive
from tests.conftest import tiny_llama
from tests.test_engine_tiny import NO_EOS, PROMPTS, V, bundle, tr


@pytest.mark.parametrize("inference", [False, True])
def test_views_and_allocations_launch_nothing_and_composites_count_their_parts(inference):
    x = torch.ones(3, 1, 4)
    with torch.inference_mode(inference), OpCounter() as counter:  # the engine decodes in inference mode
        x.view(4, 3).t()[0]  # views only
        torch.empty(5)
        y = x + 1
        y.sum(dim=0)
        x.expand(3, 2, 4).reshape(6, 4)  # a composite: its copy counts (HF's repeat_kv under a tree mask)
    assert counter.total == 3 and counter.ops == {"add.Tensor": 1, "sum.dim_IntList": 1, "clone.default": 1}


def test_phases_tile_every_op_of_a_generation():
    model = tiny_llama(V, "sdpa", 512)
    engine = Engine(model, [NO_EOS], max_context=512)
    for method in (Autoregressive(None, bundle(model)), tr(model)):
        with OpCounter() as counter:
            out = method.generate(engine, PROMPTS[0], 12, OpTimer(counter))
        assert set(PHASES) <= set(out.phase_times) and sum(out.phase_times.values()) == counter.total
    ar, recycling = (ops_per_step(m, engine, PROMPTS[:2], 12) for m in (Autoregressive(None, bundle(model)), tr(model)))
    assert "prefill" not in ar and ar["draft"] == 0 < recycling["draft"]  # AR drafts nothing; TR reads its matrix
    # What a step launches besides the forward, pinned a little above the counts of this torch (AR 38.7, Token
    # Recycling 69.6 on this tiny model at b48eceb; 38.1 and 68.3 on the embedded one): on a launch-bound GPU each
    # is ~18 us (the H200's 20 ms forward of 1095 ops, docs/gpu_leases.md).
    for ops, budget in ((ar, 48), (recycling, 80)):
        assert sum(ops.values()) - ops["target_forward"] <= budget, ops


def test_per_decode_step_leaves_the_prefill_out():
    gens = [SimpleNamespace(phase_times={"prefill": 9.0, "draft": 2.0, "verify": 1.0}, accept_lengths=[1, 3, 2]),
            SimpleNamespace(phase_times={"prefill": 5.0, "draft": 4.0}, accept_lengths=[1, 1])]
    # 3 decode steps: each generation's first token is its prefill's
    assert per_decode_step(gens) == {"draft": 2.0, "verify": 1 / 3}


def test_a_batch_sharing_one_tree_launches_a_step_s_work_once_not_a_row_at_a_time():
    """Rows that draft the same tree (AR, a static tree) are verified, committed and given their inputs together
    (bench.core.engine's groups): a row more adds a few ops a step outside the forward (its prefix's fill, its
    tokens' copy, its host copy, its part of the cache compaction's plan: 7 in all), where verifying it alone
    made it 47 at 8e1706b (each a kernel launch on a GPU). Token Recycling's proposers draft and learn a row each: its
    preprocess and verify phases are the engine's alone."""
    model = tiny_llama(V, "sdpa", 512)
    engine = Engine(model, [NO_EOS], max_context=512)

    def per_step(make, rows: int, phases) -> float:  # a decode step's ops in `phases`: 12 new tokens less 6
        spent = []
        for new in (6, 12):
            prompts = [PROMPTS[3], PROMPTS[0]] * (rows // 2)  # of two lengths: the cache's rows move
            with OpCounter() as counter:
                gens = engine.generate_batch([make() for _ in range(rows)], prompts, new, OpTimer(counter),
                                             [torch.Generator().manual_seed(b) for b in range(rows)])
            spent.append(sum(v for k, v in gens[0].phase_times.items() if k in phases))
        return (spent[1] - spent[0]) / 6

    recycling = tr(model)
    make_ar, make_tr = (lambda: Autoregressive(None, bundle(model))), recycling.fork  # a batch's rows: forks
    for make in (make_ar, make_tr):  # the first run's own ops (a tree's packing), once
        per_step(make, 2, ())
    for make, phases, most in ((make_ar, set(PHASES) - {"target_forward"}, 7), (make_tr, {"preprocess", "verify"}, 1)):
        two, four = per_step(make, 2, phases), per_step(make, 4, phases)
        assert 0 < four - two <= 2 * most, (two, four)
