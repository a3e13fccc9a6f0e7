"""Losslessness on the real embedded model (SmolLM2-135M, fp32): token-identical to HF greedy `generate`.

Prompts, reference and helpers: tests/conftest.py. The default configurations of pld and token_recycling (and
of lookahead, rest, sd, dyspec) are checked on the same model by tests/test_golden_runs.py, output and accept
lengths; here are our AR, the variants, and HF's own PLD.
"""

from __future__ import annotations

import pytest

from tests.conftest import MAX_NEW, assert_lossless, run_method

pytestmark = pytest.mark.model


@pytest.mark.parametrize("overrides", [
    ("method=ar",),
    ("method=pld", "method.max_ngram=2", "method.full_continuation=false"),
    ("method=token_recycling", "method.update_strategy=last", "method.start=cold"),
    ("method=hf_pld",),
], ids=lambda o: "+".join(x.split("=", 1)[1] for x in o))
def test_identical_to_hf_generate(smollm, prompts, greedy, overrides):
    # Token Recycling verifies its 81-token tree every step (~3x an AR step here): 3 prompts, the matrix still
    # reset (cold) before the 2nd and 3rd; its default configuration is on tests/test_golden_runs.py.
    n = 3 if overrides[0] == "method=token_recycling" else len(prompts)
    mat = assert_lossless(run_method(smollm, prompts[:n], *overrides), greedy[:n])
    assert all(len(r) == MAX_NEW or r[-1] in smollm.eos_token_ids for r in greedy)
    if overrides[0] != "method=ar":
        assert mat > 1.2  # a drafting method that never accepted a draft would pass the identity check trivially
