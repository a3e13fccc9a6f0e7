"""Lookahead decoding: n-gram pool, window tree, one engine step by hand, losslessness on a tiny model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from bench.core.engine import Engine
from bench.core.timing import PhaseTimer
from bench.errors import ConfigError
from methods.ar import Autoregressive
from methods.lookahead import Lookahead
from methods.shared.lookahead import NgramPool, window_structure
from tests.conftest import tiny_llama

V = 100
NO_EOS = 10_000  # outside the vocabulary: never emitted


def bundle(model=None, eos=NO_EOS):
    return SimpleNamespace(device="cpu", vocab_size=V, model=model, eos_token_ids=[eos], pad_token_id=0)


def lookahead(model=None, **kw):
    cfg = OmegaConf.create({"name": "lookahead", "level": 5, "window": 7, "guess": 7, "seed": 10, **kw})
    return Lookahead(cfg, bundle(model))


# ---- n-gram pool -------------------------------------------------------------------------------------


def test_pool_capacity_lru_and_eviction():
    pool = NgramPool(3)
    assert pool.get(1) == []
    for tail in [(1, 2), (3, 4), (5, 6)]:
        pool.insert(7, tail)
    assert pool.get(7) == [(1, 2), (3, 4), (5, 6)]
    pool.insert(7, (1, 2))  # present: moves to the end, nothing dropped
    assert pool.get(7) == [(3, 4), (5, 6), (1, 2)]
    pool.insert(7, (8, 9))  # full: the oldest goes
    assert pool.get(7) == [(5, 6), (1, 2), (8, 9)]
    pool.insert(8, (1, 2))  # keys are independent
    assert pool.get(8) == [(1, 2)] and len(pool.get(7)) == 3
    pool.clear()
    assert pool.get(7) == []


# ---- window tree -------------------------------------------------------------------------------------


def test_window_structure_full_n4_w3():
    # N=4, W=3: level 0 has W-1 = 2 tokens (column 0 is the root), levels 1 and 2 have 3.
    parents, depth, grid = window_structure(3, 2)
    assert grid == ((0, 1, 2), (3, 4, 5), (6, 7, 8))
    assert parents == (-1, 0, 1, 0, 1, 2, 3, 4, 5)
    assert depth == (0, 1, 2, 1, 2, 3, 2, 3, 4)  # (l, i) at depth i + l


def warm(method, prompt, steps):
    """Run `steps` propose/update rounds with a made-up target (token 50 + slot)."""
    method.start(prompt)
    seq = torch.tensor(prompt)
    for _ in range(steps):
        draft = method.propose(seq, len(seq))
        method.update(None, None, 50 + torch.arange(draft.tree.size + 1), None)
    return seq


def test_warm_up_and_window_tree():
    n, w = 4, 3
    method = lookahead(level=n, window=w, guess=2)
    seq = warm(method, list(range(10, 22)), 0)
    assert [len(lv) for lv in method.levels] == [w + n - 3]  # drawn from the prompt
    assert set(method.levels[0]) <= set(range(10, 22))
    draft = method.propose(seq, len(seq))
    assert draft.tree.is_chain and draft.candidates.tolist() == [True] + [False] * (w + n - 3)
    method.update(None, None, 50 + torch.arange(draft.tree.size + 1), None)
    assert [len(lv) for lv in method.levels] == [3, 4]  # first column dropped, argmax of level 0 stacked
    assert method.levels[1] == [50 + s for s in method.slots[0][1:]]

    seq = warm(method, list(range(10, 22)), n - 2)  # warm-up done: the window is full
    assert [len(lv) for lv in method.levels] == [w - 1, w, w]
    draft = method.propose(seq, len(seq))
    tree, slots = draft.tree, method.slots
    assert tree.size == (n - 1) * w - 1
    assert not draft.candidates[1:].any()  # every window slot is input only
    tokens = torch.cat([seq[-1:], draft.tokens])
    anc = tree.ancestors
    for lv in range(n - 1):
        for i in range(w):
            s = slots[lv][i]
            assert int(tree.depth[s]) == i + lv
            if lv == 0 and i == 0:
                continue
            assert int(tokens[s]) == ([int(seq[-1])] + method.levels[0])[i] if lv == 0 else method.levels[lv][i]
            # LADE's pattern: root, level0 up to column i, then column i of each level up to lv.
            want = set(slots[0][: i + 1]) | {slots[k][i] for k in range(1, lv + 1)}
            assert set(anc[s].nonzero().flatten().tolist()) == want


def test_harvest_shift_and_trie():
    n, w = 4, 3
    method = lookahead(level=n, window=w, guess=2)
    seq = warm(method, list(range(10, 22)), n - 2)
    levels = [list(lv) for lv in method.levels]
    draft = method.propose(seq, len(seq))
    root = int(seq[-1])
    target = 50 + torch.arange(draft.tree.size + 1)
    method.update(None, None, target, None)
    new = [int(target[s]) for s in method.slots[-1]]
    # One n-gram per column, keyed by its level-0 token (the root for column 0).
    for i, key in enumerate([root] + levels[0]):
        assert (levels[1][i], levels[2][i], new[i]) in method.pool.get(key)
    assert method.levels == [levels[1][1:], levels[2], new]  # shifted by one position

    # Verification branch: the root's tails as a trie; only trie slots are candidates.
    method.pool.clear()
    for tail in [(1, 2, 3), (1, 2, 4)]:
        method.pool.insert(root, tail)
    method.pool.insert(root, (5, 6, 7))  # G = 2: evicts (1, 2, 3)
    draft = method.propose(seq, len(seq))
    cand = draft.candidates.nonzero().flatten().tolist()
    assert len(cand) == 1 + 6  # root + 1,2,4 and 5,6,7 (no shared prefix left after the eviction)
    tokens = torch.cat([seq[-1:], draft.tokens])
    paths = {tuple(int(tokens[s]) for s in draft.tree.ancestors[c].nonzero().flatten()[1:]) for c in cand}
    assert {(1, 2, 4), (5, 6, 7)} <= paths
    method.pool.insert(root, (1, 2, 4))  # used again: now the newest
    method.pool.insert(root, (1, 2, 3))  # evicts (5, 6, 7): 1 -> 2 -> {3, 4} shares a prefix
    draft = method.propose(seq, len(seq))
    assert int(draft.candidates.sum()) == 1 + 4
    assert draft.tree.size == (n - 1) * w - 1 + 4


def test_config_checks_and_describe():
    with pytest.raises(ConfigError):
        lookahead(level=2)
    assert lookahead().describe() == {"level": 5, "window": 7, "guess": 7, "max_tokens_per_forward": 56}


# ---- tiny random Llama: identical to AR ----------------------------------------------------------------

_g = torch.Generator().manual_seed(1)
PROMPTS = [torch.randint(0, V, (12,), generator=_g).tolist() for _ in range(3)]
PROMPTS.append([5, 6, 7, 8, 9, 10] * 3 + [5, 6])


@pytest.fixture(scope="module", params=["eager", "sdpa"])
def model(request):
    m = tiny_llama(V, request.param, 512)
    m._ar_cache = {}
    return m


def generate(model, method, prompt, max_new, eos=NO_EOS):
    return method.generate(Engine(model, [eos], max_context=512), prompt, max_new, PhaseTimer("cpu"))


def ar(model, prompt, max_new):
    key = (tuple(prompt), max_new)
    if key not in model._ar_cache:
        model._ar_cache[key] = generate(model, Autoregressive(None, bundle(model)), prompt, max_new).output_ids
    return model._ar_cache[key]


@pytest.mark.parametrize("nwg", [(5, 7, 7), (3, 2, 1), (4, 5, 3)], ids=lambda p: "-".join(map(str, p)))
def test_equal_ar_tiny(model, nwg):
    n, w, g = nwg
    method = lookahead(model, level=n, window=w, guess=g)
    steps = []
    for prompt in PROMPTS:
        ref = ar(model, prompt, 60)
        out = generate(model, method, prompt, 60)
        assert out.output_ids == ref
        assert sum(out.accept_lengths) == len(out.output_ids) == 60
        assert max(out.accept_lengths) <= n  # N-1 drafts + the bonus token
        steps += out.accept_lengths
    assert max(steps) > 1


@pytest.mark.parametrize("max_new", [1, 2, 7])
def test_limit_and_eos_tiny(model, max_new):
    prompt = PROMPTS[3]
    ref = ar(model, prompt, 40)
    out = generate(model, lookahead(model), prompt, max_new)
    assert out.output_ids == ref[:max_new] and sum(out.accept_lengths) == max_new
    k = next(i for i in range(5, 40) if ref[i] not in ref[:i])  # first occurrence of ref[k] is at k
    out = generate(model, lookahead(model), prompt, 40, eos=ref[k])
    assert out.output_ids == ref[: k + 1] and sum(out.accept_lengths) == k + 1

# The real embedded model: tests/test_golden_runs.py (lookahead's outputs, accept lengths and losslessness).
