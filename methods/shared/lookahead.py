"""Lookahead decoding (LADE, Fu et al. 2024), greedy: the Jacobi window and the n-gram pool, run by the
`lookahead` method on the target and by `ouroboros` on its draft model.

One forward of the model it runs on carries, besides the root (the last committed token):
- the lookahead window: N-1 levels of Jacobi guesses. They are input only: the model's argmax on the top
  level is the next Jacobi iterate, and each column read bottom-up plus that argmax is a new n-gram;
- the verification branch: the n-grams pooled under the root token, merged into a trie (shared prefixes
  once: the same paths, fewer tokens). The engine's verifier accepts the longest matching one.

Window geometry, as LADE's mask and positions (lade/models/llama.py): column i's level-0 token is the root
for i = 0 and window token level0[i-1] otherwise; level l >= 1 of column i sits on level l-1 of the same
column, at depth i + l. So (l, i) attends to root, level0[:i], level1[i], ..., level_l[i]: a tree rooted
at the root, run like any draft tree. Full window: W-1 level-0 tokens and W tokens on each other level,
(N-1)W - 1 in all, plus at most G(N-1) trie tokens.

Warm-up (LADE): level 0 starts with W+N-3 tokens drawn from the prompt; each of the first N-2 steps drops
the first column of every level and stacks the top level's argmax (shifted by one) as a new level.
Afterwards every step harvests W n-grams, then shifts the window by one position whatever the number of
accepted tokens (LADE's ALWAYS_FWD_ONE): levels move down by one, the new argmax becomes the top level.
Acceptance is the engine's verifier: a fully matching n-gram commits its N-1 tokens plus the bonus token
(LADE's own check stops one short there and drops the bonus).
"""

from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache

import torch

from bench.core.proposer import Draft, Proposer
from bench.core.settings import declare, integer
from bench.core.tree import tree_from_parents


class NgramPool:
    """key token -> at most `capacity` n-gram tails (tuples of N-1 tokens), oldest first (LADE's token_map).

    Inserting a tail already present moves it to the end; inserting into a full key drops the oldest.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.map: dict[int, OrderedDict] = {}

    def insert(self, key: int, tail: tuple[int, ...]) -> None:
        tails = self.map.setdefault(key, OrderedDict())
        if tail in tails:
            tails.move_to_end(tail)
            return
        if len(tails) >= self.capacity:
            tails.popitem(last=False)
        tails[tail] = None

    def get(self, key: int) -> list[tuple[int, ...]]:
        return list(self.map.get(key, ()))

    def clear(self) -> None:
        self.map.clear()


@lru_cache(maxsize=64)
def window_structure(n_levels: int, l0: int):
    """The window as a tree in natural slot order (root 0, level 0, level 1, ...).

    Returns (parents, depth, grid): grid[l][i] is the slot of (level l, column i); grid[0][0] is the root,
    since LADE anchors column 0 on it. Level 0 has l0 window tokens, the other levels l0 + 1.
    """
    parents, depth, grid = [-1], [0], [[0]]
    for col in range(1, l0 + 1):
        grid[0].append(len(parents))
        parents.append(grid[0][col - 1])
        depth.append(col)
    for lv in range(1, n_levels):
        grid.append([])
        for col in range(l0 + 1):
            grid[lv].append(len(parents))
            parents.append(grid[lv - 1][col])
            depth.append(col + lv)
    return tuple(parents), tuple(depth), tuple(tuple(g) for g in grid)


class LookaheadDecoding(Proposer):
    """The window and the pool over prompts: a new prompt-turn redraws the window and keeps the pool (its owner
    decides when to clear it)."""

    host_tokens = True  # searched on the host
    settings = declare({"level": integer(3), "window": integer(1), "guess": integer(1), "seed": integer()})

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.n, self.w, self.g = int(cfg.level), int(cfg.window), int(cfg.guess)
        self.seed = int(cfg.seed)
        self.pool = NgramPool(self.g)
        self.levels: list[list[int]] = []
        self.root = 0
        self.slots: list[list[int]] = []  # tree slot of every window token (l, i), root at (0, 0)
        self._trees: dict = {}  # (levels, sorted parents) -> (Tree, candidates): trie shapes recur
        self.verify_device = None  # where the candidates go (None: the host, as Ouroboros verifies there)
        # The last draft's tree parents and candidate flags as Python lists: a host verifier's (Ouroboros).
        self.parents: tuple[int, ...] = ()
        self.candidates: list[bool] = []

    @property
    def max_draft_tokens(self) -> int:
        return self.max_tokens - 1  # the root is the engine's

    def describe(self):
        return {"level": self.n, "window": self.w, "guess": self.g, "max_tokens_per_forward": self.max_tokens}

    @property
    def max_tokens(self) -> int:
        """Root + full window + full trie."""
        return 1 + (self.n - 1) * self.w - 1 + self.g * (self.n - 1)

    def start(self, prompt_ids):
        self.reset_window(prompt_ids)

    def reset_window(self, prompt_ids) -> None:
        """A fresh level-0 window drawn from the prompt, seeded per call like LADE's random.seed(10) (a different
        generator, so different draws); the other levels grow back during the warm-up steps."""
        gen = torch.Generator().manual_seed(self.seed)
        src = list(prompt_ids) or [0]
        idx = torch.randint(len(src), (self.w + self.n - 3,), generator=gen).tolist()
        self.levels = [[src[i] for i in idx]]

    def propose(self, seq, length):
        self.root = root = int(seq[length - 1])
        win_parents, win_depth, grid = window_structure(len(self.levels), len(self.levels[0]))
        parents, depth = list(win_parents), list(win_depth)
        tokens = [root] + [t for level in self.levels for t in level]
        n_window = len(tokens)  # root included
        # Verification branch: pooled tails of the root as a trie hanging from the root.
        child: dict[tuple[int, int], int] = {}
        for tail in self.pool.get(root):
            node = 0
            for d, tok in enumerate(tail, 1):
                nxt = child.get((node, tok))
                if nxt is None:
                    nxt = child[(node, tok)] = len(tokens)
                    tokens.append(tok)
                    parents.append(node)
                    depth.append(d)
                node = nxt
        # The engine wants slots ordered by depth: stable sort, then remap parents.
        order = sorted(range(len(tokens)), key=depth.__getitem__)
        new_slot = [0] * len(order)
        for new, old in enumerate(order):
            new_slot[old] = new
        sorted_parents = tuple([-1] + [new_slot[parents[o]] for o in order[1:]])
        key = (len(self.levels), sorted_parents)
        drafted = [tokens[o] for o in order[1:]]
        self.slots = [[new_slot[s] for s in level] for level in grid]
        self.parents, self.candidates = sorted_parents, [o == 0 or o >= n_window for o in order]  # window: input only
        if key in self._trees:
            tree, cand = self._trees[key]
            return Draft(tree, torch.tensor(drafted, dtype=torch.long, device=self.verify_device), cand)
        if len(self._trees) >= 4096:
            self._trees.clear()
        tree = tree_from_parents(list(sorted_parents))
        cand = self.candidates
        if self.verify_device is None:
            cand, drafted = torch.tensor(cand), torch.tensor(drafted, dtype=torch.long)
        else:  # a new shape: the tree, its candidates and the tokens go to the verifier's device in one copy
            sent = tree.tokens_on(cand + drafted, self.verify_device)
            cand, drafted = sent[: len(order)].bool(), sent[len(order) :]
        self._trees[key] = (tree, cand)
        return Draft(tree, drafted, cand)

    def update(self, inputs, logits, target, acceptance):
        out = target.tolist()
        new = [out[s] for s in self.slots[-1]]  # top level's argmax: the next Jacobi iterate, one column on
        levels = self.levels
        if len(levels) < self.n - 1:  # warm-up: drop the first column everywhere, stack a new level
            self.levels = [lv[1:] for lv in levels] + [new[1:]]
            return
        # Column i gives the n-gram (level-0 token, level1[i], ..., level_{N-2}[i], new[i]).
        for i, key in enumerate([self.root] + levels[0]):
            self.pool.insert(key, tuple(lv[i] for lv in levels[1:]) + (new[i],))
        self.levels = [levels[1][1:]] + levels[2:] + [new]
