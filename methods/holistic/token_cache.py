"""The Post-use token cache (Post-use & Pre-cut, Section 5.1): short phrases stacked under their key token.

A phrase is at most `beta` tokens that followed the key token somewhere the target (or the draft) agreed with.
Each key holds a last-in-first-out stack of at most `per_key` phrases (the paper's kappa_phase, 20); pushing a
phrase already in the stack moves it to the top; a full stack drops its oldest phrase (the bottom). At most
`max_keys` keys are kept (kappa_pool, 1000); a new key in a full pool evicts the least used key, where a key is
used each time one of its phrases is reused (matched at the draft or at the target), ties going to the key
touched longest ago. A fetch returns the newest phrases first.

The paper publishes neither how "least used" is counted nor what fills the cache beyond Eq. 7; both choices are
written here and in conf/method/holistic.yaml, so a sweep can change them.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict

Phrase = tuple[int, ...]


class TokenCache:
    def __init__(self, beta: int = 5, per_key: int = 20, max_keys: int = 1000, min_phrase: int = 1):
        if beta < 1 or per_key < 1 or max_keys < 1 or not 1 <= min_phrase <= beta:
            raise ValueError(f"token cache needs beta, per_key, max_keys >= 1 and 1 <= min_phrase <= beta; got "
                             f"{beta}/{per_key}/{max_keys}/{min_phrase}")
        self.beta, self.per_key, self.max_keys, self.min_phrase = beta, per_key, max_keys, min_phrase
        self.stacks: dict[int, OrderedDict[Phrase, None]] = {}  # bottom (oldest) first, top last
        self.uses: dict[int, int] = {}
        self.touched: dict[int, int] = {}  # key -> clock of its last push or use (the tie-break of eviction)
        self.clock = itertools.count()

    def __len__(self) -> int:
        return len(self.stacks)

    def push(self, key: int, phrase) -> bool:
        """Stack `phrase` (cut to beta tokens) on `key`; False when shorter than min_phrase (not stored)."""
        phrase = tuple(int(t) for t in phrase)[: self.beta]
        if len(phrase) < self.min_phrase:
            return False
        key = int(key)
        stack = self.stacks.get(key)
        if stack is None:
            if len(self.stacks) >= self.max_keys:
                self._evict_key()
            stack = self.stacks[key] = OrderedDict()
            self.uses[key] = 0
        if phrase in stack:
            stack.move_to_end(phrase)
        else:
            if len(stack) >= self.per_key:
                stack.popitem(last=False)  # the earliest inserted phrase
            stack[phrase] = None
        self.touched[key] = next(self.clock)
        return True

    def _evict_key(self) -> None:
        victim = min(self.stacks, key=lambda k: (self.uses[k], self.touched[k]))
        del self.stacks[victim], self.uses[victim], self.touched[victim]

    def fetch(self, key: int, n: int) -> list[Phrase]:
        """The newest `n` phrases of `key` (top of its stack first); [] for an unknown key."""
        stack = self.stacks.get(int(key))
        if not stack or n <= 0:
            return []
        return list(itertools.islice(reversed(stack), n))

    def used(self, key: int) -> None:
        """Count a reuse of one of `key`'s phrases (the eviction order)."""
        key = int(key)
        if key in self.uses:
            self.uses[key] += 1
            self.touched[key] = next(self.clock)

    def push_text(self, tokens: list[int], start: int) -> None:
        """Every full beta-token phrase of `tokens` that ends at or after index `start` (the newly committed
        text), each under the token before it."""
        for s in range(max(0, start - self.beta), len(tokens) - self.beta):
            self.push(tokens[s], tokens[s + 1 : s + 1 + self.beta])

    def push_runs(self, tokens: list[int], useful: list[bool]) -> None:
        """Eq. 7 of the paper: tokens[i] (i >= 1) is useful when the verifier's token there equals it, including
        positions after the first mismatch. Each maximal run of useful tokens is stored in phrases of up to beta
        tokens, each under the token before it (tokens[0] is the step's root)."""
        i = 1
        while i < len(tokens):
            if not useful[i]:
                i += 1
                continue
            j = i
            while j + 1 < len(tokens) and useful[j + 1]:
                j += 1
            for s in range(i - 1, j):  # key tokens[s], phrase tokens[s+1 .. j] cut to beta
                self.push(tokens[s], tokens[s + 1 : j + 1])
            i = j + 1

    def clear(self) -> None:
        self.stacks.clear()
        self.uses.clear()
        self.touched.clear()

    # -- checkpointing (a resumed run decodes as an uninterrupted one) -------------------------------------
    def state_dict(self) -> dict:
        order = sorted(self.stacks, key=self.touched.__getitem__)
        return {"keys": [[k, self.uses[k], [list(p) for p in self.stacks[k]]] for k in order]}

    def load_state_dict(self, state: dict) -> None:
        self.clear()
        for key, uses, phrases in state["keys"]:
            self.stacks[key] = OrderedDict((tuple(p), None) for p in phrases)
            self.uses[key] = uses
            self.touched[key] = next(self.clock)
