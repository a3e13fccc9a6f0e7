"""ProPD's early pruning criterion (paper §4.1): after `layer` decoder layers, an early prediction head gives each
tree slot's top-k successors; a node whose token is not in its parent's top-k is dropped with its whole subtree.

Used as the slot filter of the core's `LayerwiseForward`, which runs the remaining layers over the survivors. Only
slots that are some node's parent need the early head (a Medusa tree of 64 nodes has 42 leaves), so the head
runs on those alone. Membership in the top-k is tested as `score >= k-th largest score` of the parent's logits:
one gather and one topk, no set lookups.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from bench.core.tree import Tree, device_key


class PrunePlan(NamedTuple):
    """A batch of trees' index tensors for the criterion, built once on the host and copied once per device."""

    slots: torch.Tensor  # [P] slots that are some row's parent: the early head runs on these alone
    parent: torch.Tensor  # [B, W-1] node j+1's parent as an index into `slots` (0 past the row's tree)
    ancestors: torch.Tensor  # [B, W, W] bool, a slot past the row's tree has only itself
    valid: torch.Tensor  # [B, W] bool: the row's tree slots


def prune_plan(trees: Sequence[Tree], width: int) -> PrunePlan:
    b = len(trees)
    slots = sorted({p for tree in trees for p in tree.parents[1:].tolist()})
    where = torch.zeros(width, dtype=torch.long)
    where[slots] = torch.arange(len(slots))
    parent = torch.zeros(b, max(width - 1, 0), dtype=torch.long)
    ancestors = torch.eye(width, dtype=torch.bool).repeat(b, 1, 1)
    valid = torch.zeros(b, width, dtype=torch.bool)
    for row, tree in enumerate(trees):
        n = tree.size + 1
        parent[row, : n - 1] = where[tree.parents[1:]]
        ancestors[row, :n, :n] = tree.ancestors
        valid[row, :n] = True
    return PrunePlan(torch.tensor(slots, dtype=torch.long), parent, ancestors, valid)


def on_device(plan: PrunePlan, device: torch.device) -> PrunePlan:
    """The plan on `device` in one host-to-device copy (each copy is a wait on a GPU), unpacked there."""
    flat = torch.cat([t.flatten().long() for t in plan]).to(device)
    parts = flat.split([t.numel() for t in plan])
    return PrunePlan(*(part.view(t.shape).to(t.dtype) for part, t in zip(parts, plan, strict=True)))


class TopKPrune:
    def __init__(self, norm: torch.nn.Module, head, topk: int):
        """norm: the target's final norm (the head reads normed states, like the Medusa heads); head(x [.., H])
        -> logits [.., V]: the early prediction head of this layer, on the device of the forward's inputs."""
        self.norm = norm
        self.head = head
        self.topk = int(topk)
        # Plans per batch of trees (by identity: trees repeat, static or from the proposer's own cache), with the
        # trees kept alive so an id is never reused while its plan is here.
        self.plans: dict[tuple, tuple[Sequence[Tree], PrunePlan]] = {}

    def plan(self, trees: Sequence[Tree], width: int, device: torch.device) -> PrunePlan:
        key = (*map(id, trees), width, device_key(device))
        if key not in self.plans:
            if len(self.plans) >= 256:
                self.plans.clear()
            plan = on_device(prune_plan(trees, width), device)
            self.plans[key] = (tuple(trees), plan)
        return self.plans[key][1]

    @torch.inference_mode()
    def __call__(self, hidden: torch.Tensor, input_ids: torch.Tensor, trees: Sequence[Tree]) -> torch.Tensor:
        """keep [B, T] on the inputs' device, decided there without a host read. On a target split over devices the
        final norm runs where it lives (its hook moves the states there) and the head's logits come back."""
        b, t = input_ids.shape
        device = input_ids.device
        plan = self.plan(trees, t, device)
        if plan.slots.numel() == 0:
            return plan.valid.clone()
        states = self.norm(hidden[:, plan.slots.to(hidden.device)]).to(device)
        logits = self.head(states)  # [B, P, V]
        kth = logits.topk(min(self.topk, logits.shape[-1]), dim=-1).values[..., -1]  # [B, P]
        rows = torch.arange(b, device=device)[:, None]
        score = logits[rows, plan.parent, input_ids[:, 1:]]  # each node's token under its parent's head
        ok = torch.ones(b, t, dtype=torch.bool, device=device)
        ok[:, 1:] = score >= kth.gather(1, plan.parent)
        # A node survives if it and all its ancestors pass.
        return ~(plan.ancestors & ~ok[:, None, :]).any(-1) & plan.valid
