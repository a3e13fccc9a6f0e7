"""Losslessness on the real embedded model (SmolLM2-135M, fp32): token-identical to HF greedy `generate`.

Prompts, reference and helpers: tests/conftest.py. Our AR and the default configurations of pld and
token_recycling (and of lookahead, rest, sd, dyspec) are checked on the same model by tests/test_golden_runs.py
(AR's record against HF greedy on every CPU linear backend; outputs and accept lengths); here are the variants and
HF's own PLD, on the first 3 prompts.
"""

from __future__ import annotations

import pytest

from tests.conftest import MAX_NEW, assert_lossless, run_method

pytestmark = pytest.mark.model


# HF's PLD in `make test`; the variants of our PLD and Token Recycling in `make test-slow` (their defaults are in
# tests/test_golden_runs.py).
@pytest.mark.parametrize("overrides", [
    pytest.param(("method=pld", "method.max_ngram=2", "method.full_continuation=false"), marks=pytest.mark.slow),
    pytest.param(("method=token_recycling", "method.update_strategy=last", "method.start=cold"),
                 marks=pytest.mark.slow),
    ("method=hf_pld",),
], ids=lambda o: "+".join(x.split("=", 1)[1] for x in o))
def test_identical_to_hf_generate(smollm, prompts, greedy, overrides):
    # 3 prompts: Token Recycling's matrix is reset (cold) before the 2nd and 3rd.
    n = 3
    mat = assert_lossless(run_method(smollm, prompts[:n], *overrides), greedy[:n])
    assert all(len(r) == MAX_NEW or r[-1] in smollm.eos_token_ids for r in greedy)
    assert mat > 1.2  # a drafting method that never accepted a draft would pass the identity check trivially
