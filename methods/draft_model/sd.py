"""Speculative decoding with a draft model (Leviathan et al. 2023; Chen et al. 2023): a chain of
`draft_length` draft tokens per step, verified greedily at temperature 0 and by rejection sampling above
(a chain has one child per node, so SpecInfer's rule is exactly Leviathan et al.'s)."""

from __future__ import annotations

import torch

from bench.core.settings import declare, integer
from methods.shared.draft_proposer import DraftModelProposer


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
        """Each token is drawn on the device and fed to the next draft forward from there: a step reads nothing."""
        q_root = q = self.probs(self.catch_up(seq, length))
        qs, drawn = [], []
        for i in range(self.length):
            drawn.append(self.draws(q, 1, replacement=True))
            if i + 1 < self.length:
                q = self.probs(self.forward_chain(drawn[-1], i + 1))
                qs.append(q)
        return self.finish_chain(q_root, qs, torch.cat(drawn))
