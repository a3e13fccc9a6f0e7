"""EAGLE-1 and EAGLE-2 (Li et al. 2024): a feature-level draft head (bench.models.eagle) drafts a token tree.

The engine hands the proposer the target's final hidden states of the positions whose next token it just committed
(`observe_features`: the prompt after the prefill, the accepted path after each verification). `propose` first
feeds those (feature, next token) pairs to the head, whose KV cache keeps only accepted context, then drafts:

- `eagle` (EAGLE-1): a static tree of rank paths (`tree`, conf/tree/*.yaml); each level's nodes take the top-k of
  their parent's draft distribution, one head forward per level.
- `eagle2` (EAGLE-2): a dynamic tree. From the root, expand the `topk` children of every frontier node, score each
  candidate by its cumulative draft log-probability, keep the `topk` best candidates as the next frontier, `depth`
  levels in all; then keep the `total_tokens - 1` best candidates of every level (ties to the shallower node, so a
  node's parent, never scored lower, is always kept) as the tree, breadth first.

The head's tree entries are cropped after every drafting round; drafts are deterministic top-k at any temperature
(the stochastic verifier treats them as fixed candidates).

Host waits: a draft's tokens, masks and positions are made on the device (masks from ancestor rows grown per level,
`EagleProposer.seen`), so `eagle` reads and sends nothing a step and `eagle2` reads its chosen tree's parents once
(methods/eagle/device_tree.py); tests/test_host_syncs.py pins both.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from bench.core.proposer import Draft, Proposer
from bench.core.settings import SECTION, choice, declare, integer
from bench.core.tree import Tree, tree_from_paths
from bench.errors import ConfigError
from bench.models.eagle import causal_mask
from methods.eagle.device_tree import tree_on_device


class EagleProposer(Proposer):
    """The head, its accepted-context cache and the features not yet fed to it."""

    wants_features = True
    settings = declare({"topk": integer(1)})

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.head = bundle.load_eagle()
        self.k = int(cfg.topk)
        self.cache = None
        self.pending: torch.Tensor | None = None
        self.stable = 0
        self.seen: torch.Tensor | None = None  # see catch_up

    def start(self, prompt_ids):
        self.cache, self.pending, self.stable = self.head.new_cache(), None, 0

    def observe_features(self, features: torch.Tensor) -> None:
        self.pending = features  # rebound, not copied into: fork() copies stay independent

    def catch_up(self, seq: torch.Tensor, length: int) -> torch.Tensor:
        """Feed the pending (f_i, t_{i+1}) pairs; returns f^ for the root (the last committed token)."""
        n = self.pending.shape[0]
        tokens = seq[self.stable + 1 : length]
        if len(tokens) != n:
            raise RuntimeError(f"eagle: {n} features for {len(tokens)} new tokens")
        pos = torch.arange(self.stable, self.stable + n, device=seq.device)[None]
        mask = causal_mask(n, self.stable, self.pending.dtype, seq.device)
        out = self.head(tokens[None], self.pending[None], pos, mask, self.cache)
        self.stable += n
        self.pending = None
        # The tree entries' ancestor rows (row 0: the root, whose entry is the last one above; row r + 1: tree
        # entry r, over the tree's columns): grown per level on the device, so masks need no host data.
        self.seen = torch.zeros(1, 0, dtype=torch.bool, device=seq.device)
        return out[0, -1]

    def level(self, tokens: torch.Tensor, features: torch.Tensor, depth: int, parents: torch.Tensor) -> torch.Tensor:
        """One head forward over m tree nodes of one depth: node j = (features[j], tokens[j]) at the position of
        depth `depth`, seeing the accepted context, its ancestors' entries and its own. parents [m]: the row of
        `self.seen` of each node's parent (0: the root). Appends their entries and rows; returns their f^ [m, H]."""
        dev, dtype, m = features.device, features.dtype, tokens.shape[0]
        rows = torch.cat([self.seen[parents], torch.eye(m, dtype=torch.bool, device=dev)], 1)  # [m, entries + m]
        self.seen = torch.cat([torch.nn.functional.pad(self.seen, (0, m)), rows])
        mask = torch.full((m, self.stable + rows.shape[1]), torch.finfo(dtype).min, dtype=dtype, device=dev)
        mask[:, : self.stable] = 0.0
        mask[:, self.stable :].masked_fill_(rows, 0.0)
        pos = torch.full((1, m), self.stable - 1 + depth, device=dev)
        return self.head(tokens[None], features[None], pos, mask[None, None], self.cache)[0]

    def top(self, features: torch.Tensor) -> torch.return_types.topk:
        """The top-k draft log-probabilities and tokens [m, k] after each f^ in features [m, H]."""
        return torch.log_softmax(self.head.logits(features).float(), -1).topk(self.k)

    def finish(self, tree: Tree, tokens: torch.Tensor) -> Draft:
        """Crop the head's tree entries; the Draft of the tree's breadth-first slots 1..N and their tokens."""
        extra = self.cache.get_seq_length() - self.stable
        if extra > 0:
            self.cache.crop(-extra)  # transformers 5: a negative crop drops that many trailing positions
        return Draft(tree, tokens)

    def describe(self):
        return {"topk": self.k}


class Level(NamedTuple):
    """EAGLE-1's indices for one depth of its static tree (lists on the host, tensors on a device)."""

    pick: list[int]  # per node: its entry of the flattened top-k [parents forwarded a level above, k]
    forward: list[int]  # the level's nodes with children (their entries feed the next level), in slot order
    feature: list[int]  # per forwarded node: its parent's row of the f^ a level above
    seen: list[int]  # per forwarded node: its parent's row of EagleProposer.seen


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


class Eagle(EagleProposer):
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
        if str(device) not in self.plans:
            self.plans[str(device)] = [Level(*(torch.tensor(ix, dtype=torch.long, device=device) for ix in lv))
                                    for lv in self.levels]
        return self.plans[str(device)]

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


class Eagle2(EagleProposer):
    """EAGLE-2's candidates are tensors on the device: scores (float64, summed as Python floats would be), tokens
    and parent candidates, in expansion order (depth 1's k, then k * k per depth); the frontier and the kept set
    are chosen by stable sorts, so ties go to the earlier candidate. The tree's parents are read once."""

    settings = declare({"total_tokens": integer(2), "depth": integer(1)})  # total_tokens counts the root

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.total = int(cfg.total_tokens)
        self.depth = int(cfg.depth)

    @property
    def max_draft_tokens(self) -> int:
        return self.total - 1  # total_tokens counts the root

    def describe(self):
        return {"topk": self.k, "total_tokens": self.total, "depth": self.depth}

    @torch.inference_mode()
    def propose(self, seq, length):
        root = self.catch_up(seq, length)
        top = self.top(root[None])
        scores, tokens = [top.values.double().flatten()], [top.indices.flatten()]
        parents = [torch.full((self.k,), -1, device=root.device)]  # -1: the root
        frontier = torch.arange(self.k, device=root.device)  # depth 1's candidates, in order
        feats, rows = root.expand(self.k, -1), torch.zeros(self.k, dtype=torch.long, device=root.device)
        for depth in range(1, self.depth):
            first, entries = sum(len(s) for s in scores), self.seen.shape[1]
            out = self.level(torch.cat(tokens)[frontier], feats, depth, rows)
            top = self.top(out)
            children = (torch.cat(scores)[frontier, None] + top.values.double()).flatten()
            scores.append(children)
            tokens.append(top.indices.flatten())
            parents.append(frontier[:, None].expand(-1, self.k).flatten())
            best = children.sort(descending=True, stable=True).indices[: self.k]  # child best[j] of node best[j] // k
            frontier, feats, rows = first + best, out[best // self.k], 1 + entries + best // self.k
        scores, tokens, parents = torch.cat(scores), torch.cat(tokens), torch.cat(parents)
        # the best total_tokens - 1 (ties to the shallower, earlier one: a node's parent, never scored lower, is
        # kept), breadth first: in candidate order
        keep = scores.sort(descending=True, stable=True).indices[: self.total - 1].sort().values
        slot = torch.zeros(len(scores) + 1, dtype=torch.long, device=root.device)  # candidate + 1 -> slot (0: root)
        slot[keep + 1] = torch.arange(1, len(keep) + 1, device=root.device)
        return self.finish(tree_on_device(slot[parents[keep] + 1]), tokens[keep])
