"""ProPD's dynamic tree generation (methods/propd/dynamic.py): the iteration-time regression, the heads' hit
rates, the choice of tree size, and the controller's warm-up and reselection (one time line per batch size)."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from bench.core.tree import best_first, tree_from_paths
from methods.propd.dynamic import DynamicTrees, HitRates, IterationTimes, choose_size


def test_iteration_time_regression_is_weighted_least_squares():
    t = IterationTimes(alpha=1.0, decay=0.0)
    for size, sec in [(1, 0.12), (16, 0.27), (64, 0.75)]:
        t.observe(size, sec)
    b0, b1 = t.fit()
    assert b0 == pytest.approx(0.11) and b1 == pytest.approx(0.01)
    # EMA and recency weights: an old outlier at size 32 barely moves the line
    t = IterationTimes(alpha=0.5, decay=1.0)
    t.observe(32, 10.0)
    for _ in range(30):
        t.observe(1, 0.11)
        t.observe(64, 0.74)
    assert t.mean[1] == pytest.approx(0.11) and t.fit()[1] == pytest.approx(0.01, rel=1e-3)


def test_hit_rates_and_expected_acceptance():
    h = HitRates(heads=2, topk=3, alpha=0.5)
    h.observe(0, 0)  # rank 0: in top-1, 2, 3
    assert h.P[0].tolist() == [0, 0.5, 0.5, 0.5]
    h.observe(0, 2)  # rank 2: only in top-3
    assert h.P[0].tolist() == [0, 0.25, 0.25, 0.75]
    h.observe(1, None)
    assert h.P[1].tolist() == [0, 0, 0, 0]
    assert h.p()[0].tolist() == [0.25, 0.0, 0.5]
    # the paper's Figure 6 example: heads' top-2 p = (0.6, 0.3) and (0.1, ...): 'ab' 0.6, 'abe' 0.06
    nodes = best_first(torch.tensor([[0.6, 0.3], [0.1, 0.05]]), 6)
    values = dict(nodes)
    assert values[(0,)] == pytest.approx(0.6) and values[(0, 0)] == pytest.approx(0.06)
    # best first, and every prefix is a tree
    assert [v for _, v in nodes] == sorted((v for _, v in nodes), reverse=True)
    for n in range(1, 7):
        tree_from_paths([list(p) for p, _ in nodes[:n]])


@pytest.mark.parametrize("rounds", [1, 3, 70])  # 70: past the powers first built (64)
def test_rounds_of_predictions_update_as_observe_would_one_by_one(rounds):
    """observe_rounds: R predictions of every head in one update equal R rounds of `observe` for each head in turn
    (the EMA's order kept); a head's target outside its top-K is a miss."""
    g = torch.Generator().manual_seed(rounds)
    heads, k, vocab = 3, 4, 9
    top = torch.stack([torch.randperm(vocab, generator=g)[:k] for _ in range(rounds * heads)]).view(rounds, heads, k)
    tokens = torch.randint(0, vocab, (rounds, heads), generator=g)
    one, together = HitRates(heads, k, alpha=0.3), HitRates(heads, k, alpha=0.3)
    for h in (one, together):
        h.observe(1, 0)  # a state to decay from
    for r in range(rounds):
        for i in range(heads):
            hit = (top[r, i] == tokens[r, i]).nonzero()
            one.observe(i, int(hit[0, 0]) if len(hit) else None)
    together.observe_rounds(top, tokens)
    assert torch.allclose(together.P, one.P, rtol=1e-12, atol=1e-12)


def test_choose_size_maximises_expected_tokens_per_second():
    nodes = [((0,), 0.6), ((1,), 0.3), ((0, 0), 0.06), ((2,), 0.01)]
    # cheap trees: take everything; expensive nodes: take the first only
    assert choose_size(nodes, [1, 2, 4], (1.0, 0.0))["size"] == 4
    assert choose_size(nodes, [1, 2, 4], (1.0, 1.0))["size"] == 1
    best = choose_size(nodes, [1, 2, 4], (1.0, 0.1))
    speeds = {n: (1 + sum(v for _, v in nodes[:n])) / (1.0 + 0.1 * n) for n in (1, 2, 4)}
    assert best["size"] == max(speeds, key=speeds.get)


def controller_cfg(**kw):
    base = {"tree_size_choices": [1, 4, 16], "warmup_sizes": [4, 16], "time_alpha": 1.0, "time_decay": 0.0,
                "hit_alpha": 0.5, "reselect_batch_margin": 1, "reselect_seq_margin": 8}
    return OmegaConf.create({**base, **kw})


def test_controller_warms_up_then_reselects_only_when_conditions_change():
    c = DynamicTrees(controller_cfg(), heads=3, topk=3)
    assert len(c.current()) == 4
    c.observe_forward(1, 100, 4, 0.1)
    assert len(c.current()) == 16
    c.observe_forward(1, 101, 16, 0.25)  # T = 0.06 + 0.0117 size; p = 0: size 1 is best
    first = c.current()
    assert len(first) == 1 and c.selections == 1
    for _ in range(3):
        c.hits.observe(0, 0)
        c.hits.observe(1, 0)
    c.observe_forward(1, 105, 1, 0.07)
    assert c.current() is first and c.selections == 1  # 4 tokens later: not due
    c.observe_forward(2, 106, 16, 0.09)  # the batch grew: select again, on batch 1's line (batch 2 has one size)
    c.current()
    assert c.selections == 2 and c.last_choice["batch"] == 2
    assert (c.last_choice["b0"], c.last_choice["b1"]) == pytest.approx(c.times[1].fit())
    state = c.state_dict()
    d = DynamicTrees(controller_cfg(), heads=3, topk=3)
    d.load_state_dict(state)
    assert {b: t.mean for b, t in d.times.items()} == {b: t.mean for b, t in c.times.items()}
    assert torch.equal(d.hits.P, c.hits.P)
    old = {**state, "times": state["times"][1]}  # a checkpoint from before the tables per batch size
    d.load_state_dict(old)
    assert d.times == {} and d.warm == 0  # its pooled line dropped: warm up again


def test_rows_leaving_a_batch_are_not_read_as_the_cost_of_a_node():
    """One time line per batch size: a step of 8 rows is not a point on batch 1's line (pooled, the shrinking
    batches made a node look like 0.14-0.35 s, and ProPD Table 1's batch 8 and 16 runs settled on 1-2 nodes).
    Warm-up moves on once a step, not once per row that asks."""
    c = DynamicTrees(controller_cfg(warmup_sizes=[16, 1]), heads=3, topk=3)
    for _ in range(3):
        for head in range(3):
            c.hits.observe(head, 0)  # every head's top-1 right: deep trees pay
    assert {len(c.current()) for _ in range(8)} == {16}
    c.observe_forward(8, 100, 16, 0.40 + 0.002 * 8 * 17)
    assert {len(c.current()) for _ in range(8)} == {1}  # the second warm-up size, for all 8 rows of the step
    c.observe_forward(8, 101, 1, 0.40 + 0.002 * 8 * 2)
    assert c.times[8].fit() == pytest.approx((0.416, 0.016))
    for size in (16, 1):  # the batch has shrunk to one row: its own, cheaper line
        c.observe_forward(1, 150, size, 0.05 + 0.002 * (size + 1))
    assert c.fit() == pytest.approx((0.052, 0.002))
    c.observe_forward(2, 151, 16, 0.1)  # batch 2 has one size: the nearest line stands in (1 before 8)
    assert c.fit() == pytest.approx((0.052, 0.002))
    c.observe_forward(6, 152, 16, 0.3)
    assert c.fit() == pytest.approx((0.416, 0.016))


def test_a_line_that_does_not_rise_and_a_warm_up_of_one_size_keep_the_largest_tree():
    nodes = [((0,), 0.6), ((1,), 0.3), ((0, 0), 0.06), ((2,), 0.01)]
    assert choose_size(nodes, [1, 2, 4], (0.05, -0.001))["size"] == 4  # was 4 for b1 < 0 only by accident
    assert choose_size(nodes, [1, 2, 4], (-0.5, -0.1))["size"] == 4  # was any size at 1e9 tokens/s
    c = DynamicTrees(controller_cfg(warmup_sizes=[4]), heads=3, topk=3)
    for head in range(3):
        c.hits.observe(head, 0)
    c.current()
    c.observe_forward(1, 100, 4, 0.1)
    best = choose_size(best_first(c.hits.p(), 16), [1, 4, 16], (1.0, 0.0))
    assert len(c.current()) == best["size"] > 1  # one size measured: the most tokens (the fit (0, 1) picked size 1)
