"""Tree builder: exact size and depth, optimal on small cases, the paper template unchanged by name."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from bench.core.tree import tree_from_paths
from bench.errors import ConfigError
from methods.trees import AcceptanceStats, auto_tree, best_tree, expected_mat, resolve_tree, spine_paths
from tests.conftest import compose_cfg

# Token Recycling's "2.2.2" tree as published (official tree_template_.py, implementations.md §1.2).
TR_2_2_2 = [
    [0], [1], [2], [3], [4], [5], [6], [7],
    [0, 0], [0, 1], [0, 2], [0, 3], [0, 4], [0, 5], [0, 6], [0, 7], [1, 0], [1, 1], [1, 2], [1, 3], [2, 0],
    [2, 1], [2, 2], [3, 0], [3, 1], [4, 0], [5, 0], [6, 0], [7, 0],
    [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 0, 3], [0, 0, 4], [0, 0, 5], [0, 0, 6], [0, 0, 7], [0, 1, 0],
    [0, 1, 1], [0, 1, 2], [0, 2, 0], [0, 2, 1], [0, 3, 0], [0, 4, 0], [0, 5, 0], [0, 6, 0], [0, 7, 0],
    [1, 0, 0], [1, 0, 1], [1, 1, 0], [2, 0, 0], [3, 0, 0], [4, 0, 0], [5, 0, 0],
    [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 3], [0, 0, 0, 4], [0, 0, 1, 0], [0, 0, 1, 1],
    [0, 0, 2, 0], [0, 0, 3, 0], [0, 0, 4, 0], [0, 1, 0, 0], [0, 2, 0, 0], [1, 0, 0, 0], [2, 0, 0, 0],
    [3, 0, 0, 0],
    [0, 0, 0, 0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 2], [0, 0, 0, 1, 0], [0, 0, 0, 2, 0], [0, 0, 1, 0, 0],
    [0, 1, 0, 0, 0], [1, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1], [0, 0, 0, 1, 0, 0],
]


def decaying_probs(depth=8, topk=8):
    """A plausible p[d, r]: falls with rank, slowly with depth."""
    r = np.arange(topk)
    return np.stack([0.6 * 0.55**r * (0.97**d) for d in range(depth)])


def test_template_by_name_is_the_paper_tree_unchanged():
    cfg = compose_cfg("method=token_recycling", "tree=tr_2_2_2")
    tree, info = resolve_tree(cfg.method.tree, bundle=None, topk=8)
    assert [list(p) for p in tree.paths] == TR_2_2_2
    assert tree.size == 80 and tree.max_depth == 6
    assert [b - a for a, b in tree.level_slices] == [8, 21, 25, 15, 8, 3]
    assert info["tree_source"] == "template"


@pytest.mark.parametrize(("size", "depth"), [(30, 6), (50, 6), (80, 6), (100, 6), (80, 4), (80, 8), (8, 8), (1, 1)])
def test_exact_size_and_depth_prefix_closed(size, depth):
    paths = best_tree(decaying_probs(), size, depth)
    tree = tree_from_paths(paths)  # raises unless every prefix is present
    assert tree.size == size and tree.max_depth == depth
    assert all(0 <= r < 8 for p in paths for r in p)


def test_greedy_is_optimal_on_a_small_case():
    p = np.array([[0.7, 0.2], [0.5, 0.4], [0.9, 0.1]])
    all_nodes = [q for d in range(1, 4) for q in itertools.product(range(2), repeat=d)]
    for size, depth in [(3, 3), (4, 3), (5, 2), (6, 3)]:
        best = -1.0
        for subset in itertools.combinations(all_nodes, size):
            s = set(subset)
            if all(q[:-1] in s or len(q) == 1 for q in s) and max(map(len, s)) == depth:
                best = max(best, expected_mat(p, s))
        got = expected_mat(p, best_tree(p, size, depth))
        assert got == pytest.approx(best), (size, depth)


def test_impossible_requests_fail_clearly():
    p = decaying_probs(depth=3, topk=2)
    with pytest.raises(ConfigError, match="cannot have depth"):
        best_tree(p, 2, 3)
    with pytest.raises(ConfigError, match="calibrated depth"):
        best_tree(p, 10, 4)
    with pytest.raises(ConfigError, match="do not fit"):
        best_tree(p, 7, 2)


def test_stats_count_every_correct_path_node():
    tree = tree_from_paths(spine_paths(depth=2, topk=2))  # [0], [1], [0, 0], [0, 1]
    stats = AcceptanceStats(depth=2, topk=2)
    inputs = torch.tensor([5, 7, 8, 9, 4])  # root, [0]=7, [1]=8, [0,0]=9, [0,1]=4
    target = torch.tensor([8, 4, 0, 0, 0])  # after root: 8 (rank 1 right), after 7: 4 (but 7 was wrong)
    stats.observe(tree, inputs, target)
    assert stats.trials.tolist() == [[1, 1], [0, 0]]  # depth-2 nodes' parent [0] was not accepted
    assert stats.hits.tolist() == [[0, 1], [0, 0]]
    p = stats.probs()
    assert 0 < p[0, 1] < 1 and p[0, 1] > p[0, 0]


def test_auto_prefers_small_trees_when_forwards_are_expensive():
    p = decaying_probs()
    flat = {"sizes": [1, 128], "ms": [10.0, 10.5], "machine": "gpu-like"}
    steep = {"sizes": [1, 128], "ms": [10.0, 10.0 + 127 * 2.0], "machine": "cpu-like"}
    sizes = [1, 2, 4, 8, 16, 32, 64, 128]
    big, info_big = auto_tree(p, flat, sizes, 8)
    small, info_small = auto_tree(p, steep, sizes, 8)
    assert len(big) > len(small)
    assert info_big["predicted_speedup_vs_ar"] > info_small["predicted_speedup_vs_ar"]
    assert math.isclose(info_small["predicted_mat"], expected_mat(p, small))
