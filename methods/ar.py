"""Greedy autoregressive decoding on the shared engine: an empty draft every step."""

from bench.core.proposer import Proposer, empty_draft


class Autoregressive(Proposer):
    def propose(self, seq, length):
        return empty_draft()
