"""Medusa-1 (Cai et al. 2024) and blockwise parallel decoding (Stern et al. 2018): drafts from extra heads on
the target (methods/shared/heads.py: the heads, the hidden state the engine hands them, Medusa's tree fill).

- `Medusa`: a static template tree (default `mc_sim_7b_63`); the node at depth d and rank r gets head d-1's
  rank-r token.
- `BPD`: the chain of heads 0..L-1's top-1 (L = `draft_length`, default all heads).

At temperature > 0 the drafts are deterministic candidates: the shared stochastic verifier treats them as point
masses (bench/core/sampling.py), which keeps the target distribution. Medusa's own typical acceptance
does not, and is not used.
"""

from __future__ import annotations

from bench.core.proposer import Draft
from bench.core.settings import declare, integer
from bench.core.tree import chain
from bench.errors import ConfigError
from methods.shared.heads import HeadsProposer, MedusaTree


class Medusa(MedusaTree):
    """Medusa's drafting as it is: the method adds nothing to the shared tree fill (ProPD builds on it too)."""


class BPD(HeadsProposer):
    settings = declare({"draft_length": integer(1, optional=True)})  # at most the heads' number: checked below

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        n = cfg.get("draft_length")
        self.length = self.num_heads if n is None else int(n)
        if not 1 <= self.length <= self.num_heads:
            raise ConfigError(f"bpd draft_length {self.length} must be between 1 and the heads' {self.num_heads}")
        self.tree = chain(self.length)

    def describe(self):
        return {"draft_length": self.length, **self.heads_info()}

    static_step = True  # the heads' top-1 chain at the hidden state, on the device: one graph a step in graph mode

    def propose(self, seq, length):
        return Draft(self.tree, self.draft_from(seq[length - 1 : length]))

    def draft_from(self, root):
        return self.head_topk(1, self.length)[:, 0]

    def propose_batch(self, proposers, seqs, lengths):
        return [Draft(self.tree, row) for row in self.rows_topk(proposers, 1, self.length)[..., 0]]
