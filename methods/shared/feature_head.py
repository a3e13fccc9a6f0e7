"""Drafting from a feature-level head (EAGLE-1/2's and EAGLE-3's), shared by `eagle`, `eagle2` and `eagle3`.

The engine hands the proposer the target's states at the positions whose next token it just committed
(`observe_features`: the prompt after the prefill, the accepted path after each verification): EAGLE-1's final
hidden state, or EAGLE-3's three layers' input states (`Proposer.feature_layers`). `propose` first feeds those
(state, next token) pairs to the head, whose KV cache keeps only accepted context, then drafts, feeding each
node's head output back as its children's state. The head's tree entries are cropped after every drafting round;
drafts are deterministic top-k at any temperature (the stochastic verifier treats them as fixed candidates).

`DynamicTreeProposer` is EAGLE-2's dynamic tree: from the root, expand the `topk` children of every frontier node,
score each candidate by its cumulative draft log-probability, keep the `topk` best candidates as the next frontier,
`depth` levels in all; then keep the `total_tokens - 1` best candidates of every level (ties to the shallower node,
so a node's parent, never scored lower, is always kept) as the tree, breadth first.

Host waits: a draft's tokens, masks and positions are made on the device (masks from ancestor rows grown per level,
`FeatureHeadProposer.seen`); the dynamic tree reads its chosen tree's parents once (methods/shared/device_tree.py).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from bench.core.forward import aligned_mask
from bench.core.kv import cut
from bench.core.proposer import Draft, Proposer
from bench.core.settings import declare, integer
from bench.core.tree import Tree
from bench.models.eagle import causal_mask
from methods.shared.device_tree import tree_on_device


class Top(NamedTuple):
    """The top-k draft log-probabilities and their target token ids [m, k]."""

    values: torch.Tensor
    indices: torch.Tensor


class FeatureHeadProposer(Proposer):
    """The head, its accepted-context cache and the states not yet fed to it. The head is called as
    head(tokens [1, m], states [1, m, *], position_ids [1, m], mask [1, 1, m, cached + m], cache) -> [1, m, H], and
    head.logits(outputs) gives the draft logits; `draft_tokens` turns the logits' indices into target ids."""

    wants_features = True
    settings = declare({"topk": integer(1)})

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.head = self.load_head(bundle)
        self.k = int(cfg.topk)
        self.cache = None
        self.pending: torch.Tensor | None = None
        self.stable = 0
        self.seen: torch.Tensor | None = None  # see catch_up

    def load_head(self, bundle):
        """The model's EAGLE-1 head (EAGLE-3 loads its own)."""
        return bundle.load_eagle()

    def draft_tokens(self, indices: torch.Tensor) -> torch.Tensor:
        """Target token ids of the head's logit indices: the same for a head over the target's vocabulary."""
        return indices

    def start(self, prompt_ids):
        self.cache, self.pending, self.stable = self.head.new_cache(), None, 0

    def observe_features(self, features: torch.Tensor) -> None:
        self.pending = features  # rebound, not copied into: fork() copies stay independent

    def catch_up(self, seq: torch.Tensor, length: int) -> torch.Tensor:
        """Feed the pending (f_i, t_{i+1}) pairs; returns f^ for the root (the last committed token)."""
        n = self.pending.shape[0]
        tokens = seq[self.stable + 1 : length]
        if len(tokens) != n:
            raise RuntimeError(f"eagle: {n} features for {len(tokens)} new tokens")
        pos = torch.arange(self.stable, self.stable + n, device=seq.device)[None]
        mask = causal_mask(n, self.stable, self.pending.dtype, seq.device)
        out = self.head(tokens[None], self.pending[None], pos, mask, self.cache)
        self.stable += n
        self.pending = None
        # The tree entries' ancestor rows (row 0: the root, whose entry is the last one above; row r + 1: tree
        # entry r, over the tree's columns): grown per level on the device, so masks need no host data.
        self.seen = torch.zeros(1, 0, dtype=torch.bool, device=seq.device)
        return out[0, -1]

    def level(self, tokens: torch.Tensor, features: torch.Tensor, depth: int, parents: torch.Tensor) -> torch.Tensor:
        """One head forward over m tree nodes of one depth: node j = (features[j], tokens[j]) at the position of
        depth `depth`, seeing the accepted context, its ancestors' entries and its own. parents [m]: the row of
        `self.seen` of each node's parent (0: the root). Appends their entries and rows; returns their f^ [m, H]."""
        dev, dtype, m = features.device, features.dtype, tokens.shape[0]
        rows = torch.cat([self.seen[parents], torch.eye(m, dtype=torch.bool, device=dev)], 1)  # [m, entries + m]
        self.seen = torch.cat([torch.nn.functional.pad(self.seen, (0, m)), rows])
        mask = aligned_mask((m, self.stable + rows.shape[1]), torch.finfo(dtype).min, dtype, dev)
        mask[:, : self.stable] = 0.0
        mask[:, self.stable :].masked_fill_(rows, 0.0)
        pos = torch.full((1, m), self.stable - 1 + depth, device=dev)
        return self.head(tokens[None], features[None], pos, mask[None, None], self.cache)[0]

    def top(self, features: torch.Tensor) -> Top:
        """The top-k draft log-probabilities and target tokens [m, k] after each f^ in features [m, H]."""
        top = torch.log_softmax(self.head.logits(features).float(), -1).topk(self.k)
        return Top(top.values, self.draft_tokens(top.indices))

    def finish(self, tree: Tree, tokens: torch.Tensor) -> Draft:
        """Crop the head's tree entries; the Draft of the tree's breadth-first slots 1..N and their tokens."""
        cut(self.cache, self.stable)
        return Draft(tree, tokens)

    def describe(self):
        return {"topk": self.k}


class DynamicTreeProposer(FeatureHeadProposer):
    """EAGLE-2's candidates are tensors on the device: scores (float64, summed as Python floats would be), tokens
    and parent candidates, in expansion order (depth 1's k, then k * k per depth); the frontier and the kept set
    are chosen by stable sorts, so ties go to the earlier candidate. The tree's parents are read once."""

    settings = declare({"total_tokens": integer(2), "depth": integer(1)})  # total_tokens counts the root

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.total = int(cfg.total_tokens)
        self.depth = int(cfg.depth)

    @property
    def max_draft_tokens(self) -> int:
        return self.total - 1  # total_tokens counts the root

    def describe(self):
        return {"topk": self.k, "total_tokens": self.total, "depth": self.depth}

    @torch.inference_mode()
    def propose(self, seq, length):
        root = self.catch_up(seq, length)
        top = self.top(root[None])
        scores, tokens = [top.values.double().flatten()], [top.indices.flatten()]
        parents = [torch.full((self.k,), -1, device=root.device)]  # -1: the root
        frontier = torch.arange(self.k, device=root.device)  # depth 1's candidates, in order
        feats, rows = root.expand(self.k, -1), torch.zeros(self.k, dtype=torch.long, device=root.device)
        for depth in range(1, self.depth):
            first, entries = sum(len(s) for s in scores), self.seen.shape[1]
            out = self.level(torch.cat(tokens)[frontier], feats, depth, rows)
            top = self.top(out)
            children = (torch.cat(scores)[frontier, None] + top.values.double()).flatten()
            scores.append(children)
            tokens.append(top.indices.flatten())
            parents.append(frontier[:, None].expand(-1, self.k).flatten())
            best = children.sort(descending=True, stable=True).indices[: self.k]  # child best[j] of node best[j] // k
            frontier, feats, rows = first + best, out[best // self.k], 1 + entries + best // self.k
        scores, tokens, parents = torch.cat(scores), torch.cat(tokens), torch.cat(parents)
        # the best total_tokens - 1 (ties to the shallower, earlier one: a node's parent, never scored lower, is
        # kept), breadth first: in candidate order
        keep = scores.sort(descending=True, stable=True).indices[: self.total - 1].sort().values
        slot = torch.zeros(len(scores) + 1, dtype=torch.long, device=root.device)  # candidate + 1 -> slot (0: root)
        slot[keep + 1] = torch.arange(1, len(keep) + 1, device=root.device)
        return self.finish(tree_on_device(slot[parents[keep] + 1]), tokens[keep])
