"""Ouroboros (Zhao et al., 2024), greedy, the Post-use & Pre-cut paper's baseline.

One n-gram pool (LADE's: key token -> at most `guess` (level-1)-grams, re-inserting moves an n-gram to the newest
end, a full key drops its oldest) is shared by the draft and the target, and persists across prompts (warm start)
unless `warm` is false. Per step:
1. The draft catches up on the committed tokens (its argmax is the first draft token), then drafts by lookahead
   decoding (methods/shared/lookahead.py, run on the draft model): every draft forward carries the last draft
   token, the Jacobi window and the pooled n-grams keyed by that token; the draft's own greedy verifier keeps
   the longest n-gram it agrees with plus its next token, and the window harvests new n-grams into the pool.
   Until `gamma` tokens.
2. The target verifies the draft plus the newest `topk` pooled n-grams keyed by the last draft token as blocks
   behind it (each sees the prefix and the draft, not the other blocks): a block can extend the output only when
   the whole draft is accepted, the longest matching one wins (the shared verifier).
3. After a rejection, each draft token from the rejected one on keys the target's argmax after it, continued
   while the draft's next token is what the target chose, stored when it reaches level-1 tokens (Ouroboros's
   add_extra_ngram). Ouroboros also rewrites the newest n-grams in place with target-corrected ones
   (update_in_place); this harness only adds, it never overwrites.

Host waits: the draft tree is built on the host, so each lookahead forward sends its inputs once and reads its
argmax once; the draft's own verification and the step's acceptance (for the pool) are the greedy verifier run on
host lists (bench.core.verify.greedy_path), so nothing else is read. The catch-up reads the committed tokens from
the engine's device copy (StepContext.seq), so it sends nothing and only reads its argmax. The engine's tree and tokens go in one copy a step.
"""

from __future__ import annotations

import torch
from omegaconf import OmegaConf

from bench.core.proposer import Acceptance, Draft
from bench.core.settings import FLAG, declare, integer
from bench.core.verify import greedy_path
from methods.shared.draft_proposer import DraftModelProposer
from methods.shared.lookahead import LookaheadDecoding
from methods.shared.trees.draft import ROOT, Trie, as_engine_tree


def extra_ngrams(draft: list[int], target: list[int], n: int) -> list[tuple[int, tuple[int, ...]]]:
    """Ouroboros's add_extra_ngram: after a rejection, (key, n-gram) for each draft token from the rejected one on
    (`draft`; `target`: the target's choice after each): the key is the draft token, the n-gram the target's choice
    after it, continued while the draft's next token is what the target chose; only those reaching n tokens."""
    out = []
    for k in range(len(draft)):
        tail, j = [target[k]], k
        while len(tail) < n and j + 1 < len(draft) and draft[j + 1] == target[j]:
            j += 1
            tail.append(target[j])
        if len(tail) == n:
            out.append((draft[k], tuple(tail)))
    return out


class Ouroboros(DraftModelProposer):
    rule = "specinfer"
    greedy_only = True  # as the paper: phrases and n-grams carry no draft distribution
    host_tokens = True  # the committed tokens and the target's choices come with the engine's read: update reads none
    settings = declare({**LookaheadDecoding.settings, "gamma": integer(1), "topk": integer(0), "warm": FLAG})

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.gamma, self.topk, self.warm = int(cfg.gamma), int(cfg.topk), bool(cfg.warm)
        la = OmegaConf.create({"name": "lookahead", "level": cfg.level, "window": cfg.window, "guess": cfg.guess,
                               "seed": cfg.seed})
        self.lookahead = LookaheadDecoding(la, bundle)  # its start keeps the pool: `warm` decides here
        self.pool = self.lookahead.pool  # Ouroboros's CacheEngine: the draft's n-grams are the target's guesses
        self.max_nodes = self.gamma * self.lookahead.max_tokens + 1
        self.level = self.lookahead.n

    @property
    def max_draft_tokens(self) -> int:
        return self.gamma + self.topk * (self.level - 1)

    def describe(self):
        return {**super().describe(), "gamma": self.gamma, "topk": self.topk, "warm": self.warm,
                **{k: v for k, v in self.lookahead.describe().items() if k != "max_tokens_per_forward"}}

    def state_dict(self):
        if not self.warm:
            return {}
        return {"pool": [[k, [list(t) for t in tails]] for k, tails in self.pool.map.items()]}

    def load_state_dict(self, state):
        self.pool.clear()
        for key, tails in state.get("pool", []):
            for tail in tails:
                self.pool.insert(key, tuple(tail))

    def start(self, prompt_ids):
        super().start(prompt_ids)
        if not self.warm:
            self.pool.clear()
        self.lookahead.start(prompt_ids)

    def propose(self, seq, length):
        logits = self.catch_up(self.ctx.seq, length)  # the engine's device copy: nothing sent
        t = self.tree
        chain = [t.add(ROOT, int(logits.argmax()))]
        while len(chain) < self.gamma:
            chain += self._lookahead_step(chain[-1])
        del chain[self.gamma :]
        self.end_drafting(len(chain))
        trie = Trie(self.max_draft_tokens + 1)
        nodes = trie.path(ROOT, [t.token[n] for n in chain])
        for tail in reversed(self.pool.get(t.token[chain[-1]])[-self.topk :] if self.topk else []):
            trie.path(nodes[-1], tail)  # newest first
        tree, tokens, slot = as_engine_tree(trie.tree, self.bundle.device)  # tokens sent with the tree
        self.chain_slots = [slot[n] for n in nodes]
        by_slot = sorted((s, n) for n, s in slot.items() if n != ROOT)
        self.sent = (tree, tree.parents.tolist(), [int(seq[length - 1])] + [trie.tree.token[n] for _, n in by_slot])
        self._lap("tree")
        return Draft(tree, tokens)

    def _lookahead_step(self, root: int) -> list[int]:
        """One draft forward of lookahead decoding from the draft token `root` (not yet forwarded): the draft
        tokens it adds (an accepted n-gram and the draft's next token), already in the draft tree."""
        t, la = self.tree, self.lookahead
        d = la.propose(torch.tensor([t.token[root]]), 1)  # on the host: its tree also as lists (la.parents)
        node = [root]
        for parent, tok in zip(la.parents[1:], d.tokens.tolist(), strict=True):
            node.append(t.add(node[parent], tok))
        target = self.forward(node).argmax(-1).tolist()  # the forward's one read
        inputs = [t.token[n] for n in node]
        slots, bonus = greedy_path(la.parents, inputs, target, la.candidates)
        la.update(torch.tensor(inputs), None, torch.tensor(target), Acceptance.from_path(d.tree, slots, bonus, device=None))
        path = [node[s] for s in slots[1:]]
        return [*path, t.add(path[-1] if path else root, bonus)]

    def update(self, inputs, logits, target, acceptance):
        tgt = target.tolist()  # a host tensor (host_tokens)
        tree, parents, tokens = self.sent  # the engine's acceptance again, from host lists: read nothing back
        path, bonus = greedy_path(parents, tokens, tgt)
        _, accepted, _ = self.log_acceptance(self.chain_slots, Acceptance.from_path(tree, path, bonus, device=None))
        if accepted < len(self.chain_slots):  # rejected at chain position accepted + 1
            rest = [0, *self.chain_slots][accepted + 1 :]
            for key, tail in extra_ngrams([tokens[s] for s in rest], [tgt[s] for s in rest], self.level - 1):
                self.pool.insert(key, tail)
