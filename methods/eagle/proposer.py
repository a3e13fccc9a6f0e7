"""EAGLE-1 and EAGLE-2 (Li et al. 2024): a feature-level draft head (bench.models.eagle) drafts a token tree.

The engine hands the proposer the target's final hidden states of the positions whose next token it just committed;
the shared base (methods/shared/feature_head.py) feeds those (feature, next token) pairs to the head and drafts:

- `eagle` (EAGLE-1): a static tree of rank paths (`tree`, conf/tree/*.yaml); each level's nodes take the top-k of
  their parent's draft distribution, one head forward per level.
- `eagle2` (EAGLE-2): the dynamic tree of methods/shared/feature_head.py (`DynamicTreeProposer`), shared with
  `eagle3`.

Host waits: `eagle` reads and sends nothing a step and `eagle2` reads its chosen tree's parents once
(methods/shared/device_tree.py); tests/test_host_syncs.py pins both.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from bench.core.settings import SECTION, choice, declare
from bench.core.tree import Tree, device_key, tree_from_paths
from bench.errors import ConfigError
from methods.shared.feature_head import DynamicTreeProposer, FeatureHeadProposer


class Level(NamedTuple):
    """EAGLE-1's indices for one depth of its static tree (lists on the host, tensors on a device)."""

    pick: list[int]  # per node: its entry of the flattened top-k [parents forwarded a level above, k]
    forward: list[int]  # the level's nodes with children (their entries feed the next level), in slot order
    feature: list[int]  # per forwarded node: its parent's row of the f^ a level above
    seen: list[int]  # per forwarded node: its parent's row of FeatureHeadProposer.seen


def level_plan(tree: Tree, k: int) -> list[Level]:
    parents, choice = tree.parents.tolist(), tree.choice.tolist()
    has_children = set(parents[1:])
    above, above_seen, entries = [0], [0], 0  # the slots forwarded a level above (the root), their seen rows
    plan = []
    for a, b in tree.level_slices:
        row = {slot: j for j, slot in enumerate(above)}  # slot -> its row of the f^ a level above
        forward = [i - a for i in range(a, b) if i in has_children]
        feature = [row[parents[a + i]] for i in forward]
        plan.append(Level([row[parents[i]] * k + choice[i] for i in range(a, b)], forward, feature,
                          [above_seen[j] for j in feature]))
        above, above_seen = [a + i for i in forward], [1 + entries + j for j in range(len(forward))]
        entries += len(forward)
    return plan


class Eagle(FeatureHeadProposer):
    """EAGLE-1: a static tree of rank paths; node = the rank-r token of its parent's draft distribution.

    The tree is static, so is every index of a draft (which top-k entry a node takes, which nodes are forwarded, the
    rows of their parents' features and ancestors): `Level`s built on the host once, sent once per device. A draft
    then reads nothing back: its tokens stay on the device."""

    settings = declare({"tree": SECTION, "tree.kind": choice("template")})  # rank paths

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.tree = tree_from_paths([list(p) for p in cfg.tree.paths])
        if int(self.tree.choice.max()) >= self.k:
            raise ConfigError(f"tree uses candidate rank {int(self.tree.choice.max())} but topk is {self.k}")
        self.levels = level_plan(self.tree, self.k)
        self.plans: dict[str, list[Level]] = {}  # device -> the plan's index tensors there (shared by forks)

    def describe(self):
        return {"topk": self.k, "tree": self.tree.name, "tree_size": self.tree.size, "tree_depth": self.tree.max_depth}

    def plan_on(self, device: torch.device) -> list[Level]:
        key = device_key(device)
        if key not in self.plans:
            self.plans[key] = [Level(*(torch.tensor(ix, dtype=torch.long, device=device) for ix in lv))
                               for lv in self.levels]
        return self.plans[key]

    @torch.inference_mode()
    def propose(self, seq, length):
        fhat = self.catch_up(seq, length)[None]  # f^ of the nodes whose children this level drafts: the root's
        tokens = []
        for depth, lv in enumerate(self.plan_on(seq.device), start=1):
            level_tokens = self.top(fhat).indices.flatten()[lv.pick]
            tokens.append(level_tokens)
            if depth < len(self.levels):  # the last level's children are never drafted
                fhat = self.level(level_tokens[lv.forward], fhat[lv.feature], depth, lv.seen)
        return self.finish(self.tree, torch.cat(tokens))


class Eagle2(DynamicTreeProposer):
    """EAGLE-2: the dynamic tree over the model's EAGLE-1 head."""
