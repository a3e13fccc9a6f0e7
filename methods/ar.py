"""Greedy autoregressive decoding on the shared engine: an empty draft every step.

Its "tree" is the root alone, drafted on the device from nothing: graph mode (bench.core.graph_engine) runs AR's
whole step (forward, argmax, commit) as one graph with one read, as it does Token Recycling's, so a graph-mode
speedup compares two steps the host drives alike.
"""

from bench.core.proposer import Proposer, empty_draft
from bench.core.tree import chain


class Autoregressive(Proposer):
    static_step = True
    tree = chain(0)

    def propose(self, seq, length):
        return empty_draft()

    def draft_from(self, root):
        return root.new_empty(0)
