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

Host waits (docs/engine.md, "Host syncs"): a draft forward sends its tokens, positions and tree mask in one
host-to-device copy (the committed prefix's part of the mask is made on the device); children are drawn on the
device (`draws`) and a level's draws come back in one read (`read`); the step's tree and tokens go to the device
in one copy (`finish`). The draft's KV cache is preallocated (bench.core.kv.new_cache): an append writes only
the new positions, where a DynamicCache would copy its whole KV every forward.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import torch

from bench.core.forward import aligned_mask, cache_kw
from bench.core.kv import cut
from bench.core.kv import new_cache as preallocated_cache
from bench.core.proposer import Draft, Proposer
from bench.core.settings import OPTIONAL_TEXT, choice, declare, number
from bench.core.tree import chain
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
        self.feature_layers = getattr(self.draft, "feature_layers", None)  # EAGLE-3's three layers' input states
        self.draft_temperature = float(cfg.draft_temperature)
        self.t0_children = str(cfg.get("t0_children", "topk"))
        self.record_trees = cfg.get("record_trees")
        self.cache = None
        self.cached = 0
        self.shapes: dict[tuple, object] = {}  # recurring tree shapes' device tensors (forward_shaped, on_device)

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
        # Room for the prompt, a tree and the first tokens; the cache doubles its buffer if a run outgrows it.
        room = len(prompt_ids) + 2 * self.max_nodes + 256
        self.cache = new_cache() if new_cache is not None else preallocated_cache(self.draft.config, room)
        self.cached = 0
        if len(self.shapes) > 4096:  # shapes that stopped recurring
            self.shapes.clear()
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
        out = self.draft(input_ids=new[None], position_ids=pos, **cache_kw(self.draft, self.cache), use_cache=True,
                         logits_to_keep=1)
        self.calls = 1  # draft forwards of this step (the catch-up is one)
        self.sizes = [length - self.cached]  # tokens of each of them (a replay's draft cost, bench.cost.replay)
        self.cached = length
        self.tree = DraftTree(self.max_nodes)
        self.forwarded: list[int] = []  # node ids in draft-cache order after the committed tokens
        self._lap("draft_forward")
        return out.logits[0, -1]

    def forward(self, nodes: list[int]) -> torch.Tensor:
        """Draft logits [len(nodes), V] of tree nodes (their ancestors must have been forwarded)."""
        self._lap("tree")
        ids, depth, hidden = self._send_shape(nodes, [self.tree.token[i] for i in nodes])
        return self._run(nodes, ids, depth, hidden)

    def forward_shaped(self, nodes: list[int], ids: torch.Tensor) -> torch.Tensor:
        """`forward` of nodes whose tokens ids [len(nodes)] are still on the device, in a tree whose shape recurs
        step after step (SpecInfer's K x D, Sequoia's static tree; tokens added as placeholders, see `finish`):
        the shape's depths and mask are sent on first use and kept on the device, so a step sends nothing."""
        self._lap("tree")
        key = (tuple(self.tree.parent), tuple(self.forwarded), tuple(nodes))
        if key not in self.shapes:
            self.shapes[key] = self._send_shape(nodes, [])[1:]
        return self._run(nodes, ids.to(self.draft.device).clamp(min=0), *self.shapes[key])  # -1: a dropped draw

    def on_device(self, values: list[int]) -> torch.Tensor:
        """A recurring index list (a shape's node order) as a device tensor, sent the first time only."""
        key = ("index", tuple(values))
        if key not in self.shapes:
            self.shapes[key] = torch.tensor(values, dtype=torch.long, device=self.draft.device)
        return self.shapes[key]

    def _send_shape(self, nodes: list[int], tokens: list[int]) -> tuple[torch.Tensor, ...]:
        """tokens [t], the nodes' depths [n] and what each may not see [n, forwarded + n] (bool) of the host
        tree, on the device in one copy."""
        t, n, cols = self.tree, len(nodes), self.forwarded + nodes
        visible = t.anc[nodes][:, cols].flatten().tolist()  # of the host tree: no wait
        data = tokens + [t.depth[i] for i in nodes] + visible
        ids, depth, seen = torch.tensor(data, dtype=torch.long, device=self.draft.device).split(
            [len(tokens), n, n * len(cols)])
        return ids, depth, seen.view(n, len(cols)) == 0

    def _run(self, nodes: list[int], ids: torch.Tensor, depth: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """The draft forward of tree nodes: their tokens and depths [n] and hidden [n, forwarded + n] (True where
        a node may not attend) on the device; the committed prefix is seen by all."""
        dev, dtype, n = self.draft.device, self.draft.dtype, len(nodes)
        mask = aligned_mask((n, self.cached + hidden.shape[1]), 0.0, dtype, dev)
        mask[:, self.cached :].masked_fill_(hidden, torch.finfo(dtype).min)
        out = self.draft(input_ids=ids[None], position_ids=(depth + (self.cached - 1))[None],
                         attention_mask=mask[None, None], **cache_kw(self.draft, self.cache), use_cache=True)
        self.forwarded += nodes
        self.calls += 1
        self.sizes.append(n)
        self._lap("draft_forward")
        return out.logits[0]

    def forward_chain(self, token: torch.Tensor, depth: int) -> torch.Tensor:
        """Draft logits [V] of the chain node at `depth` whose token [1] is still on the device (a chain drafted
        with nothing else in the draft cache): it sees every cached position, so it needs no mask, and its
        position is made on the device; nothing is read or sent."""
        self._lap("tree")
        dev = self.draft.device
        pos = torch.arange(self.cached - 1 + depth, self.cached + depth, device=dev)[None]
        out = self.draft(input_ids=token.to(dev).view(1, 1), position_ids=pos, **cache_kw(self.draft, self.cache),
                         use_cache=True)
        self.calls += 1
        self.sizes.append(1)
        self._lap("draft_forward")
        return out.logits[0, -1]

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits.float() / self.draft_temperature, dim=-1)

    # -- child selection -----------------------------------------------------------------------------------
    @property
    def greedy(self) -> bool:
        return self.ctx.temperature == 0 and self.t0_children == "topk"

    def choose(self, q: torch.Tensor, k: int, replacement: bool) -> list[int]:
        """k children drawn from q (in draw order), or q's top-k at temperature 0 with t0_children=topk."""
        return self.read([self.draws(q, k, replacement)])[0]

    def draws(self, q: torch.Tensor, k: int, replacement: bool) -> torch.Tensor:
        """`choose`'s k children as a device tensor, read nothing: -1 where fewer than k tokens of q have
        probability (without replacement). Several parents' draws come back in one `read`."""
        if self.greedy:
            return q.topk(k).indices
        k = min(k, q.shape[-1])
        if replacement and k > 1:
            return torch.multinomial(q, k, replacement=True, generator=self.ctx.generator)
        # torch.multinomial's own algorithm for one draw or draws without replacement (an exponential race: the
        # same draws from the generator), without its host checks of q; zero-probability tokens come last.
        race = q / torch.empty_like(q).exponential_(generator=self.ctx.generator)
        picked = race.argmax(-1, keepdim=True) if k == 1 else race.topk(k).indices
        return picked if replacement else torch.where(q[picked] > 0, picked, -1)

    @staticmethod
    def read(draws: list[torch.Tensor]) -> list[list[int]]:
        """Draws of several parents in one host read, each without its -1 (no token left to draw)."""
        flat = torch.cat(draws).tolist()
        rows, at = [], 0
        for d in draws:
            rows.append([x for x in flat[at : at + len(d)] if x >= 0])
            at += len(d)
        return rows

    def keep_drawn(self, tokens: list[int], q_nodes: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Give the host tree (grown with placeholders) its tokens, in node order, dropping the nodes drawn as -1
        (their parent had no token left with probability) with their subtrees; returns q_nodes of the kept."""
        old, self.tree = self.tree, DraftTree(self.max_nodes)
        kept = {ROOT: ROOT}
        for i, (parent, tok) in enumerate(zip(old.parent, tokens)):
            if tok >= 0 and parent in kept:
                kept[i] = self.tree.add(kept[parent], tok)
        return {kept[i]: q for i, q in q_nodes.items() if i in kept}

    # -- result --------------------------------------------------------------------------------------------
    def rollback(self) -> None:
        """Crop the draft cache back to the committed tokens (the tree's nodes leave it)."""
        cut(self.cache, self.cached)

    def end_drafting(self, drafted: int) -> None:
        """Crop the draft cache back to the committed tokens and count the step's draft calls and tokens. The crop
        is its own phase, `rollback` (Post-use & Pre-cut Table 9); the time before it is tree building."""
        self._lap("tree")
        self.rollback()
        self._lap("rollback")
        self.step_log["draft_calls"].append(self.calls)
        self.step_log["draft_sizes"].append(self.sizes)
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

    def finish_chain(self, q_root: torch.Tensor, qs: list[torch.Tensor], tokens: torch.Tensor) -> Draft:
        """`finish` for a chain drafted with `forward_chain`: tokens [n] stay on the device and the chain's tree is
        the engine's cached one, so the step reads and sends nothing. qs[i]: the draft distribution of node i's
        child. Recording runs need the tokens on the host: those take `finish`'s path."""
        if self.record_steps or self.record_trees:
            parent = ROOT
            for tok in tokens.tolist():
                parent = self.tree.add(parent, tok)
            return self.finish(q_root, dict(enumerate(qs)))
        n = len(tokens)
        self.end_drafting(n)
        probs = None
        if self.ctx.temperature > 0:  # slot i + 1 holds node i; the leaf has no children
            probs = torch.zeros(n + 1, q_root.shape[-1], dtype=torch.float32, device=q_root.device)
            probs[: len(qs) + 1] = torch.stack([q_root, *qs])
        self._lap("tree")
        return Draft(chain(n), tokens.to(self.bundle.device), probs=probs)

    def finish(self, q_root: torch.Tensor, q_nodes: dict[int, torch.Tensor],
               tokens: torch.Tensor | None = None) -> Draft:
        """Crop the draft cache back to the committed tokens; the breadth-first Draft with, at temperature > 0,
        each slot's draft distribution (zeros where a node has no children). `tokens`: the nodes' tokens [len(tree)]
        in node order on the device, for a tree grown with placeholder tokens (`forward_shaped`): they stay there
        (read back only when recording)."""
        t = self.tree
        if tokens is not None and (self.record_steps or self.record_trees):
            t.token, tokens = tokens.tolist(), None
        self.end_drafting(len(t))
        if tokens is None:
            tree, tokens, slot = as_engine_tree(t, self.bundle.device)  # the target's input device
        else:  # the engine sends the tree's indices; the tokens are put in slot order on the device
            tree, _, slot = as_engine_tree(t)
            order = sorted(range(len(t)), key=slot.__getitem__)
            tokens = tokens.to(self.bundle.device)[self.on_device(order).to(self.bundle.device)]
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
