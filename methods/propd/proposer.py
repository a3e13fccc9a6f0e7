"""ProPD (Zhong et al., ICCAD 2024): Medusa with early pruning of the draft tree inside the target forward and a
tree size chosen online from measured verification times and the heads' hit rates.

- `prune` (paper §4.1, methods/propd/prune.py): the target runs through the core's `LayerwiseForward`; after
  `prune_layer` layers the early head of that layer (`make heads` trains them, bench/train/early_heads.py) drops
  every node outside its parent's top-`prune_topk` with its subtree, and the remaining layers run on the rest.
  Dropped nodes are never accepted, so the output stays the target's greedy output.
- `dynamic` (paper §4.2, methods/propd/dynamic.py): the tree is the best `size` nodes by expected acceptance
  (p products over the heads' top-`max_topk` ranks) for the size maximising expected tokens per estimated second;
  otherwise the static template tree of `method.tree` (Medusa's mc_sim_7b_63), as Medusa drafts it.
- With both off, ProPD is Medusa (the ablation's baseline row): both draft through MedusaTree
  (methods/shared/heads.py).

As in Medusa, a node's token is the rank-r candidate of head depth-1 (one gather). The controller and the early
head are shared by every row of a batch (`fork` is a shallow copy); the pending predictions are per row. A batch
step drafts every row at once (`propose_batch`): one tree for the step, one heads forward over the rows, and one
hit-rate update for the predictions that every row's committed tokens now decide. A prediction is scored once all
its heads' targets are committed (the paper updates head i once x_{t+i} is: up to heads - 1 tokens sooner), so that
update is one fixed set of ops whatever the rows, not a few ops a row and a head.
The forward is timed (device-synced) for the controller only when `dynamic` is on.
"""

from __future__ import annotations

import time

import torch

from bench.core.forward import LayerwiseForward, full_forward
from bench.core.proposer import Draft
from bench.core.settings import FLAG, declare, integer, integers, number
from bench.core.timing import device_sync
from bench.core.tree import tree_from_paths
from bench.errors import ConfigError
from methods.propd.dynamic import DynamicTrees
from methods.propd.prune import TopKPrune
from methods.shared.heads import MedusaTree


class TimedForward:
    """Wraps a TargetForward: each verification's seconds go to the controller with its batch size, sequence length
    and tree width (the iteration time of paper §4.2.1)."""

    def __init__(self, inner, controller: DynamicTrees):
        self.inner = inner
        self.controller = controller

    def __call__(self, model, input_ids, *, cache, trees=None, **kwargs):
        if trees is None:
            return self.inner(model, input_ids, cache=cache, trees=trees, **kwargs)
        seq_len = cache.get_seq_length()
        device_sync(input_ids.device)
        t0 = time.perf_counter()
        out = self.inner(model, input_ids, cache=cache, trees=trees, **kwargs)
        device_sync(input_ids.device)
        self.controller.observe_forward(input_ids.shape[0], seq_len, input_ids.shape[1] - 1, time.perf_counter() - t0)
        return out


MAX_TREES = 1024  # distinct dynamic trees kept built (oldest dropped first)


class ProPD(MedusaTree):
    static_step = False  # its tree is chosen step by step on the host (and pruning changes the forward's width)
    settings = declare({"prune": FLAG, "dynamic": FLAG, "prune_layer": integer(1), "prune_topk": integer(1),
                        "max_topk": integer(1), "tree_size_choices": integers(1), "warmup_sizes": integers(1),
                        "time_alpha": number(0, 1, above=True), "time_decay": number(0),
                        "hit_alpha": number(0, 1, above=True), "reselect_batch_margin": integer(0),
                        "reselect_seq_margin": integer(0)})

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.prune, self.dynamic = bool(cfg.prune), bool(cfg.dynamic)
        self.prune_layer, self.prune_topk = int(cfg.prune_layer), int(cfg.prune_topk)
        self.max_topk = int(cfg.max_topk)
        self.controller = None
        self.early = None
        forward = full_forward
        if self.prune:
            self.early = bundle.load_early_heads()
            layers = [int(n) for n in self.early.layers]
            if self.prune_layer not in layers:
                raise ConfigError(f"propd prune_layer {self.prune_layer}: the early heads cover layers {layers}")
            n_layers = bundle.model.config.num_hidden_layers
            if not 1 <= self.prune_layer < n_layers:
                raise ConfigError(f"propd prune_layer {self.prune_layer} must be between 1 and {n_layers - 1}")
            i = layers.index(self.prune_layer)
            norm = bundle.model.get_decoder().norm
            forward = LayerwiseForward(self.prune_layer, TopKPrune(norm, lambda x: self.early.head(i, x),
                                                                   self.prune_topk))
        if self.dynamic:
            self.controller = DynamicTrees(cfg, self.num_heads, self.max_topk)
            forward = TimedForward(forward, self.controller)
        self.target_forward = None if forward is full_forward else forward
        self.trees: dict[tuple, tuple] = {}  # rank paths -> (tree, gather index): trees repeat, build them once
        self.pending: list[tuple[int, torch.Tensor]] = []

    @classmethod
    def graphs_refusal(cls, cfg) -> str | None:
        if cfg.prune or cfg.dynamic:
            return ("its early pruning and its timed tree choice wrap the target forward (pruning changes the width "
                    "inside it); set method.prune=false method.dynamic=false")
        return None

    def describe(self):
        info = {**super().describe(), "prune": self.prune, "dynamic": self.dynamic, "prune_layer": self.prune_layer,
                "prune_topk": self.prune_topk}
        if self.early is not None:
            info["early_heads"] = getattr(self.early, "name_or_path", None) or getattr(self.early, "name", None)
        if self.controller is not None:
            c = self.controller
            # hit_rates: P[i][k-1], head i's running chance that the committed token is in its top k (paper §4.2.2,
            # the end of the run's): Figure 6 (a), and with last_choice's size the tree of Figure 6 (b)
            info.update({"tree_size_choices": c.sizes, "max_topk": self.max_topk, "selections": c.selections,
                         "last_choice": c.last_choice,
                         "hit_rates": [[round(v, 6) for v in row] for row in c.hits.P[:, 1:].tolist()]})
        return info

    def state_dict(self) -> dict:
        return {} if self.controller is None else {"controller": self.controller.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if self.controller is not None and state:
            self.controller.load_state_dict(state["controller"])

    @property
    def max_draft_tokens(self) -> int:
        return max(self.controller.sizes) if self.dynamic else super().max_draft_tokens

    def start(self, prompt_ids):
        super().start(prompt_ids)
        self.pending = []  # rebound: each row's fork has its own

    def tree_for(self, paths: list[tuple[int, ...]]):
        key = tuple(paths)
        if key not in self.trees:
            if len(self.trees) >= MAX_TREES:  # bounded: a long run can meet ever new trees (device tensors each)
                self.trees.pop(next(iter(self.trees)))
            tree = tree_from_paths([list(p) for p in paths])
            index = (tree.depth[1:] - 1) * self.max_topk + tree.choice[1:]
            self.trees[key] = (tree, index.to(self.bundle.device))
        return self.trees[key]

    def retired(self, seq: torch.Tensor, length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The row's predictions whose every head's target is now committed, oldest first, as (top [heads, K] on the
        device, the committed tokens [heads] they predicted), taken off `pending`. pending: (position of head 0's
        target, top); head i's target is seq[first + i] (host ints: no read)."""
        heads = self.num_heads
        done = [(top, seq[first : first + heads]) for first, top in self.pending if first + heads <= length]
        self.pending = self.pending[len(done) :]  # in order of `first`: the done ones lead
        return done

    def propose(self, seq, length):
        if not self.dynamic:
            return super().propose(seq, length)
        return ProPD.propose_batch(self, [self], [seq], [length])[0]  # the class's: a row alone, whatever drafts a batch

    def propose_batch(self, proposers, seqs, lengths):
        """One tree for the step, chosen once for the whole batch (the size fitted to its batch size, paper
        §4.2.1), every row's hit rates scored first; the heads run once over every row's hidden state."""
        if not self.dynamic:
            return super().propose_batch(proposers, seqs, lengths)
        timer = self.ctx.timer if self.ctx is not None else None
        retired = [done for p, seq, n in zip(proposers, seqs, lengths, strict=True) for done in p.retired(seq, n)]
        if retired:  # scored once every head's target is committed: one update for the batch's rows (paper §4.2.2)
            self.controller.hits.observe_rounds(torch.stack([top for top, _ in retired]),
                                                torch.stack([tokens for _, tokens in retired]))
        if timer is not None:
            timer.lap("draft")
        tree, index = self.tree_for(self.controller.current())
        if timer is not None:
            timer.lap("controller")
        top = self.rows_topk(proposers, self.max_topk, self.num_heads)  # [B, heads, K]: every head, for the hit rates
        for p, length, row in zip(proposers, lengths, top):
            p.pending.append((length, row))
        return [Draft(tree, row) for row in top.flatten(1)[:, index]]
