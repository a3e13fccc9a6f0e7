"""Greedy autoregressive decoding on the shared engine: an empty draft every step."""

from methods.base import Proposer, empty_draft


class Autoregressive(Proposer):
    def propose(self, seq, length):
        return empty_draft()
