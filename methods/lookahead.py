"""Lookahead decoding (LADE, Fu et al. 2024), greedy, as a proposer on the shared engine: one target forward
carries the Jacobi window and the verification trie of the n-grams pooled under the root
(methods/shared/lookahead.py has the window's geometry and the pool).

As LADE, which builds the pool and the window inside each generate call, both are per prompt-turn here.
"""

from __future__ import annotations

from methods.shared.lookahead import LookaheadDecoding, NgramPool


class Lookahead(LookaheadDecoding):
    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.verify_device = bundle.device  # the engine verifies on the target's device

    def fork(self):
        clone = super().fork()
        clone.pool = NgramPool(self.g)  # `start` clears the pool in place: each row needs its own
        return clone

    def start(self, prompt_ids):
        self.pool.clear()
        super().start(prompt_ids)
