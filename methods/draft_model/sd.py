"""Speculative decoding with a draft model (Leviathan et al. 2023; Chen et al. 2023): a chain of
`draft_length` draft tokens per step, verified greedily at temperature 0 and by rejection sampling above
(a chain has one child per node, so SpecInfer's rule is exactly Leviathan et al.'s)."""

from __future__ import annotations

from bench.core.settings import declare, integer
from methods.shared.draft_proposer import DraftModelProposer
from methods.shared.trees.draft import ROOT


class SpeculativeDecoding(DraftModelProposer):
    rule = "specinfer"
    settings = declare({"draft_length": integer(1)})

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.length = int(cfg.draft_length)
        self.max_nodes = self.length

    def describe(self):
        return {**super().describe(), "draft_length": self.length}

    def propose(self, seq, length):
        q_root = q = self.probs(self.catch_up(seq, length))
        qs, parent = {}, ROOT
        for i in range(self.length):
            node = self.tree.add(parent, self.choose(q, 1, replacement=True)[0])
            if i + 1 < self.length:
                q = qs[node] = self.probs(self.forward([node])[0])
            parent = node
        return self.finish(q_root, qs)
