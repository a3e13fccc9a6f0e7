"""Token order of a draft tree and the block sparsity of its attention mask (DySpec Appendix C): a block-sparse
kernel's work is the number of non-zero tiles, which depends on the order. Trees are parent arrays (`parents[0] = -1`,
`parents[i] < i`; size counts the root); an order `order[k]` is the old index of the node placed at position k."""

from __future__ import annotations

import heapq
import itertools

import numpy as np

from bench.errors import HarnessError

BLOCK = 32  # DySpec's kernel tile ("the block size is 32")


class TreeOrderError(HarnessError, ValueError):
    """A parent array or an order that is not a tree laid out parents-first."""


def as_parents(parents) -> np.ndarray:
    """Validated int64 copy: root at 0, each parent before its child."""
    p = np.asarray(parents.tolist() if hasattr(parents, "tolist") else parents, dtype=np.int64).ravel()
    if p.size == 0 or p[0] != -1:
        raise TreeOrderError("parents[0] must be -1 (the root)")
    bad = np.nonzero((p[1:] < 0) | (p[1:] >= np.arange(1, p.size)))[0]
    if bad.size:
        i = int(bad[0]) + 1
        raise TreeOrderError(f"node {i} has parent {int(p[i])}; every parent must come before its child")
    return p


def children_lists(parents) -> list[list[int]]:
    """Children of every node in index order (for a DySpec tree: draft-rank order)."""
    p = as_parents(parents)
    kids: list[list[int]] = [[] for _ in range(p.size)]
    for i in range(1, p.size):
        kids[p[i]].append(i)
    return kids


def subtree_sizes(parents) -> np.ndarray:
    """Nodes in the subtree of every node, itself included."""
    p = as_parents(parents)
    size = np.ones(p.size, dtype=np.int64)
    for i in range(p.size - 1, 0, -1):  # children come after parents: one backward sweep suffices
        size[p[i]] += size[i]
    return size


def dfs_order(parents, heavy_first: bool = False) -> np.ndarray:
    """Depth-first pre-order from the root. Children in index order (DySpec's rank order), or with
    `heavy_first` by descending subtree size, ties by index (heavy-path order)."""
    p = as_parents(parents)
    kids = children_lists(p)
    if heavy_first:
        size = subtree_sizes(p)
        kids = [sorted(k, key=lambda c: (-size[c], c)) for k in kids]
    order, stack = [], [0]
    while stack:
        v = stack.pop()
        order.append(v)
        stack.extend(reversed(kids[v]))  # so the first child is popped next
    return np.asarray(order, dtype=np.int64)


def bfs_order(parents) -> np.ndarray:
    """Breadth-first, children in index order: the slot layout bench.core.tree uses."""
    kids = children_lists(parents)
    order, level = [0], [0]
    while level:
        level = [c for v in level for c in kids[v]]
        order.extend(level)
    return np.asarray(order, dtype=np.int64)


def permute(parents, order) -> np.ndarray:
    """Parent array of the same tree with node order[k] moved to position k."""
    p = as_parents(parents)
    o = np.asarray(order, dtype=np.int64).ravel()
    if o.size != p.size or not np.array_equal(np.sort(o), np.arange(p.size)):
        raise TreeOrderError(f"order must be a permutation of 0..{p.size - 1}")
    new_pos = np.empty_like(o)
    new_pos[o] = np.arange(o.size)
    old_parent = p[o]
    new = np.where(old_parent < 0, -1, new_pos[np.maximum(old_parent, 0)])
    return as_parents(new)  # raises if the order puts a child before its parent


def tree_mask(parents, prefix_len: int = 0) -> np.ndarray:
    """bool [size, prefix_len + size]: row i sees every prefix key, its ancestors and itself."""
    p = as_parents(parents)
    if prefix_len < 0:
        raise TreeOrderError(f"prefix_len must be >= 0, got {prefix_len}")
    n = p.size
    mask = np.zeros((n, prefix_len + n), dtype=bool)
    mask[:, :prefix_len] = True
    tree = mask[:, prefix_len:]  # a view
    tree[0, 0] = True
    for i in range(1, n):  # a node sees what its parent sees, plus itself
        tree[i] = tree[p[i]]
        tree[i, i] = True
    return mask


def block_count(mask, block: int = BLOCK) -> int:
    """Number of `block x block` tiles (from the top-left corner; partial edge tiles count) holding a True."""
    m = np.asarray(mask, dtype=bool)
    if m.ndim != 2 or block < 1:
        raise TreeOrderError("block_count needs a 2-D mask and block >= 1")
    r, c = (-(-s // block) for s in m.shape)
    padded = np.zeros((r * block, c * block), dtype=bool)
    padded[: m.shape[0], : m.shape[1]] = m
    return int(padded.reshape(r, block, c, block).any(axis=(1, 3)).sum())


def prefix_block_count(tree_only_mask, prefix_len: int, block: int = BLOCK) -> int:
    """block_count(tree_mask(parents, prefix_len)) from the prefix-free mask: whole prefix tiles are all non-zero;
    only the tile straddling prefix and tree needs a look."""
    m = np.asarray(tree_only_mask, dtype=bool)
    whole, shift = divmod(prefix_len, block)
    rows = -(-m.shape[0] // block)
    straddled = np.concatenate([np.ones((m.shape[0], shift), dtype=bool), m], axis=1)
    return rows * whole + block_count(straddled, block)


# ---------------------------------------------------------------- random trees (Table 5 gives no recipe)

def random_recursive_tree(size: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform random recursive tree: node i's parent is uniform over nodes 0..i-1. Index = creation order."""
    if size < 1:
        raise TreeOrderError("a tree has at least the root")
    return np.concatenate([[-1], np.floor(rng.random(size - 1) * np.arange(1, size)).astype(np.int64)])


def greedy_expansion_tree(size: int, rng: np.random.Generator, concentration: float = 1.0) -> np.ndarray:
    """A tree grown like DySpec's greedy builder: repeatedly add the candidate (per expanded node, its next child)
    of highest path value, a child's weight a stick-breaking draw (child k: B_k ~ Beta(1, concentration) of what
    ranks < k left). Index = expansion order, so earlier siblings tend to own larger subtrees."""
    if size < 1:
        raise TreeOrderError("a tree has at least the root")
    parents = [-1]
    value = [1.0]
    left = [1.0]  # stick not yet given to a child, per node
    heap: list[tuple[float, int, int]] = []  # (-value of the candidate, tie counter, parent)
    tie = itertools.count()  # equal values pop in push order; never compare further

    def push_next_child(v: int) -> None:
        share = left[v] * rng.beta(1.0, concentration)
        left[v] -= share
        heapq.heappush(heap, (-value[v] * share, next(tie), v))

    push_next_child(0)
    while len(parents) < size:
        neg, _, v = heapq.heappop(heap)
        node = len(parents)
        parents.append(v)
        value.append(-neg)
        left.append(1.0)
        push_next_child(v)  # its next-ranked sibling
        push_next_child(node)  # its own first child
    return np.asarray(parents, dtype=np.int64)


GENERATORS = {"recursive": random_recursive_tree, "greedy": greedy_expansion_tree}
# The orders DySpec's Table 5 compares: creation order, bench.core.tree's slot layout, DySpec's reorder, and
# the paper's near-optimal reference.
ORDERS = {"original": lambda p: np.arange(len(p)), "bfs": bfs_order, "dfs": dfs_order,
          "heavy": lambda p: dfs_order(p, heavy_first=True)}
