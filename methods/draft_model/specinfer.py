"""SpecInfer-style K x D trees (Miao et al. 2023, as Sequoia's testbed runs them): K children of the root
drawn i.i.d. *with* replacement from the draft, each extended by a chain to depth D; SpecInfer's
verification rule (q unchanged across siblings). K = 1 is plain speculative decoding."""

from __future__ import annotations

import torch

from bench.core.settings import declare, integer
from methods.shared.draft_proposer import DraftModelProposer
from methods.shared.trees.draft import ROOT


class SpecInfer(DraftModelProposer):
    rule = "specinfer"
    settings = declare({"branches": integer(1), "depth": integer(1)})

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.branches, self.depth = int(cfg.branches), int(cfg.depth)
        self.max_nodes = self.branches * self.depth

    def describe(self):
        return {**super().describe(), "branches": self.branches, "depth": self.depth}

    def propose(self, seq, length):
        """K chains of D: the shape recurs every step and draws with replacement are never dropped, so tokens stay
        on the device (placeholders in the host tree) and a step reads nothing."""
        q_root = self.probs(self.catch_up(seq, length))
        drawn = [self.draws(q_root, self.branches, replacement=True)]
        level = [self.tree.add(ROOT, 0) for _ in range(self.branches)]
        qs = {}
        for _ in range(self.depth - 1):
            rows = [self.probs(row) for row in self.forward_shaped(level, drawn[-1])]
            qs.update(zip(level, rows))
            drawn.append(torch.cat([self.draws(q, 1, replacement=True) for q in rows]))
            level = [self.tree.add(node, 0) for node in level]
        return self.finish(q_root, qs, tokens=torch.cat(drawn))  # node order = level by level
