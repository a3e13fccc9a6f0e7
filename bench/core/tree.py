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
    children: torch.Tensor  # [N+1, K]: row i = i's children in slot order, padded with 0 (K: the most children)
    slot_ids: torch.Tensor  # [N+1]: 0..N, so a slot known on the host is a device tensor by slicing


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
        """The index tensors on `device`, cached per device: built on the host and sent in one copy."""
        key = device_key(device)
        if key not in self._on:
            self._on[key] = self.pack(device, [])[0]
        return self._on[key]

    def tokens_on(self, tokens: list[int], device: torch.device | str) -> torch.Tensor:
        """A draft's tokens (built on the host) on `device`, sent in the same copy as the tree's indices when those
        are not there yet (a dynamic tree: one copy a step, not two)."""
        key = device_key(device)
        if key in self._on:
            return torch.tensor(tokens, dtype=torch.long, device=device)
        self._on[key], sent = self.pack(device, tokens)
        return sent

    def pack(self, device, extra: list[int]) -> tuple[DeviceTree, torch.Tensor]:
        """The DeviceTree and `extra` values on `device`, from one host-to-device copy."""
        n1, kids = len(self.parents), self.children
        width, k = self.max_depth + 1, max(1, *(len(c) for c in kids))
        parents = self.parents.tolist()
        paths, children = [], []
        for i in range(n1):
            row, j = [], i
            while j > 0:
                row.append(j)
                j = parents[j]
            paths += [0, *reversed(row)] + [0] * (width - 1 - len(row))
            children += [*kids[i]] + [0] * (k - len(kids[i]))
        flat = [max(p, 0) for p in parents] + self.depth.tolist() + paths + children + list(extra)
        packed = torch.cat([torch.tensor(flat, dtype=torch.long), self.ancestors.flatten().long()]).to(device)
        par, depth, path, child, sent, anc = packed.split([n1, n1, n1 * width, n1 * k, len(extra), n1 * n1])
        on = DeviceTree(par, depth, anc.view(n1, n1).bool(), path.view(n1, width), child.view(n1, k),
                        torch.arange(n1, device=device))
        return on, sent

    def attention_bias(self, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """[N+1, N+1] additive bias block: 0 where a node may attend (itself, ancestors), min elsewhere.

        A float additive mask in the model dtype is used because a bool 4D mask is silently wrong
        under eager attention in transformers 5.x (measured on this project's machine).
        """
        key = (dtype, device_key(device))
        if key not in self._bias:
            bias = torch.full(self.ancestors.shape, torch.finfo(dtype).min, dtype=dtype, device=device)
            self._bias[key] = bias.masked_fill_(self.on(device).ancestors, 0.0)
        return self._bias[key]


def device_key(device: torch.device | str) -> str:
    """`device` as a cache key, named as its tensors name it: a model placed on `cuda` puts its tensors on `cuda:0`,
    and a cache that took the engine's `cuda` and a tensor's `cuda:0` for two devices sent its tree twice a step (one
    more blocking copy per row and step, seen on the H200 for Sequoia and Ouroboros: 126 copies over 64 steps)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return str(device)


def tree_from_parents(parents: list[int] | torch.Tensor, choice=None, paths=None) -> Tree:
    """Build a Tree from parent slots (parents[0] must be -1, parents[i] < i, depth non-decreasing). Built in
    Python lists, then one tensor each: dynamic trees are built every step."""
    parents = parents.tolist() if isinstance(parents, torch.Tensor) else [int(p) for p in parents]
    n1 = len(parents)
    if n1 == 0 or parents[0] != -1:
        raise ValueError("slot 0 must be the root (parent -1)")
    depth = [0] * n1
    rows = [[j == 0 for j in range(n1)]]
    for i in range(1, n1):
        p = parents[i]
        if not 0 <= p < i:
            raise ValueError(f"node {i} has parent {p}; parents must precede children")
        depth[i] = depth[p] + 1
        if depth[i] < depth[i - 1]:
            raise ValueError("slots must be ordered by depth (breadth first)")
        rows.append(rows[p].copy())  # the parent's ancestors, and itself
        rows[i][i] = True
    ancestors = torch.tensor(rows, dtype=torch.bool)
    is_chain = parents[1:] == list(range(n1 - 1))
    starts = [i for i in range(1, n1) if depth[i] != depth[i - 1]]  # first slot of each depth >= 1
    slices = tuple(zip(starts, [*starts[1:], n1]))
    choice_t = None if choice is None else torch.as_tensor(choice, dtype=torch.long)
    return Tree(torch.tensor(parents), torch.tensor(depth), ancestors, is_chain, slices, choice_t, paths)


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
