"""DySpec (Xiong et al. 2024): a draft tree grown at run time from the draft's own probabilities, which
DySpec shows track the acceptance rate. A sampling slot's value is the estimated chance that verification
reaches it: a node's first-child slot has value v * R[y] (its own draw was accepted), its next-sibling slot
v * (1 - R[y]) (it was rejected), with R the parent's residual draft distribution (drawn tokens zeroed,
renormalized: children are drawn without replacement). Values depend only on draft probabilities, never on
which token the target will accept, so the tree stays unbiased; verification is Sequoia's rule, which is
DySpec's Algorithm 3.

- algorithm: greedy (Algorithm 1): always expand the slot of highest value (a heap) until `budget` nodes.
  A node is run through the draft only when its first child is drawn, so leaves cost no draft forward
  (Algorithm 1 as printed forwards every node; the tree is the same).
- algorithm: threshold (Algorithm 2): layer by layer, one batched draft forward per layer, expanding every
  slot whose value is at least `threshold` (default 1 / budget, "typically around 1/n"), capped at `budget`.
  The printed "while v_i < t" must mean "while v_i >= t" (otherwise the loop never expands anything).
"""

from __future__ import annotations

import heapq
import itertools

import torch

from bench.core.settings import Rule, choice, declare, integer, number
from methods.shared.draft_proposer import DraftModelProposer
from methods.shared.trees.draft import ROOT


class DySpec(DraftModelProposer):
    rule = "sequoia"
    settings = declare({"algorithm": choice("greedy", "threshold"), "budget": integer(1),
                        "threshold": number(0, 1, above=True, optional=True)})
    # Algorithm 1 has no threshold: one set with it would be ignored, and the run would not be what it says.
    requires = (Rule("threshold null unless algorithm is threshold", ("algorithm", "threshold"),
                     lambda algorithm, threshold: threshold is None or algorithm == "threshold"),)

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.algorithm = str(cfg.algorithm)
        self.budget = self.max_nodes = int(cfg.budget)
        self.threshold = float(cfg.threshold) if cfg.get("threshold") is not None else 1.0 / self.budget

    def describe(self):
        return {**super().describe(), "algorithm": self.algorithm, "budget": self.budget,
                "threshold": self.threshold if self.algorithm == "threshold" else None}

    def draw(self, residual):
        """One token y from the residual (its top token at temperature 0 with t0_children=topk), the residual's
        value at y, and the residual after drawing y (None when nothing is left): one host read for all three."""
        y = self.draws(residual, 1, replacement=False)[0]
        ry = residual[y.clamp(min=0)]
        rest = residual.clone().index_fill_(0, y.clamp(min=0)[None], 0.0)
        total = rest.sum()
        # float64 holds a token id and the float32 value exactly
        token, value, left = torch.stack([y.double(), ry.double(), (total > 0).double()]).tolist()
        return int(token), value, (rest / total if left else None)

    def propose(self, seq, length):
        q_root = self.probs(self.catch_up(seq, length))
        if self.algorithm == "greedy":
            qs = self._greedy(q_root)
        else:
            qs = self._threshold(q_root)
        return self.finish(q_root, qs)

    def _greedy(self, q_root):
        tree, qs = self.tree, {}
        residual = {ROOT: q_root}
        tie = itertools.count()  # equal values: the earlier slot first
        heap = [(-1.0, next(tie), ROOT)]
        while heap and len(tree) < self.budget:
            neg, _, parent = heapq.heappop(heap)
            if parent not in residual:  # first child of this node: run it through the draft now
                residual[parent] = qs[parent] = self.probs(self.forward([parent])[0])
            y, ry, rest = self.draw(residual[parent])
            node = tree.add(parent, y)
            if rest is not None:
                residual[parent] = rest
                heapq.heappush(heap, (neg * (1.0 - ry), next(tie), parent))  # next sibling
            heapq.heappush(heap, (neg * ry, next(tie), node))  # first child
        return qs

    def _threshold(self, q_root):
        tree, qs = self.tree, {}
        leaves = [(1.0, ROOT)]
        while leaves and len(tree) < self.budget:
            leaves = [(v, n) for v, n in sorted(leaves, key=lambda x: -x[0]) if v >= self.threshold]
            if not leaves:
                break
            inner = [n for _, n in leaves if n != ROOT]
            rows = dict(zip(inner, map(self.probs, self.forward(inner)))) if inner else {}
            new = []
            for v, node in leaves:
                d = q_root if node == ROOT else rows[node]
                if node != ROOT:
                    qs[node] = d
                while v >= self.threshold and d is not None and len(tree) < self.budget:
                    y, ry, d = self.draw(d)
                    new.append((v * ry, tree.add(node, y)))
                    v *= 1.0 - ry
            leaves = new
        return qs
