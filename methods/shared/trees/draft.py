"""Trees grown node by node while drafting (draft-model methods, Post-use & Pre-cut, Ouroboros): nodes added in
any order under any earlier node, and their conversion into the engine's breadth-first Tree."""

from __future__ import annotations

import torch

from bench.core.tree import Tree, tree_from_parents

ROOT = -1  # parent id of the root's children (the root is the last committed token)


class DraftTree:
    """Nodes in insertion order: parent id (ROOT or an earlier node), token, depth, ancestor bits."""

    def __init__(self, capacity: int):
        self.parent: list[int] = []
        self.token: list[int] = []
        self.depth: list[int] = []
        self.anc = torch.zeros(capacity, capacity, dtype=torch.bool)

    def __len__(self) -> int:
        return len(self.parent)

    def add(self, parent: int, token: int) -> int:
        i = len(self.parent)
        if i >= self.anc.shape[0]:
            raise RuntimeError("draft tree capacity exceeded")
        self.parent.append(parent)
        self.token.append(int(token))
        self.depth.append(1 if parent == ROOT else self.depth[parent] + 1)
        if parent != ROOT:
            self.anc[i] = self.anc[parent]
        self.anc[i, i] = True
        return i

    def breadth_first(self) -> list[int]:
        """Node ids in slot order: by depth, then parent's slot, then insertion (= sibling draw) order."""
        slot = {ROOT: 0}
        order: list[int] = []
        for d in range(1, max(self.depth, default=0) + 1):
            level = [i for i in range(len(self)) if self.depth[i] == d]
            level.sort(key=lambda i: (slot[self.parent[i]], i))
            for i in level:
                slot[i] = len(order) + 1
                order.append(i)
        return order


class Trie:
    """A DraftTree grown as a trie: a token added under a parent that already has that child reuses it, so a
    draft chain and cached phrases hung from its tokens share their common prefixes (same paths, fewer slots)."""

    def __init__(self, capacity: int):
        self.tree = DraftTree(capacity)
        self.kids: dict[tuple[int, int], int] = {}

    def path(self, parent: int, tokens) -> list[int]:
        """The nodes of `tokens` below `parent`, added where missing."""
        nodes = []
        for tok in tokens:
            key = (parent, int(tok))
            if key not in self.kids:
                self.kids[key] = self.tree.add(parent, int(tok))
            parent = self.kids[key]
            nodes.append(parent)
        return nodes


def as_engine_tree(t: DraftTree, device=None) -> tuple[Tree, torch.Tensor, dict[int, int]]:
    """The engine's breadth-first Tree of a DraftTree, its draft tokens, and each node's slot (ROOT -> 0). With a
    device the tokens are sent there together with the tree's index tensors: one host-to-device copy a step."""
    order = t.breadth_first()
    slot = {ROOT: 0, **{node: s + 1 for s, node in enumerate(order)}}
    tree = tree_from_parents([-1] + [slot[t.parent[i]] for i in order])
    tokens = [t.token[i] for i in order]
    if device is not None:
        return tree, tree.tokens_on(tokens, device), slot
    return tree, torch.tensor(tokens, dtype=torch.long), slot
