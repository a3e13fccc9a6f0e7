"""Drafting from extra heads on the target (Medusa-1, Cai et al. 2024), used by `medusa`, `bpd` and `propd`.

Head i (0-based; bench/models/heads.py) reads the target's final normed hidden state at position t and predicts
token t+2+i. The engine hands the proposer that hidden state (`wants_hidden`, `observe_hidden`) for the position
whose logits chose the current root: the last prompt position after the prefill, the deepest accepted slot after
each verification. So one heads forward per step drafts the tokens after the root, with no extra target forward
(Medusa keeps the heads' logits of the last accepted node the same way).

`MedusaTree` fills a static template tree (default `mc_sim_7b_63`). As in Medusa's `generate_medusa_buffers`
(`tree_indices = 1 + TOPK * (depth - 1) + rank` into `[root] + concat(topk(head_0), ..., topk(head_D-1))`), a
node's token depends only on its depth and rank, not on its parent: the Cartesian product of the per-head top-K,
K = 1 + the tree's largest rank. One gather over precomputed indices fills the tree.

Per-generation state is only the observed hidden state, rebound (never written in place) by `start` and
`observe_hidden`, so `fork()` copies (one per batch row) are independent; heads and index tensors are read-only.
"""

from __future__ import annotations

import torch

from bench.core.proposer import Draft, Proposer
from bench.core.settings import SECTION, choice, declare
from bench.errors import ConfigError
from methods.shared.trees.static import resolve_tree


class HeadsProposer(Proposer):
    """The heads, the observed hidden state, and the heads' top-k at it."""

    wants_hidden = True

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.heads = bundle.load_heads()
        self.num_heads = int(self.heads.num_heads)
        self.hidden: torch.Tensor | None = None

    def heads_info(self) -> dict:
        ident = getattr(self.heads, "name_or_path", None) or getattr(self.heads, "name", None)
        return {"num_heads": self.num_heads, "heads": ident}

    def start(self, prompt_ids):
        self.hidden = None

    def observe_hidden(self, hidden: torch.Tensor) -> None:
        """hidden [H]: the target's final normed hidden state at the position that chose the current root."""
        self.hidden = hidden  # rebound, not copied into: fork() copies stay independent

    # no_grad, not inference_mode: inside a traced whole step (graph mode's CPU check) torch 2.11's dynamo fails on an
    # inference_mode entered within the trace, and poisons the process after; the engine's own mode covers the rest
    @torch.no_grad()
    def head_topk(self, k: int, heads: int) -> torch.Tensor:
        """[heads, k] token ids: the first `heads` heads' top-k at the observed hidden state (one heads forward;
        heads the draft does not use are not computed)."""
        if self.hidden is None:
            raise RuntimeError(f"{type(self).__name__}: propose before observe_hidden (the engine must call it)")
        return self.heads(self.hidden, heads).topk(k, dim=-1).indices

    @torch.no_grad()
    def rows_topk(self, proposers: list[HeadsProposer], k: int, heads: int) -> torch.Tensor:
        """[B, heads, k]: `head_topk` of every row of a batch (`proposers`, forks of this one) in one heads forward
        over their hidden states [B, H], not one a row: the blocks and the vocabulary projection read once a step."""
        if any(p.hidden is None for p in proposers):
            raise RuntimeError(f"{type(self).__name__}: propose before observe_hidden (the engine must call it)")
        hidden = proposers[0].hidden[None] if len(proposers) == 1 else torch.stack([p.hidden for p in proposers])
        return self.heads(hidden, heads).topk(k, dim=-1).indices.transpose(0, 1)


class MedusaTree(HeadsProposer):
    """Medusa's drafting: the template tree of `method.tree`, node (depth d, rank r) = head d-1's rank-r token."""

    # Only template trees (node paths): built/auto trees are calibrated on Token Recycling's acceptance, not the
    # heads'.
    settings = declare({"tree": SECTION, "tree.kind": choice("template")})

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.tree, self.tree_info = resolve_tree(cfg.tree, bundle, 0)
        self.k = 1 + int(self.tree.choice.max())
        self.depth = self.tree.max_depth
        if self.depth > self.num_heads:
            raise ConfigError(f"tree {cfg.tree.get('name') or self.tree.name} is {self.depth} deep but the heads "
                              f"have {self.num_heads} (one head per depth)")
        # Node i's token is topk[depth_i - 1, rank_i] = flat[K * (depth_i - 1) + rank_i].
        index = (self.tree.depth[1:] - 1) * self.k + self.tree.choice[1:]
        self.index = index.to(bundle.device)

    def describe(self):
        return {
            "tree": self.tree.name,
            "tree_size": self.tree.size,
            "tree_depth": self.depth,
            "topk": self.k,
            **self.heads_info(),
            **self.tree_info,
        }

    static_step = True  # the heads' top-k at the hidden state, on the device: one graph a step in graph mode

    def propose(self, seq, length):
        return Draft(self.tree, self.draft_from(seq[length - 1 : length]))

    def draft_from(self, root):
        return self.head_topk(self.k, self.depth).flatten()[self.index]  # [D, K] -> the tree's nodes

    def propose_batch(self, proposers, seqs, lengths):
        tokens = self.rows_topk(proposers, self.k, self.depth).flatten(1)[:, self.index]  # [B, D * K] -> [B, N]
        return [Draft(self.tree, row) for row in tokens]
