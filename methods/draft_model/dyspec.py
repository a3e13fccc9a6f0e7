"""DySpec (Xiong et al. 2024): a draft tree grown at run time from the draft's own probabilities, which
DySpec shows track the acceptance rate. A sampling slot's value is the estimated chance that verification
reaches it: a node's first-child slot has value v * R[y] (its own draw was accepted), its next-sibling slot
v * (1 - R[y]) (it was rejected), with R the parent's residual draft distribution (drawn tokens zeroed,
renormalized: children are drawn without replacement). Values depend only on draft probabilities, never on
which token the target will accept, so the tree stays unbiased; verification is Sequoia's rule, which is
DySpec's Algorithm 3.

A node's children are drawn one after another from its residual, whatever the rest of the tree does, so all
that the budget could use are drawn at once, when the node is forwarded: a draw without replacement of k tokens
(its top k at temperature 0 with t0_children=topk, the residual's top token each time), with their draft
probabilities q, read back in one host read per draft forward. The values are then host arithmetic, in the closed
form of the paper's appendix (eqs. 9-10): the i-th child's slot is worth v * (1 - q[y_1] - ... - q[y_(i-1)]) and
the child's own first-child slot v * q[y_i], the products of R[y] and 1 - R[y] above.

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

    def children(self, dists: list[torch.Tensor], k: int) -> list[list[tuple[int, float]]]:
        """Up to k children of each distribution, drawn without replacement in one call each (its top k at
        temperature 0 with t0_children=topk), with each child's draft probability: all read back in one host read.
        Per distribution, (token, probability) in draw order, ending before the first token of zero probability
        (none left to draw)."""
        k = min(k, dists[0].shape[-1])
        picks = [self.draws(q, k, replacement=False) for q in dists]
        probs = [q[p.clamp(min=0)] for q, p in zip(dists, picks)]  # -1: a dropped draw, cut below
        # float64 holds a token id and the float32 probability exactly
        flat = torch.cat([torch.stack([p.double(), r.double()], 1) for p, r in zip(picks, probs)]).tolist()
        rows = []
        for i in range(len(dists)):
            row = flat[i * k : (i + 1) * k]
            cut = next((j for j, (y, r) in enumerate(row) if y < 0 or r <= 0), k)
            rows.append([(int(y), r) for y, r in row[:cut]])
        return rows

    def propose(self, seq, length):
        q_root = self.probs(self.catch_up(seq, length))
        if self.algorithm == "greedy":
            qs = self._greedy(q_root)
        else:
            qs = self._threshold(q_root)
        return self.finish(q_root, qs)

    def _greedy(self, q_root):
        tree, qs = self.tree, {}
        kids = {ROOT: self.children([q_root], self.budget)[0]}  # a node's children, drawn when it is forwarded
        path = {ROOT: 1.0}  # a node's value: the product of the draft probabilities on its path
        tie = itertools.count()  # equal values: the earlier slot first
        # A slot: the i-th child of its parent, worth path[parent] * (1 - the probabilities of its earlier siblings)
        heap = [(-1.0, next(tie), ROOT, 0, 1.0)]
        while heap and len(tree) < self.budget:
            _, _, parent, i, left = heapq.heappop(heap)
            if parent not in kids:  # first child of this node: run it through the draft now
                qs[parent] = self.probs(self.forward([parent])[0])
                kids[parent] = self.children([qs[parent]], self.budget - len(tree))[0]
            y, q = kids[parent][i]
            node = tree.add(parent, y)
            path[node] = path[parent] * q
            if i + 1 < len(kids[parent]):  # tokens are left to draw (and the budget may use them)
                heapq.heappush(heap, (-path[parent] * (left - q), next(tie), parent, i + 1, left - q))  # next sibling
            heapq.heappush(heap, (-path[node], next(tie), node, 0, 1.0))  # first child
        return qs

    def _threshold(self, q_root):
        tree, qs = self.tree, {}
        leaves = [(1.0, ROOT)]
        while leaves and len(tree) < self.budget:
            leaves = [(v, n) for v, n in sorted(leaves, key=lambda x: -x[0]) if v >= self.threshold]
            if not leaves:
                break
            inner = [n for _, n in leaves if n != ROOT]
            qs.update(zip(inner, map(self.probs, self.forward(inner))) if inner else ())
            drawn = self.children([q_root if n == ROOT else qs[n] for _, n in leaves], self.budget - len(tree))
            new = []
            for (v, node), kids in zip(leaves, drawn):
                left = 1.0  # 1 - the probabilities of the children drawn so far: the next draw's share of v
                for y, q in kids:
                    if v * left < self.threshold or len(tree) >= self.budget:
                        break
                    new.append((v * q, tree.add(node, y)))
                    left -= q
            leaves = new
        return qs
