"""Ouroboros on the real embedded model: token-identical to greedy AR, with the pool's n-grams accepted at the
draft (lookahead) and behind the draft at the target; a warm pool carries over prompts, a cold one does not."""

from __future__ import annotations

import pytest

from tests.conftest import assert_lossless, compose_cfg, run_method, with_draft

pytestmark = pytest.mark.model


# One prompt with the untrained cut in `make test` (32 tokens, many rejections); three with the self draft slow.
@pytest.mark.parametrize("draft,n", [("cut2", 1), pytest.param("self", 3, marks=pytest.mark.slow)])
def test_identical_to_greedy_ar(smollm, prompts, greedy, drafts, draft, n):
    gens = run_method(with_draft(smollm, drafts[draft]), prompts[:n], "method=ouroboros", "method.window=5",
                      "method.guess=5")
    mat = assert_lossless(gens, greedy[:n])
    if draft == "self":  # the target as its own draft: lookahead n-grams taken at the draft, guesses at the target
        calls = sum(sum(g.counters["draft_calls"]) for g in gens)
        drafted = sum(sum(g.counters["draft_tokens"]) for g in gens)
        assert calls < drafted and mat > 3.0
        assert sum(sum(g.counters["target_extra"]) for g in gens) > 0


def test_gamma_12_config_composes():
    cfg = compose_cfg("method=ouroboros_g12").method
    assert cfg.name == "ouroboros_g12" and cfg.gamma == 12 and cfg.guess == 15



def test_extra_ngrams_key_each_remaining_draft_token():
    """add_extra_ngram after a rejection: each remaining draft token keys the target's choice after it, continued
    while the draft's next token is the target's choice; shorter than level - 1 is not kept. (The harness used to
    key one n-gram by the target's correction before the rejected token: predictions made after another token.)"""
    from methods.ouroboros import extra_ngrams

    # draft 5 7 8 3 (5 rejected), the target's choice after each: 7 8 9 1
    assert extra_ngrams([5, 7, 8, 3], [7, 8, 9, 1], 2) == [(5, (7, 8)), (7, (8, 9))]  # 8 -> 9, then 3 != 9
    assert extra_ngrams([5, 7, 6, 3, 4], [7, 8, 9, 1, 2], 2) == [(5, (7, 8))]
    assert extra_ngrams([5, 7, 8, 3], [7, 8, 9, 1], 3) == [(5, (7, 8, 9))]
    assert extra_ngrams([5], [7], 2) == []
