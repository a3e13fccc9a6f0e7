"""SpecInfer-style K x D trees (Miao et al. 2023, as Sequoia's testbed runs them): K children of the root
drawn i.i.d. *with* replacement from the draft, each extended by a chain to depth D; SpecInfer's
verification rule (q unchanged across siblings). K = 1 is plain speculative decoding."""

from __future__ import annotations

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
        q_root = self.probs(self.catch_up(seq, length))
        level = [self.tree.add(ROOT, x) for x in self.choose(q_root, self.branches, replacement=True)]
        qs = {}
        for _ in range(self.depth - 1):
            logits = self.forward(level)
            nxt = []
            for node, row in zip(level, logits):
                q = qs[node] = self.probs(row)
                nxt.append(self.tree.add(node, self.choose(q, 1, replacement=True)[0]))
            level = nxt
        return self.finish(q_root, qs)
