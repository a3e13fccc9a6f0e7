"""ProPD's early pruning criterion (paper §4.1): after `layer` decoder layers, an early prediction head gives each
tree slot's top-k successors; a node whose token is not in its parent's top-k is dropped with its whole subtree.

Used as the slot filter of the core's `LayerwiseForward`, which runs the remaining layers over the survivors. Only
slots that are some node's parent need the early head (a Medusa tree of 64 nodes has 42 leaves), so the head
runs on those alone. Membership in the top-k is tested as `score >= k-th largest score` of the parent's logits:
one gather and one topk, no set lookups.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bench.core.tree import Tree


class TopKPrune:
    def __init__(self, norm: torch.nn.Module, head, topk: int):
        """norm: the target's final norm (the head reads normed states, like the Medusa heads); head(x [.., H])
        -> logits [.., V]: the early prediction head of this layer."""
        self.norm = norm
        self.head = head
        self.topk = int(topk)

    @torch.inference_mode()
    def __call__(self, hidden: torch.Tensor, input_ids: torch.Tensor, trees: Sequence[Tree]) -> torch.Tensor:
        b, t = input_ids.shape
        keep = torch.zeros(b, t, dtype=torch.bool, device=input_ids.device)
        keep[:, 0] = True
        parent_slots = sorted({p for tree in trees for p in tree.parents[1:].tolist()})
        if not parent_slots:
            return keep
        slots = torch.tensor(parent_slots, device=hidden.device)
        logits = self.head(self.norm(hidden[:, slots]))  # [B, P, V]
        kth = logits.topk(min(self.topk, logits.shape[-1]), dim=-1).values[..., -1]  # [B, P]
        where = torch.full((t,), -1, dtype=torch.long)
        where[slots.cpu()] = torch.arange(len(parent_slots))
        for row, tree in enumerate(trees):
            n = tree.size + 1
            if n == 1:
                continue
            parent = where[tree.parents[1:]].to(hidden.device)  # each node's parent, as an index into `slots`
            score = logits[row, parent, input_ids[row, 1:n]]
            ok = torch.ones(n, dtype=torch.bool, device=hidden.device)
            ok[1:] = score >= kth[row, parent]
            # A node survives if it and all its ancestors pass.
            anc = tree.ancestors.to(hidden.device)
            keep[row, :n] = ~(anc & ~ok[None, :]).any(-1)
        return keep
