"""Token Recycling (Luo et al. 2024): reuse the target's top-k candidates as future drafts.

An adjacency matrix [vocab, k] maps each token to the top-k tokens the target predicted after it the
last time it was a tree input. A static tree (conf/tree/*.yaml: node paths, or built by
methods/shared/trees/static.py from acceptance statistics that methods/token_recycling/calibration.py measured
beforehand) is filled level by level from the matrix with one gather per level; after verification every tree input's row is
overwritten with the top-k of its own output logits, accepted or not. The matrix starts at zeros (token 0
everywhere) and persists across prompts and turns ("hot"); `start: cold` resets it per prompt-turn.
"""

from __future__ import annotations

import torch

from bench.core.proposer import Draft, Proposer
from bench.core.settings import SECTION, choice, declare, integer
from bench.errors import ConfigError
from methods.shared.trees.static import resolve_tree

UPDATE_STRATEGIES = ("parallel", "first", "last")


class TokenRecycling(Proposer):
    wants_logits = True
    static_step = True  # a static tree filled from the matrix, a device-only update: one graph a step in graph mode
    settings = declare({"topk": integer(1), "update_strategy": choice(*UPDATE_STRATEGIES),
                        "start": choice("hot", "cold"), "tree": SECTION})

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.k = int(cfg.topk)
        self.tree, self.tree_info = resolve_tree(cfg.tree, bundle, self.k)
        if int(self.tree.choice.max()) >= self.k:
            raise ConfigError(f"tree uses candidate rank {int(self.tree.choice.max())} but topk is {self.k}")
        self.update_strategy = cfg.update_strategy
        self.cold = cfg.start == "cold"
        device = bundle.device
        self.adj = torch.zeros(bundle.vocab_size, self.k, dtype=torch.long, device=device)
        # One (slots, parent slots, candidate ranks) triple per depth level, for the vectorized fill.
        self.levels = [
            (slice(a, b), self.tree.parents[a:b].to(device), self.tree.choice[a:b].to(device))
            for a, b in self.tree.level_slices
        ]
        self.buf = torch.empty(self.tree.size + 1, dtype=torch.long, device=device)
        self.slots = torch.arange(self.tree.size + 1, device=device)

    def describe(self):
        return {
            "tree": self.tree.name,
            "tree_size": self.tree.size,
            "tree_depth": self.tree.max_depth,
            "topk": self.k,
            "update": self.update_strategy,
            "start": "cold" if self.cold else "hot",
            **self.tree_info,
        }

    def state_dict(self):
        return {"adj": self.adj}  # the adjacency matrix persists across prompts (hot start)

    def load_state_dict(self, state):
        self.adj.copy_(state["adj"])

    def start(self, prompt_ids):
        if self.cold:
            self.adj.zero_()

    def propose(self, seq, length):
        return Draft(self.tree, self.draft_from(seq[length - 1 : length]))

    def draft_from(self, root):
        tokens = self.buf
        tokens[:1] = root
        for slots, parents, ranks in self.levels:
            tokens[slots] = self.adj[tokens[parents], ranks]
        return tokens[1:].clone()

    def update(self, inputs, logits, target, acceptance):
        top = logits.topk(self.k, dim=-1).indices  # [N+1, k]
        if self.update_strategy == "parallel":
            # The paper's "Cur": one scatter, duplicates unresolved. Which occurrence of a repeated token wins is
            # undefined on CUDA (a row may even mix two occurrences, as the paper says); a one-thread CPU loop
            # writes the last. Tokens are lossless either way; only MAT can differ between CUDA runs.
            self.adj[inputs] = top
            return
        # "first" / "last": each slot writes its token's row from the defining occurrence, so duplicate writes carry
        # the same values and any order gives one result, on every device. Found with an [N+1, N+1] comparison, not
        # torch.unique, whose data-dependent shape would make the host wait for the device every step.
        same = inputs[:, None] == inputs[None, :]
        if self.update_strategy == "first":
            pick = torch.where(same, self.slots[: len(inputs)], len(inputs)).amin(1)
        else:
            pick = torch.where(same, self.slots[: len(inputs)], -1).amax(1)
        self.adj[inputs] = top[pick]
