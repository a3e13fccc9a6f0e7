"""The base of every method that drafts with a separate draft model (sd, specinfer, sequoia, dyspec, holistic,
ouroboros): the draft model's own KV cache kept in step with the committed sequence, a DraftTree
(methods/shared/trees/draft.py) grown in any order, batched draft forwards with tree attention, child selection,
and the conversion of the grown tree into the engine's breadth-first Draft.

Per step: `catch_up` feeds the tokens committed since the last step (the first call is the draft's prefill,
inside the timed region) and returns the draft logits at the root; the method grows nodes and asks
`forward` for the logits of the nodes whose children it wants to draw; `finish` drops the tree nodes from
the draft cache (the next `catch_up` re-feeds the accepted ones with the bonus token: a few tokens, one
forward) and returns the Draft. Draft-model forwards are lapped as `draft_forward`, the rest of the
proposer's time as `tree` (sampling draft tokens, heap and bookkeeping).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import torch
from transformers import DynamicCache

from bench.core.proposer import Draft, Proposer
from bench.core.settings import OPTIONAL_TEXT, choice, declare, number
from bench.errors import HarnessError
from methods.shared.trees.draft import ROOT, DraftTree, as_engine_tree


class DraftModelProposer(Proposer):
    """Base of the draft-model methods. Config: draft_temperature, t0_children (topk | sample)."""

    max_nodes = 64  # subclasses set their largest tree (capacity of DraftTree, context room)
    greedy_only = False  # True: temperature > 0 is refused (methods whose drafts carry no draft distribution)
    # draft_temperature > 0: its probabilities rank the tree even when the target decodes greedily.
    settings = declare({"draft_temperature": number(0, above=True), "t0_children": choice("topk", "sample"),
                                "record_trees": OPTIONAL_TEXT})

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.draft = bundle.load_draft()
        # A feature-level draft (model.draft.source=eagle: bench.models.eagle_draft.EagleDraft) reads the target's
        # features of committed positions, kept in the row's draft cache.
        self.wants_features = bool(getattr(self.draft, "wants_features", False))
        self.draft_temperature = float(cfg.draft_temperature)
        self.t0_children = str(cfg.get("t0_children", "topk"))
        self.record_trees = cfg.get("record_trees")
        self.cache = None
        self.cached = 0

    @property
    def max_draft_tokens(self) -> int:
        return self.max_nodes

    def describe(self):
        vocab = getattr(self.draft, "vocab_ids", None)  # a bench.models.vocab.TrimmedDraft scores only these
        return {"draft": getattr(self.draft, "name_or_path", None) or self.draft.config.name_or_path,
                "draft_label": self.bundle.draft_label() if self.bundle.draft_cfg is not None else None,
                "draft_layers": self.draft.config.num_hidden_layers,
                "draft_vocab": int(vocab.numel()) if vocab is not None else self.draft.config.vocab_size,
                "draft_temperature": self.draft_temperature, "t0_children": self.t0_children}

    def start(self, prompt_ids):
        if self.greedy_only and self.ctx.temperature > 0:
            raise HarnessError(f"method '{self.cfg.name}' decodes greedily only, as its paper (run.temperature=0)")
        new_cache = getattr(self.draft, "new_cache", None)  # a draft whose cache keeps more than keys and values
        self.cache = new_cache() if new_cache is not None else DynamicCache(config=self.draft.config)
        self.cached = 0
        self.step_log: dict[str, list] = defaultdict(list)  # per verification step (Proposer.step_counters)

    def step_counters(self) -> dict[str, list]:
        return dict(self.step_log)

    def observe_features(self, features: torch.Tensor) -> None:
        self.cache.observe(features)  # only with wants_features: the draft's own cache takes them

    # -- draft model -------------------------------------------------------------------------------------
    def _lap(self, phase: str) -> None:
        self.ctx.timer.lap(phase)

    def catch_up(self, seq: torch.Tensor, length: int) -> torch.Tensor:
        """Feed seq[cached:length] to the draft; returns its logits [V] at the root seq[length - 1]."""
        self._lap("tree")
        dev = self.draft.device
        new = seq[self.cached : length].to(dev)
        pos = torch.arange(self.cached, length, device=dev)[None]
        out = self.draft(input_ids=new[None], position_ids=pos, past_key_values=self.cache, use_cache=True,
                         logits_to_keep=1)
        self.cached = length
        self.calls = 1  # draft forwards of this step (the catch-up is one)
        self.tree = DraftTree(self.max_nodes)
        self.forwarded: list[int] = []  # node ids in draft-cache order after the committed tokens
        self._lap("draft_forward")
        return out.logits[0, -1]

    def forward(self, nodes: list[int]) -> torch.Tensor:
        """Draft logits [len(nodes), V] of tree nodes (their ancestors must have been forwarded)."""
        self._lap("tree")
        t, dev, dtype = self.tree, self.draft.device, self.draft.dtype
        cols = self.forwarded + nodes
        visible = t.anc[nodes][:, cols]  # [n, forwarded + n]
        mask = torch.full(visible.shape, torch.finfo(dtype).min, dtype=dtype).masked_fill_(visible, 0.0)
        prefix = torch.zeros(len(nodes), self.cached, dtype=dtype)
        mask = torch.cat([prefix, mask], dim=1).to(dev)[None, None]
        ids = torch.tensor([t.token[i] for i in nodes], device=dev)[None]
        pos = torch.tensor([self.cached - 1 + t.depth[i] for i in nodes], device=dev)[None]
        out = self.draft(input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=self.cache,
                         use_cache=True)
        self.forwarded += nodes
        self.calls += 1
        self._lap("draft_forward")
        return out.logits[0]

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits.float() / self.draft_temperature, dim=-1)

    # -- child selection -----------------------------------------------------------------------------------
    @property
    def greedy(self) -> bool:
        return self.ctx.temperature == 0 and self.t0_children == "topk"

    def choose(self, q: torch.Tensor, k: int, replacement: bool) -> list[int]:
        """k children drawn from q (in draw order), or q's top-k at temperature 0 with t0_children=topk."""
        if self.greedy:
            return q.topk(k).indices.tolist()
        if not replacement:
            k = min(k, int((q > 0).sum()))
        return torch.multinomial(q, k, replacement=replacement, generator=self.ctx.generator).tolist()

    # -- result --------------------------------------------------------------------------------------------
    def rollback(self) -> None:
        """Crop the draft cache back to the committed tokens (the tree's nodes leave it)."""
        extra = self.cache.get_seq_length() - self.cached
        if extra > 0:
            self.cache.crop(-extra)  # transformers 5: a negative crop drops that many trailing positions

    def end_drafting(self, drafted: int) -> None:
        """Crop the draft cache back to the committed tokens and count the step's draft calls and tokens. The crop
        is its own phase, `rollback` (Post-use & Pre-cut Table 9); the time before it is tree building."""
        self._lap("tree")
        self.rollback()
        self._lap("rollback")
        self.step_log["draft_calls"].append(self.calls)
        self.step_log["draft_tokens"].append(drafted)

    # -- per-step records (run.record_steps) ------------------------------------------------------------
    def record_draft(self, tokens: list[int], parents: list[int], conf: list, slots: list[int]) -> None:
        """The step's draft tokens in drafting order, their parents (-1: the root), the draft's probability of
        each under its parent's distribution, and their engine slots (for `record_accepted`)."""
        self.step_log["step_tokens"].append(tokens)
        self.step_log["step_parents"].append(parents)
        self.step_log["step_conf"].append(conf)
        self.recorded_slots = slots

    def record_accepted(self, acceptance) -> None:
        """1 for each recorded draft token on the accepted path, else 0 (one host copy, only when recording)."""
        path = set(acceptance.slots().tolist())
        self.step_log["step_accepted"].append([int(s in path) for s in self.recorded_slots])

    def update(self, inputs, logits, target, acceptance):
        if self.record_steps:
            self.record_accepted(acceptance)

    def log_acceptance(self, chain_slots: list[int], acceptance) -> tuple[set[int], int, int]:
        """For a draft chain verified with extra branches (cached phrases, n-grams): the accepted slots, how many
        chain tokens were accepted and how many branch tokens extended the output; the last two are counted."""
        path = set(acceptance.slots().tolist())
        accepted = sum(1 for s in chain_slots if s in path)
        extra = len(path) - 1 - accepted  # accepted nodes that are not draft tokens
        self.step_log["accepted_draft"].append(accepted)
        self.step_log["target_extra"].append(extra)
        return path, accepted, extra

    def finish(self, q_root: torch.Tensor, q_nodes: dict[int, torch.Tensor]) -> Draft:
        """Crop the draft cache back to the committed tokens; the breadth-first Draft with, at temperature > 0,
        each slot's draft distribution (zeros where a node has no children)."""
        t = self.tree
        self.end_drafting(len(t))
        tree, tokens, slot = as_engine_tree(t)
        if self.record_steps:
            dists = [q_root if p == ROOT else q_nodes.get(p) for p in t.parent]
            known = [i for i, d in enumerate(dists) if d is not None]
            values = torch.stack([dists[i][t.token[i]] for i in known]).tolist() if known else []
            conf = [None] * len(t)
            for i, v in zip(known, values):
                conf[i] = v
            self.record_draft(list(t.token), list(t.parent), conf, [slot[i] for i in range(len(t))])
        probs = None
        if self.ctx.temperature > 0:
            probs = torch.zeros(len(t) + 1, q_root.shape[-1], dtype=torch.float32, device=q_root.device)
            probs[0] = q_root
            for node, q in q_nodes.items():
                probs[slot[node]] = q
        if self.record_trees:  # in drafting order (node i+1 = the i-th drawn), DySpec's "original" order
            drafted = [-1] + [0 if p == ROOT else p + 1 for p in t.parent]
            with Path(self.record_trees).open("a") as f:
                f.write(json.dumps({"parents": drafted, "prefix_len": self.cached - 1}) + "\n")
        self._lap("tree")
        return Draft(tree, tokens, probs=probs)
