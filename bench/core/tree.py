"""Draft-tree topology shared by every method and the verifier.

A tree has N+1 slots: slot 0 is the root (the last committed token, whose KV is not cached yet) and
slots 1..N are draft nodes. Slots are ordered by depth (breadth first), so every parent precedes its
children and each depth level is a contiguous slice: methods fill a level with one gather.
A chain (plain speculative decoding, PLD, AR with an empty draft) is the special case where every node's
parent is the previous slot.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import NamedTuple

import torch


class DeviceTree(NamedTuple):
    """A tree's index tensors on one device, built once (Tree.on): the loop reads them every step without a
    host-to-device copy."""

    parents: torch.Tensor  # [N+1], the root's parent clamped to 0 (a safe gather index)
    depth: torch.Tensor  # [N+1]
    ancestors: torch.Tensor  # [N+1, N+1] bool
    path_slots: torch.Tensor  # [N+1, D+1]: row i = the slots root..i in depth order, padded with 0 (the root)


@dataclass(frozen=True, eq=False)
class Tree:
    parents: torch.Tensor  # [N+1] long; parents[0] = -1
    depth: torch.Tensor  # [N+1] long; depth[0] = 0
    ancestors: torch.Tensor  # [N+1, N+1] bool; ancestors[i, j]: j is i or an ancestor of i
    is_chain: bool
    level_slices: tuple[tuple[int, int], ...]  # (start, stop) slot range per depth >= 1
    choice: torch.Tensor | None = None  # [N+1] long; rank of the node among its parent's candidates
    paths: tuple[tuple[int, ...], ...] | None = None
    _bias: dict = field(default_factory=dict, repr=False)
    _on: dict = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        """Number of draft nodes (root excluded)."""
        return len(self.parents) - 1

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        """Child slots of every slot, in slot order (the order they were drafted in)."""
        kids: list[list[int]] = [[] for _ in range(len(self.parents))]
        for i, p in enumerate(self.parents.tolist()[1:], start=1):
            kids[p].append(i)
        return tuple(tuple(k) for k in kids)

    @property
    def max_depth(self) -> int:
        return int(self.depth.max()) if len(self.depth) else 0

    @property
    def name(self) -> str:
        """Content hash, so results name a tree by what it is, not by a label."""
        key = json.dumps(self.paths if self.paths is not None else self.parents.tolist())
        return f"n{self.size}-d{self.max_depth}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"

    def on(self, device: torch.device | str) -> DeviceTree:
        """The index tensors on `device`, cached per device."""
        key = str(device)
        if key not in self._on:
            paths = torch.zeros(len(self.parents), self.max_depth + 1, dtype=torch.long)
            for i, row in enumerate(self.ancestors):
                slots = row.nonzero().flatten()  # ascending = by depth: one slot per level
                paths[i, : len(slots)] = slots
            self._on[key] = DeviceTree(self.parents.clamp(min=0).to(device), self.depth.to(device),
                                       self.ancestors.to(device), paths.to(device))
        return self._on[key]

    def attention_bias(self, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """[N+1, N+1] additive bias block: 0 where a node may attend (itself, ancestors), min elsewhere.

        A float additive mask in the model dtype is used because a bool 4D mask is silently wrong
        under eager attention in transformers 5.x (measured on this project's machine).
        """
        key = (dtype, str(device))
        if key not in self._bias:
            bias = torch.full(self.ancestors.shape, torch.finfo(dtype).min, dtype=dtype, device=device)
            self._bias[key] = bias.masked_fill_(self.ancestors.to(device), 0.0)
        return self._bias[key]


def tree_from_parents(parents: list[int] | torch.Tensor, choice=None, paths=None) -> Tree:
    """Build a Tree from parent slots (parents[0] must be -1, parents[i] < i, depth non-decreasing)."""
    parents = torch.as_tensor(parents, dtype=torch.long)
    n1 = len(parents)
    if n1 == 0 or int(parents[0]) != -1:
        raise ValueError("slot 0 must be the root (parent -1)")
    depth = torch.zeros(n1, dtype=torch.long)
    ancestors = torch.eye(n1, dtype=torch.bool)
    for i in range(1, n1):
        p = int(parents[i])
        if not 0 <= p < i:
            raise ValueError(f"node {i} has parent {p}; parents must precede children")
        depth[i] = depth[p] + 1
        ancestors[i] = ancestors[p]
        ancestors[i, i] = True
    if n1 > 1 and bool((depth[1:] < depth[:-1]).any()):
        raise ValueError("slots must be ordered by depth (breadth first)")
    is_chain = bool((parents[1:] == torch.arange(n1 - 1)).all())
    slices = []
    for d in range(1, int(depth.max()) + 1):
        idx = (depth == d).nonzero().flatten()
        slices.append((int(idx[0]), int(idx[-1]) + 1))
    choice_t = None if choice is None else torch.as_tensor(choice, dtype=torch.long)
    return Tree(parents, depth, ancestors, is_chain, tuple(slices), choice_t, paths)


def tree_from_paths(paths: list[list[int]]) -> Tree:
    """Build a Tree from Medusa/TR-style choice paths: [a, b] = candidate b of candidate a of the root.

    Paths are sorted by (length, lexicographic) so levels are contiguous; every prefix of a path must
    itself be a path.
    """
    ordered = sorted((tuple(p) for p in paths), key=lambda p: (len(p), p))
    if len(set(ordered)) != len(ordered):
        raise ValueError("duplicate path in tree")
    slot = {(): 0}
    parents, choice = [-1], [0]
    for p in ordered:
        if not p:
            raise ValueError("empty path")
        if p[:-1] not in slot:
            raise ValueError(f"path {list(p)} has no parent path {list(p[:-1])}")
        slot[p] = len(parents)
        parents.append(slot[p[:-1]])
        choice.append(p[-1])
    return tree_from_parents(parents, choice=choice, paths=tuple(ordered))


@lru_cache(maxsize=256)
def chain(n: int) -> Tree:
    """A chain of n draft tokens (cached: PLD asks for the same few lengths every step)."""
    return tree_from_parents([-1] + list(range(n)))


def best_first(p: torch.Tensor, limit: int) -> list[tuple[tuple[int, ...], float]]:
    """The `limit` tree nodes of highest expected acceptance prod_i p[i, k_i], best first, as (rank path, value):
    p[i, r] is the chance that the rank-r candidate at depth i is right (Medusa head i, or a draft's rank-r token);
    [a, b] is the rank-b candidate under rank-a. Parents always come before their children, so every prefix of
    the list is a tree."""
    depth, k = p.shape
    values = p.tolist()
    heap = [(-values[0][r], (r,)) for r in range(k)]
    heapq.heapify(heap)
    out = []
    while heap and len(out) < limit:
        neg, path = heapq.heappop(heap)
        out.append((path, -neg))
        if len(path) < depth:
            for r in range(k):
                heapq.heappush(heap, (neg * values[len(path)][r], (*path, r)))
    return out
