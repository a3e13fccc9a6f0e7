"""Post-use & Pre-cut ("holistic token efficiency", Appendix C, Algorithms 1-3) on the draft-model machinery.

One step, greedy (the paper evaluates greedy decoding only; temperature > 0 is refused):
1. The draft catches up on the committed tokens; its argmax is the first draft token.
2. Drafting, up to `draft_length` tokens. Before each further draft forward the Pre-cut controller (precut.py)
   may stop; without it the draft always runs to `draft_length`. A forward feeds the last draft token and, with
   `reuse_draft` (Algorithm 2), the first `draft_phrases` cached phrases keyed by that token as branches behind
   it: each branch sees the prefix, the draft and itself, never another branch (tree attention). The forward gives
   the draft's next token and, for every phrase, how many of its tokens the draft itself would have produced
   (A_j); the longest match joins the draft, followed by the draft's next token after it, which the same forward
   computed: A + 1 tokens for one forward, the tokens plain drafting would give. (The paper appends the match
   only when A > 1 and stops there; the token after it costs nothing here because its logits are computed.)
3. Verification (Algorithm 3). With `reuse_target`, each of the last `target_anchors` draft tokens (the root when
   the draft is shorter) carries the first `target_phrases` phrases keyed by it, merged into the draft tree as a
   trie. The shared verifier accepts the deepest path matching the target's argmax, so a phrase extends the
   output exactly when the draft is accepted up to its anchor and the phrase continues the target's greedy text:
   lossless by construction.
4. Cache update (Eq. 7): the draft tokens the target agreed with, including after the first mismatch, as phrases
   under the token before them; the phrases verified at the target and at the draft (each cut after the verifier's
   first disagreement, plus the verifier's own token there); and the committed text itself.

Counters per step (Proposer.step_counters): draft_calls, draft_tokens, draft_fetches / draft_hits (forwards that
carried phrases / reused one), draft_reused (tokens taken from phrases), target_fetches / target_hits,
target_extra (output tokens that came from a phrase at the target), useful (Eq. 7), accepted_draft, and with
Pre-cut, decisions and reward.

Host waits: the proposer works on the host (`host_tokens`: the engine's one read a step brings the committed
tokens and the target's choices). A draft forward reads its argmax, with the draft's confidence in it when Pre-cut
or run.record_steps needs that, in one read; one that carries phrases sends its inputs in one copy, one that
carries only the last draft token feeds that token from the device (a recurring shape: nothing sent). The
catch-up reads the committed tokens from the engine's device copy (StepContext.seq), so it sends nothing. The verification tree and its
tokens go in one copy; `update` runs the greedy verifier again on host lists, so it reads nothing back.
"""

from __future__ import annotations

import itertools
import math

import torch
from omegaconf import OmegaConf

from bench.core.proposer import Acceptance, Draft
from bench.core.settings import FLAG, Rule, choice, declare, integer, number, numbers
from bench.core.verify import greedy_path
from methods.holistic.precut import CREDITS, QController
from methods.holistic.token_cache import TokenCache
from methods.shared.draft_proposer import DraftModelProposer
from methods.shared.trees.draft import ROOT, Trie, as_engine_tree


def plain(node) -> dict:
    """A config node as a plain dict, interpolations resolved (for the run's recorded settings)."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node)


class Holistic(DraftModelProposer):
    rule = "specinfer"
    greedy_only = True  # as the paper: phrases and n-grams carry no draft distribution
    host_tokens = True  # the token cache works on host lists: the committed text and the target's choices
    settings = declare({
        "reuse_draft": FLAG, "reuse_target": FLAG, "precut": FLAG, "draft_length": integer(1),
        "draft_phrases": integer(0), "target_phrases": integer(0), "target_anchors": integer(1),
        "cache.beta": integer(1), "cache.per_key": integer(1), "cache.max_keys": integer(1),
        "cache.min_phrase": integer(1), "cache.warm": FLAG, "cache.store_draft_phrases": FLAG,
        "controller.target_cost": number(0, above=True), "controller.conf_edges": numbers(0, 1, above=True),
        "controller.gamma": number(0, 1), "controller.alpha": number(0, 1, above=True),
        "controller.epsilon": number(0, 1), "controller.q_init": number(), "controller.warmup_steps": integer(0),
        "controller.seed": integer(), "controller.freeze_after_warmup": FLAG,
        "controller.credit": choice(*CREDITS),
    })
    # A switch on with nothing to reuse would run as the switch off while the run says on.
    requires = (
        Rule("draft_phrases >= 1 when reuse_draft is on", ("reuse_draft", "draft_phrases"),
             lambda on, n: not on or n >= 1),
        Rule("target_phrases >= 1 when reuse_target is on", ("reuse_target", "target_phrases"),
             lambda on, n: not on or n >= 1),
        Rule("cache.min_phrase <= cache.beta", ("cache.min_phrase", "cache.beta"), lambda lo, hi: lo <= hi),
        Rule("controller.conf_edges decreasing and below 1", ("controller.conf_edges",),
             lambda e: list(e) == sorted(e, reverse=True) and max(e) < 1),
    )

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.reuse_draft, self.reuse_target = bool(cfg.reuse_draft), bool(cfg.reuse_target)
        self.length = int(cfg.draft_length)  # fixed, or Pre-cut's upper bound
        self.draft_phrases, self.target_phrases = int(cfg.draft_phrases), int(cfg.target_phrases)
        self.anchors = int(cfg.target_anchors)
        c = cfg.cache
        self.cache_tokens = TokenCache(int(c.beta), int(c.per_key), int(c.max_keys), int(c.min_phrase))
        self.warm = bool(c.warm)
        self.store_draft_phrases = bool(c.store_draft_phrases)
        self.controller = None
        if cfg.precut:
            p = cfg.controller
            self.controller = QController(self.length, tuple(p.conf_edges), float(p.target_cost), float(p.gamma),
                                          float(p.alpha), float(p.epsilon), float(p.q_init), int(p.warmup_steps),
                                          int(p.seed), bool(p.get("freeze_after_warmup", False)),
                                          str(p.get("credit", "discounted")))
        beta = self.cache_tokens.beta
        # The draft-side tree holds the draft plus every phrase it forwarded; the target's adds anchored phrases.
        self.max_nodes = self.length * (1 + self.draft_phrases * beta) + beta
        self.target_nodes = self.length + (self.anchors * self.target_phrases * beta if self.reuse_target else 0)

    @property
    def max_draft_tokens(self) -> int:
        return self.target_nodes

    def describe(self):
        return {**super().describe(), "reuse_draft": self.reuse_draft, "reuse_target": self.reuse_target,
                "precut": self.controller is not None, "draft_length": self.length,
                "cache": {"beta": self.cache_tokens.beta, "per_key": self.cache_tokens.per_key,
                          "max_keys": self.cache_tokens.max_keys, "warm": self.warm},
                **({"controller": plain(self.cfg.controller)} if self.controller is not None else {})}

    def state_dict(self):
        state = {"cache": self.cache_tokens.state_dict()} if self.warm else {}
        if self.controller is not None:
            state["controller"] = self.controller.state_dict()
        return state

    def load_state_dict(self, state):
        if "cache" in state:
            self.cache_tokens.load_state_dict(state["cache"])
        if "controller" in state:
            self.controller.load_state_dict(state["controller"])

    def start(self, prompt_ids):
        super().start(prompt_ids)
        if not self.warm:
            self.cache_tokens.clear()
        self.text_from = len(prompt_ids) - 1  # committed text enters the cache from the last prompt token on
        self.seen = len(prompt_ids)

    # -- drafting ---------------------------------------------------------------------------------------------
    def propose(self, seq, length):
        self._lap("tree")
        if self.reuse_draft or self.reuse_target:  # the text committed since the last step
            lo = max(self.text_from, self.seen - self.cache_tokens.beta)  # phrases reaching the new text start here
            self.cache_tokens.push_text(seq[lo:length].tolist(), self.seen - lo)
            self.seen = length
            self._lap("cache")
        logits = self.catch_up(self.ctx.seq, length)  # the engine's device copy: nothing sent
        t = self.tree
        self.tail_id, (first,), (conf,) = self._read_argmax(logits[None])  # tail_id: the last draft token [1]
        self.chain, self.conf = [t.add(ROOT, first)], [conf]
        fetches = hits = reused = 0
        self.draft_checked: list[tuple[int, list[int]]] = []
        if self.controller is not None:
            self.controller.begin()
        while len(self.chain) < self.length:
            if self.controller is not None:
                go = self.controller.decide(self.calls, math.prod(self.conf), len(self.chain))
                self._lap("controller")
                if not go:
                    break
            phrases = self._fetch(t.token[self.chain[-1]], self.draft_phrases) if self.reuse_draft else []
            fetches += bool(phrases)
            matched = self._draft_step(phrases)
            hits += matched > 0
            reused += matched
        del self.chain[self.length :], self.conf[self.length :]
        self.step_log["draft_fetches"].append(fetches)
        self.step_log["draft_hits"].append(hits)
        self.step_log["draft_reused"].append(reused)
        return self._target_draft(int(seq[length - 1]), length)

    def _read_argmax(self, logits: torch.Tensor) -> tuple[torch.Tensor, list[int], list[float]]:
        """The draft's argmax at each row of logits [n, V]: on the device [n] and on the host, with the draft's
        probability of it (Pre-cut's signal; computed only for the controller or for run.record_steps, else 1.0),
        in one read."""
        ids = logits.argmax(-1)
        if self.controller is None and not self.record_steps:
            return ids, ids.tolist(), [1.0] * len(ids)
        probs = torch.softmax(logits.float(), -1).gather(-1, ids[:, None])[:, 0]  # row by row: each row's own softmax
        values = torch.cat([ids.double(), probs.double()]).tolist()  # token ids < 2**53: exact as doubles
        return ids, [int(v) for v in values[: len(ids)]], values[len(ids) :]

    def _fetch(self, key: int, n: int) -> list[tuple[int, ...]]:
        self._lap("tree")
        phrases = self.cache_tokens.fetch(key, n)
        self._lap("cache")
        return phrases

    def _draft_step(self, phrases) -> int:
        """One draft forward of the last draft token (and the phrases behind it); appends the draft's tokens.
        Returns how many came from a phrase."""
        t, last = self.tree, self.chain[-1]
        branches = []
        for phrase in phrases:
            parent, nodes = last, []
            for tok in phrase:
                parent = t.add(parent, tok)
                nodes.append(parent)
            branches.append(nodes)
        nodes = [last] + [n for b in branches for n in b]
        # Phrases come from the host; the last draft token alone is still on the device (its shape recurs).
        logits = self.forward(nodes) if branches else self.forward_shaped(nodes, self.tail_id)
        self._lap("tree")
        row = {n: i for i, n in enumerate(nodes)}
        ids, argmax, conf = self._read_argmax(logits)
        best: list[int] = []
        for nodes_j in branches:  # A_j: leading phrase tokens equal to the draft's own argmax chain
            match, parent = [], last
            for n in nodes_j:
                if t.token[n] != argmax[row[parent]]:
                    break
                match.append(n)
                parent = n
            if self.store_draft_phrases:  # the phrase as the draft verified it: the match + the draft's next
                self.draft_checked.append((t.token[last], [t.token[n] for n in match] + [argmax[row[parent]]]))
            if len(match) > len(best):
                best = match
        for n in best:  # a matched token is the draft's argmax at its parent
            self.conf.append(conf[row[t.parent[n]]])
            self.chain.append(n)
        tail = self.chain[-1]
        self.chain.append(t.add(tail, argmax[row[tail]]))
        self.conf.append(conf[row[tail]])
        self.tail_id = ids[row[tail] : row[tail] + 1]
        if best:
            self.cache_tokens.used(t.token[last])
        return len(best)

    def _target_draft(self, root: int, length: int) -> Draft:
        """The verification tree: the draft chain, and with reuse_target the anchored phrases as a trie."""
        trie = Trie(self.target_nodes + 1)
        chain = trie.path(ROOT, [self.tree.token[n] for n in self.chain])
        self.anchored: list[tuple[int, int, list[int]]] = []  # (anchor node, key token, phrase nodes)
        fetched = 0
        if self.reuse_target:
            self._lap("tree")
            for anchor in ([ROOT] + chain)[-self.anchors :]:
                key = root if anchor == ROOT else trie.tree.token[anchor]
                for phrase in self.cache_tokens.fetch(key, self.target_phrases):
                    fetched += 1
                    self.anchored.append((anchor, key, trie.path(anchor, phrase)))
            self._lap("cache")
        self.step_log["target_fetches"].append(int(fetched > 0))
        self.end_drafting(len(chain))
        tree, tokens, slot = as_engine_tree(trie.tree, self.bundle.device)  # tokens sent with the tree
        self.slot = slot
        by_slot = sorted((s, n) for n, s in slot.items() if n != ROOT)
        self.sent = (tree, tree.parents.tolist(), [root] + [trie.tree.token[n] for _, n in by_slot])
        self.chain_slots = [slot[n] for n in chain]
        if self.record_steps:  # the draft chain (cached phrases hung at the target are not drafts)
            self.record_draft([self.tree.token[n] for n in self.chain], list(range(-1, len(self.chain) - 1)),
                              list(self.conf), self.chain_slots)
        self._lap("tree")
        return Draft(tree, tokens)

    # -- after verification -----------------------------------------------------------------------------------
    def update(self, inputs, logits, target, acceptance):
        self._lap("update")
        tgt = target.tolist()  # a host tensor (host_tokens)
        tree, parents, tokens = self.sent  # the engine's acceptance again, from host lists: read nothing back
        accepted, bonus = greedy_path(parents, tokens, tgt)
        acceptance_host = Acceptance.from_path(tree, accepted, bonus, device=None)  # host tensors: no device named
        slots = [0] + self.chain_slots
        useful = [False] + [tokens[s] == tgt[p] for p, s in itertools.pairwise(slots)]  # Eq. 7
        prefix = list(itertools.accumulate(useful, initial=0))[1:]  # useful tokens among the first n drafts
        path, _, extra = self.log_acceptance(self.chain_slots, acceptance_host)  # extra: phrase tokens accepted
        if self.record_steps:
            self.record_accepted(acceptance_host)
        log = self.step_log
        log["useful"].append(prefix[-1])
        log["target_hits"].append(int(extra > 0))
        cache = self.cache_tokens
        cache.push_runs([tokens[s] for s in slots], useful)
        for anchor, key, nodes in self.anchored:  # each phrase as the target verified it
            verified, parent = [], self.slot[anchor]
            for n in nodes:
                s = self.slot[n]
                if tokens[s] != tgt[parent]:
                    break
                verified.append(tokens[s])
                parent = s
            cache.push(key, verified + [tgt[parent]])
            if extra and any(self.slot[n] in path for n in nodes):
                cache.used(key)
        for key, phrase in self.draft_checked:
            cache.push(key, phrase)
        self._lap("cache")
        if self.controller is not None:
            decisions = len(self.controller.episode)
            reward = self.controller.learn(prefix, self.calls)
            log["decisions"].append(decisions)
            log["reward"].append(0.0 if reward is None else reward)
            self._lap("controller")
