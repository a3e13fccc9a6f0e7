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
"""

from __future__ import annotations

import torch

from bench.core.proposer import Draft, Proposer
from bench.core.settings import SECTION, choice, declare, integer
from bench.core.tree import tree_from_parents, tree_from_paths
from bench.errors import ConfigError
from bench.models.eagle import causal_mask


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
        return out[0, -1]

    def level(self, tokens: list[int], features: torch.Tensor, depth: int, parents: list[int],
              up: dict[int, int]) -> torch.Tensor:
        """One head forward over tree nodes of one depth: node j = (features[j], tokens[j]) at the position of
        depth `depth`, seeing the accepted context and its ancestors' entries (`parents[j]`: the cache column of
        its parent's entry, -1 for the root; `up`: column -> parent column). Appends their entries; returns their
        f^ [m, H]."""
        dev, dtype = features.device, features.dtype
        m, cached = len(tokens), self.cache.get_seq_length()
        mask = torch.full((m, cached + m), torch.finfo(dtype).min, dtype=dtype, device=dev)
        mask[:, : self.stable] = 0.0
        for j, p in enumerate(parents):
            while p >= 0:  # the parent's entry and its own ancestors
                mask[j, p] = 0.0
                p = up[p]
            mask[j, cached + j] = 0.0
        pos = torch.full((1, m), self.stable - 1 + depth, device=dev)
        ids = torch.tensor(tokens, device=dev)[None]
        return self.head(ids, features[None], pos, mask[None, None], self.cache)[0]

    def finish(self, parents: list[int], tokens: list[int], tree=None) -> Draft:
        """Crop the head's tree entries; the Draft of breadth-first slots (parents[i]: slot of node i+1's parent)."""
        extra = self.cache.get_seq_length() - self.stable
        if extra > 0:
            self.cache.crop(-extra)  # transformers 5: a negative crop drops that many trailing positions
        tree = tree or tree_from_parents([-1, *parents])
        return Draft(tree, torch.tensor(tokens, dtype=torch.long, device=self.bundle.device))

    def describe(self):
        return {"topk": self.k}


class Eagle(EagleProposer):
    """EAGLE-1: a static tree of rank paths; node = the rank-r token of its parent's draft distribution."""

    settings = declare({"tree": SECTION, "tree.kind": choice("template")})  # rank paths

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.tree = tree_from_paths([list(p) for p in cfg.tree.paths])
        if int(self.tree.choice.max()) >= self.k:
            raise ConfigError(f"tree uses candidate rank {int(self.tree.choice.max())} but topk is {self.k}")
        self.parents = self.tree.parents.tolist()

    def describe(self):
        return {"topk": self.k, "tree": self.tree.name, "tree_size": self.tree.size, "tree_depth": self.tree.max_depth}

    @torch.inference_mode()
    def propose(self, seq, length):
        root = self.catch_up(seq, length)
        tokens = [0] * (self.tree.size + 1)  # slot 0 is the root (the engine's)
        fhat = {0: root}  # slot -> f^ after its forward (slot 0: the catch-up's)
        col, up = {0: -1}, {}  # slot -> cache column of its entry; column -> parent's column
        levels = self.tree.level_slices
        for depth, (a, b) in enumerate(levels, start=1):
            parents = sorted({self.parents[i] for i in range(a, b)})
            ranks = torch.log_softmax(self.head.logits(torch.stack([fhat[p] for p in parents])).float(), -1)
            top = dict(zip(parents, ranks.topk(self.k).indices.tolist()))
            for i in range(a, b):
                tokens[i] = top[self.parents[i]][int(self.tree.choice[i])]
            if depth == len(levels):
                break  # the last level's children are never drafted
            with_children = [i for i in range(a, b) if i in self.parents]
            base = self.cache.get_seq_length()
            feats = torch.stack([fhat[self.parents[i]] for i in with_children])
            out = self.level([tokens[i] for i in with_children], feats, depth,
                             [col[self.parents[i]] for i in with_children], up)
            for j, i in enumerate(with_children):
                col[i], up[base + j], fhat[i] = base + j, col[self.parents[i]], out[j]
        return self.finish(self.parents[1:], tokens[1:], self.tree)


class Eagle2(EagleProposer):
    settings = declare({"total_tokens": integer(2), "depth": integer(1)})  # total_tokens counts the root

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.total = int(cfg.total_tokens)
        self.depth = int(cfg.depth)

    def describe(self):
        return {"topk": self.k, "total_tokens": self.total, "depth": self.depth}

    @torch.inference_mode()
    def propose(self, seq, length):
        root = self.catch_up(seq, length)
        # Candidates: [score, depth, token, parent candidate (-1: the root)]; forwarded ones get a cache column and
        # their f^ (the feature their children are drafted from).
        cands: list[list] = []
        col: dict[int, int] = {}  # candidate -> its entry's cache column
        up: dict[int, int] = {}  # cache column -> the parent entry's column (-1: the root)
        fhat: dict[int, torch.Tensor] = {}
        frontier = self.expand(root[None], [0.0], [-1], 1, cands)
        for depth in range(1, self.depth):
            parent_cols = [col.get(cands[c][3], -1) for c in frontier]
            feats = torch.stack([fhat[cands[c][3]] if cands[c][3] >= 0 else root for c in frontier])
            base = self.cache.get_seq_length()
            out = self.level([cands[c][2] for c in frontier], feats, depth, parent_cols, up)
            for j, c in enumerate(frontier):
                col[c], up[base + j], fhat[c] = base + j, parent_cols[j], out[j]
            children = self.expand(out, [cands[c][0] for c in frontier], frontier, depth + 1, cands)
            frontier = sorted(children, key=lambda i: -cands[i][0])[: self.k]
        keep = sorted(range(len(cands)), key=lambda i: (-cands[i][0], cands[i][1], i))[: self.total - 1]
        keep.sort(key=lambda i: (cands[i][1], i))  # breadth first: parents before children
        slot = {c: s + 1 for s, c in enumerate(keep)}
        return self.finish([slot[cands[c][3]] if cands[c][3] >= 0 else 0 for c in keep], [cands[c][2] for c in keep])

    def expand(self, features: torch.Tensor, scores: list[float], parents: list[int], depth: int,
               cands: list) -> list[int]:
        """Append the top-k children of each node j (its f^ features[j], cumulative score scores[j]) with one
        lm_head call for all of them; returns the new candidates' indices."""
        top = torch.log_softmax(self.head.logits(features).float(), -1).topk(self.k)
        first = len(cands)
        for j, (values, tokens) in enumerate(zip(top.values.tolist(), top.indices.tolist())):
            cands.extend([scores[j] + v, depth, t, parents[j]] for v, t in zip(values, tokens))
        return list(range(first, len(cands)))
