"""Tree builder: exact size and depth, optimal on small cases, the paper template unchanged by name; built trees
read the statistics `make tree-stats` writes (a one-line error without them)."""

from __future__ import annotations

import itertools
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bench.cachefile import CorruptCache
from bench.core.tree import tree_from_paths
from bench.errors import ConfigError, HarnessError
from methods.shared.trees.static import (
    AcceptanceStats,
    TreeStats,
    auto_tree,
    best_tree,
    expected_mat,
    load_stats,
    read_stats,
    resolve_tree,
    save_stats,
    spine_paths,
    stats_file,
)
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


# ---------------------------------------------------------------- statistics on disk

FP32 = SimpleNamespace(name="smollm2-135m", dtype=torch.float32)


def built_cfg(tmp_path, *overrides):
    return compose_cfg("method=token_recycling", "tree=built", f"tree.calibration.cache_dir={tmp_path}", *overrides)


def test_stats_file_name_is_unchanged():
    """Existing caches stay valid: per model, dtype and calibration block, as before the calibration moved."""
    calib = compose_cfg("tree=built").tree.calibration
    path = stats_file(calib, FP32)
    assert path.name == "smollm2-135m-float32-alpaca_eval-10x128-d8k8.json"
    assert path.parent.parts[-3:] == ("results", "cache", "tree_stats")


@pytest.mark.parametrize("tree", ["built", "auto"])
def test_missing_stats_is_one_line_naming_the_command(tmp_path, tree):
    cfg = built_cfg(tmp_path, f"tree={tree}")
    with pytest.raises(ConfigError) as err:
        resolve_tree(cfg.method.tree, FP32, topk=8)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("no tree statistics for model 'smollm2-135m'")
    assert "run `make tree-stats MODEL=smollm2-135m`" in msg
    assert stats_file(cfg.method.tree.calibration, FP32).name in msg
    assert not list(tmp_path.iterdir())  # nothing was measured or written


def counts(p: np.ndarray, trials: int = 1000) -> AcceptanceStats:
    stats = AcceptanceStats(*p.shape)
    stats.trials[:] = trials
    stats.hits[:] = np.round(p * trials).astype(np.int64)
    return stats


def two_way_stats() -> TreeStats:
    """Acceptance with the matrix trained by all 64 calibration nodes vs by the accepted path only (lower)."""
    return TreeStats(counts(decaying_probs()), counts(0.6 * decaying_probs()))


def test_built_tree_reads_the_saved_stats(tmp_path):
    cfg = built_cfg(tmp_path, "tree.size=40", "tree.depth=5")
    calib = cfg.method.tree.calibration
    path = stats_file(calib, FP32)
    save_stats(two_way_stats(), calib, path)
    saved = json.loads(path.read_text())
    assert set(saved) == {"trials", "hits", "path_trained", "calibration"}
    assert saved["calibration"]["dataset"] == "alpaca_eval"
    tree, info = resolve_tree(cfg.method.tree, FP32, topk=8)
    p = TreeStats.from_json(saved).probs(40)  # p as a 40-node tree trains the matrix
    assert tree.size == 40 and tree.max_depth == 5
    assert info["tree_paths"] == best_tree(p, 40, 5)
    assert info["tree_source"] == "built" and info["predicted_mat"] == pytest.approx(expected_mat(p, tree.paths))


def test_p_follows_the_size_of_the_tree_that_trains_the_matrix():
    """A tree's acceptance is taken from the matrix a tree of its size trains: p_path (the accepted path only) at
    0 nodes, p_tree (every node of the 8x8 calibration tree) at 64 and beyond, linear in between. The estimate
    that used p_tree for every size predicted a 6-node tree's MAT 1.66 where 1.46 was measured."""
    stats = two_way_stats()
    p_tree, p_path = stats.tree.probs(), stats.path.probs()
    assert stats.calibration_size == 64
    assert np.allclose(stats.probs(0), p_path) and np.allclose(stats.probs(64), p_tree)
    assert np.allclose(stats.probs(128), p_tree)  # no extrapolation past the calibration tree
    assert np.allclose(stats.probs(16), 0.75 * p_path + 0.25 * p_tree)
    # A small tree is scored below what p_tree promised it; tree=auto builds and scores each size with its own p.
    steep = {"sizes": [1, 128], "ms": [10.0, 10.0 + 127 * 2.0], "machine": "cpu-like"}
    paths, info = auto_tree(stats, steep, [1, 2, 4, 6, 8, 16, 64], 8)
    n = len(paths)
    assert n < 64 and info["predicted_mat"] == pytest.approx(expected_mat(stats.probs(n), paths))
    assert info["predicted_mat"] < expected_mat(p_tree, paths)
    assert info["predicted_speedup_vs_ar"] == pytest.approx(info["predicted_mat"] * 10.0 / (10.0 + n * 2.0))


def test_stats_without_path_trained_counts_are_stale(tmp_path):
    """A file from before the path-trained counts: the run says to rerun `make tree-stats` (which remeasures it)."""
    calib = built_cfg(tmp_path).method.tree.calibration
    path = stats_file(calib, FP32)
    path.write_text(json.dumps({**counts(decaying_probs()).to_json(), "calibration": {}}))
    with pytest.raises(CorruptCache, match="no path-trained counts"):
        read_stats(path)
    with pytest.raises(HarnessError) as err:
        load_stats(calib, FP32)
    assert "\n" not in str(err.value) and "`make tree-stats MODEL=smollm2-135m`" in str(err.value)


@pytest.mark.slow  # the calibration script end to end; the stats reader is tested above
@pytest.mark.model
def test_calibration_script_writes_the_stats_a_built_tree_reads(smollm, tmp_path, capsys):
    """`make tree-stats` end to end on the embedded model (1 HumanEval prompt x 16 tokens), then tree=built."""
    from methods import build_method
    from scripts.calibrate_tree import main

    overrides = ["model=smollm2-135m", "tree.calibration.dataset=humaneval", "tree.calibration.limit=1",
                 "tree.calibration.max_new_tokens=16", f"tree.calibration.cache_dir={tmp_path}"]
    assert main(overrides) == 0
    path = stats_file(compose_cfg("tree=built", *overrides).tree.calibration, smollm)
    assert capsys.readouterr().out.strip() == f"tree statistics for smollm2-135m: calibrated -> {path}"
    saved = json.loads(path.read_text())
    assert np.asarray(saved["trials"]).shape == (8, 8) and np.asarray(saved["trials"])[0].sum() > 0
    assert np.asarray(saved["path_trained"]["trials"]).shape == (8, 8)
    assert main(overrides) == 0 and "up to date" in capsys.readouterr().out
    method = build_method(compose_cfg("method=token_recycling", "tree=built", *overrides).method, smollm)
    assert method.tree.size == 80 and method.describe()["tree_source"] == "built"
