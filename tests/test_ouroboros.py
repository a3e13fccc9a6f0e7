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
