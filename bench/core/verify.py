"""The one greedy verifier: longest draft path that matches the target's own argmax choices.

Shapes carry a batch dimension B: rows that share one tree are verified together (the engine's batch where every
row drafts the same tree: AR, a static tree); rows with trees of different shapes, one at a time. The result type,
Acceptance, is part of the proposer contract.
"""

from __future__ import annotations

import torch

from bench.core.proposer import Acceptance
from bench.core.tree import Tree


def greedy_accept(
    tree: Tree, tokens: torch.Tensor, target: torch.Tensor, candidates: torch.Tensor | None = None
) -> Acceptance:
    """tokens: [B, N+1] tree inputs (slot 0 = root); target: [B, N+1] target argmax at each slot.
    candidates: optional [N+1] or [B, N+1] bool; slots marked False are never accepted (input-only).

    A node is accepted when every node on its path (root excluded) equals the target's argmax at its
    parent. Among accepted nodes the deepest wins; ties go to the lowest slot, which for greedy decoding
    are the same tokens anyway (two accepted paths of equal depth spell the same greedy continuation).
    """
    on = tree.on(tokens.device)  # built once per tree and device: no host-to-device copy per step
    anc = on.ancestors
    wrong = tokens != target[:, on.parents]  # [B, N+1]
    wrong[:, 0] = False  # the root is already committed
    accepted = ~(anc.unsqueeze(0) & wrong.unsqueeze(1)).any(-1)  # [B, N+1]
    if candidates is not None:  # a node is acceptable only if its whole path is made of candidates
        side = ~candidates.to(tokens.device).view(-1, anc.shape[0])
        side[:, 0] = False
        accepted &= ~(anc.unsqueeze(0) & side.unsqueeze(1)).any(-1)
    score = torch.where(accepted, on.depth, -1)
    best = score.argmax(-1)  # first maximum: lowest slot on ties
    path = anc[best]
    accept_len = on.depth[best] + 1
    bonus = target.gather(1, best.unsqueeze(1)).squeeze(1)
    return Acceptance(best, path, accept_len, bonus)


def greedy_path(parents: list[int], tokens: list[int], target: list[int],
                candidates: list[bool] | None = None) -> tuple[list[int], int]:
    """`greedy_accept` on host lists, for a proposer that has the tree and the target's choices on the host already
    (a draft model verifying its own guesses, or the engine's acceptance replayed from its one read): parents,
    inputs and the argmax at each slot (the root's token unused) -> the accepted slots, root first, and the bonus
    token. The same rule: a node is accepted when every node on its path is a candidate and equals the argmax at
    its parent; the deepest wins, ties to the lowest slot."""
    depth, ok, best = [0] * len(parents), [True] * len(parents), 0
    for i in range(1, len(parents)):
        p = parents[i]
        depth[i] = depth[p] + 1
        ok[i] = ok[p] and tokens[i] == target[p] and (candidates is None or candidates[i])
        if ok[i] and depth[i] > depth[best]:
            best = i
    path = [best]
    while path[-1] > 0:
        path.append(parents[path[-1]])
    return path[::-1], target[best]
