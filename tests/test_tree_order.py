"""bench/core/tree_order.py (DFS / heavy-path reorder, ancestor masks, tile counts) and DySpec's Table 5
(`python -m bench.report dyspec/table5`)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from bench.core.tree import tree_from_paths
from bench.core.tree_order import (
    GENERATORS,
    ORDERS,
    TreeOrderError,
    bfs_order,
    block_count,
    dfs_order,
    greedy_expansion_tree,
    permute,
    prefix_block_count,
    random_recursive_tree,
    subtree_sizes,
    tree_mask,
)
from bench.report.__main__ import main as report_main


def random_trees(seed: int = 0, count: int = 30):
    rng = np.random.default_rng(seed)
    for k in range(count):
        size = int(rng.integers(1, 120))
        gen = (random_recursive_tree, greedy_expansion_tree)[k % 2]
        yield gen(size, rng)


def random_topological_order(parents, rng) -> np.ndarray:
    """A uniformly picked next node among those whose parent is already placed."""
    kids = [[] for _ in parents]
    for i in range(1, len(parents)):
        kids[parents[i]].append(i)
    order, ready = [], [0]
    while ready:
        v = ready.pop(int(rng.integers(len(ready))))
        order.append(v)
        ready += kids[v]
    return np.asarray(order)


def tree_block_count(parents, prefix_len: int = 0, block: int = 32) -> int:
    """Tiles of the tree's mask behind prefix_len prefix keys, counted on the whole mask."""
    return block_count(tree_mask(parents, prefix_len), block)


def naive_block_count(mask, block):
    rows, cols = mask.shape
    return sum(bool(mask[r:r + block, c:c + block].any())
               for r in range(0, rows, block) for c in range(0, cols, block))


@pytest.mark.parametrize("order_of", [dfs_order, ORDERS["heavy"]], ids=["dfs", "heavy"])
def test_reorder_is_a_permutation_with_parents_first_and_contiguous_subtrees(order_of):
    for parents in random_trees():
        order = order_of(parents)
        assert sorted(order.tolist()) == list(range(len(parents))) and order[0] == 0
        new = permute(parents, order)
        assert all(0 <= new[i] < i for i in range(1, len(new)))
        size = subtree_sizes(new)
        mask = tree_mask(new)
        for v in range(len(new)):  # v's subtree = exactly the slots v .. v + size - 1
            in_subtree = np.nonzero(mask[:, v])[0]
            assert in_subtree.tolist() == list(range(v, v + size[v]))


def test_heavy_path_order_visits_the_largest_child_subtree_first():
    for parents in random_trees(1):
        new = permute(parents, ORDERS["heavy"](parents))
        size = subtree_sizes(new)
        for v in range(len(new)):
            kids = np.nonzero(new == v)[0]
            if len(kids):
                assert kids[0] == v + 1 and size[kids[0]] == size[kids].max()


def test_dfs_of_a_dfs_laid_out_tree_is_the_identity():
    for parents in random_trees(2):
        new = permute(parents, dfs_order(parents))
        assert dfs_order(new).tolist() == list(range(len(new)))


def test_permuting_preserves_the_ancestor_relation():
    rng = np.random.default_rng(3)
    for parents in random_trees(3):
        mask = tree_mask(parents)
        for order in (dfs_order(parents), ORDERS["heavy"](parents), bfs_order(parents),
                      random_topological_order(parents, rng)):
            assert np.array_equal(tree_mask(permute(parents, order)), mask[np.ix_(order, order)])


def test_mask_matches_the_engine_tree_and_sees_the_prefix():
    tree = tree_from_paths([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
    parents = tree.parents
    assert np.array_equal(tree_mask(parents), tree.ancestors.numpy())
    wide = tree_mask(parents, prefix_len=5)
    assert wide.shape == (7, 12) and wide[:, :5].all() and np.array_equal(wide[:, 5:], tree_mask(parents))


def test_bad_trees_and_orders_are_one_clear_error():
    with pytest.raises(TreeOrderError, match="root"):
        tree_mask([0, 0])
    with pytest.raises(TreeOrderError, match="node 2 has parent 3"):
        tree_mask([-1, 0, 3, 0])
    with pytest.raises(TreeOrderError, match="before its child"):
        permute([-1, 0, 1], [0, 2, 1])  # puts node 2 before its parent 1
    with pytest.raises(TreeOrderError, match="permutation"):
        permute([-1, 0, 1], [0, 1, 1])


def test_block_count_matches_a_naive_loop():
    rng = np.random.default_rng(4)
    for _ in range(200):
        shape = tuple(int(x) for x in rng.integers(1, 40, size=2))
        mask = rng.random(shape) < rng.choice([0.01, 0.05, 0.3])
        block = int(rng.integers(1, 9))
        assert block_count(mask, block) == naive_block_count(mask, block)


def test_prefix_count_equals_counting_the_wide_mask():
    for parents in random_trees(5, count=12):
        mask = tree_mask(parents)
        for prefix in (0, 1, 17, 31, 32, 33, 100):
            for block in (4, 32):
                want = block_count(tree_mask(parents, prefix), block)
                assert prefix_block_count(mask, prefix, block) == want


@pytest.mark.parametrize("size", [1, 2, 31, 32, 33, 64, 100, 256])
def test_chain_fills_the_lower_triangle_and_star_fills_one_column_and_the_diagonal(size):
    nb = -(-size // 32)
    chain = [-1] + list(range(size - 1))
    star = [-1] + [0] * (size - 1)
    assert tree_block_count(chain) == nb * (nb + 1) // 2
    # star: each row sees the root and itself -> tile column 0 plus the diagonal tiles, sharing tile (0, 0)
    assert tree_block_count(star) == 2 * nb - 1
    assert tree_block_count(star, prefix_len=64) == 2 * nb + (2 * nb - 1)  # + two whole prefix tiles per tile row
    # reordering cannot change either: a chain has one layout, a star's leaves are interchangeable
    for parents in (chain, star):
        assert tree_block_count(permute(parents, dfs_order(parents))) == tree_block_count(parents)


def test_any_parents_first_order_lies_between_the_diagonal_and_the_lower_triangle():
    rng = np.random.default_rng(6)
    for parents in random_trees(6):
        nb = -(-len(parents) // 32)
        for order in (np.arange(len(parents)), dfs_order(parents), random_topological_order(parents, rng)):
            assert nb <= tree_block_count(permute(parents, order)) <= nb * (nb + 1) // 2


def test_dfs_can_add_a_tile_on_a_small_tree():
    """Why no test claims DFS never increases the count: root -> (1, 2), 2 -> 3, 1 -> 4, with 2x2 tiles.
    Original rows {0,1} {2,3} {4}: 5 tiles; DFS 0,1,4,2,3 splits the pair (2, 3) apart: 6 tiles."""
    parents = [-1, 0, 0, 2, 1]
    assert dfs_order(parents).tolist() == [0, 1, 4, 2, 3]
    assert tree_block_count(parents, block=2) == 5
    assert tree_block_count(permute(parents, dfs_order(parents)), block=2) == 6


def test_dfs_reduces_tiles_on_average_for_large_random_trees():
    rng = np.random.default_rng(7)
    for gen in GENERATORS.values():
        trees = [gen(1024, rng) for _ in range(4)]
        original = np.mean([tree_block_count(p) for p in trees])
        dfs = np.mean([tree_block_count(permute(p, dfs_order(p))) for p in trees])
        assert dfs < original / 2


def test_generators_give_valid_trees_of_the_exact_size():
    rng = np.random.default_rng(8)
    for gen in GENERATORS.values():
        for size in (1, 2, 50):
            parents = gen(size, rng)
            assert len(parents) == size and parents[0] == -1
            assert all(0 <= parents[i] < i for i in range(1, size))


# ---------------------------------------------------------------- CLI


def main(argv: list[str]) -> int:
    return report_main(["dyspec/table5", *argv])


def test_cli_writes_the_table_with_the_paper_column_and_the_figure(tmp_path, capsys):
    rc = main(["--sizes", "64,256", "--trees-per-size", "3", "--fig-sizes", "96", "--prefixes", "0,40",
               "--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    df = pd.read_csv(tmp_path / "tables" / "dyspec_table5.csv")
    assert set(df.source) == {"recursive", "greedy"} and set(df.tree_size) == {64, 256}
    row = df[(df.source == "recursive") & (df.tree_size == 256)].iloc[0]
    assert row.paper_blocks_original == 36 and row.paper_blocks_dfs == 22.5  # the paper's, beside ours
    assert row.blocks_dfs < row.blocks_original <= row.lower_triangle == 36
    assert df[df.tree_size == 64].paper_blocks_original.isna().all()  # not in the paper: left empty
    md = (tmp_path / "tables" / "dyspec_table5.md").read_text()
    assert "(22.5)" in md and out.splitlines()[0] == str(tmp_path / "tables" / "dyspec_table5.md")  # paths listed
    pts = pd.read_csv(tmp_path / "figures" / "dyspec_fig9_block_counts.csv")
    assert set(pts.tree_size) == {96} and set(pts.prefix_len) == {0, 40}
    for png in ("dyspec_fig9_block_counts.png", "dyspec_fig7_masks.png"):
        assert (tmp_path / "figures" / png).stat().st_size > 0 and str(tmp_path / "figures" / png) in out
    assert not list(tmp_path.glob("*/.*"))  # no temp files left behind


def test_cli_one_tree_per_size_leaves_the_std_empty(tmp_path):
    # One tree per size has no spread: its std cells are empty, not a crash (pivot_table drops all-NaN columns).
    rc = main(["--sizes", "64", "--trees-per-size", "1", "--fig-sizes", "64", "--results", str(tmp_path)])
    assert rc == 0
    df = pd.read_csv(tmp_path / "tables" / "dyspec_table5.csv")
    assert df.trees.tolist() == [1, 1] and df.blocks_original_std.isna().all() and df.blocks_dfs_std.isna().all()
    assert (df.blocks_original > 0).all()


def test_cli_reads_recorded_trees(tmp_path):
    rng = np.random.default_rng(9)
    lines = [json.dumps({"parents": random_recursive_tree(n, rng).tolist(), "prefix_len": pre})
             for n, pre in ((100, 128), (120, 130), (300, 0))]
    trees = tmp_path / "trees.jsonl"
    trees.write_text("\n".join(lines) + "\n")
    rc = main(["--sizes", "256", "--trees-per-size", "2", "--trees", str(trees), "--prefixes", "64",
               "--results", str(tmp_path / "r")])
    assert rc == 0
    by_bucket = pd.read_csv(tmp_path / "r" / "tables" / "dyspec_table5_trees.csv")
    assert by_bucket.size_bucket.tolist() == ["1-128", "257-384"]
    assert by_bucket.trees.tolist() == [2, 1] and by_bucket.prefix_len_mean.tolist() == [129, 0]
    first = json.loads(lines[0])
    want = (tree_block_count(first["parents"], 128) + tree_block_count(
        json.loads(lines[1])["parents"], 130)) / 2
    assert by_bucket.blocks_original_at_recorded_prefix[0] == want
    third = json.loads(lines[2])["parents"]
    assert by_bucket.blocks_dfs[1] == tree_block_count(permute(third, dfs_order(third)))
    pts = pd.read_csv(tmp_path / "r" / "figures" / "dyspec_fig9_block_counts.csv")
    assert set(pts.source) == {"file"} and set(pts.prefix_len) == {0, 64}  # 0 is always there
    assert "Recorded trees" in (tmp_path / "r" / "tables" / "dyspec_table5.md").read_text()


@pytest.mark.parametrize("line, message", [
    ('{"parents": [-1, 0, 5], "prefix_len": 0}', "node 2 has parent 5"),
    ('{"parents": [-1, 0]}', "missing key 'prefix_len'"),
    ('{"parents": [-1, 0], "prefix_len": -3}', "prefix_len"),
    ("not json", "malformed line 2"),
])
def test_cli_bad_tree_file_is_one_error_line(tmp_path, capsys, line, message):
    trees = tmp_path / "trees.jsonl"
    trees.write_text('{"parents": [-1], "prefix_len": 0}\n' + line + "\n")
    rc = main(["--sizes", "64", "--trees-per-size", "1", "--trees", str(trees), "--results", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "tables").exists()
