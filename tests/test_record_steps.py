"""run.record_steps: draft-model proposers keep each step's draft tokens, draft probabilities and accepted flags
(counters step_*) without changing the output; off, none of it is kept and the counters' totals skip them."""

from __future__ import annotations

import pytest

from bench.metrics import counter_totals
from tests.conftest import compose_cfg, with_draft

pytestmark = pytest.mark.model

# sd's case in `make test` (the shared draft-model path records the steps); dyspec's tree and holistic's in
# `make test-slow`.
CASES = [("method=sd", "method.draft_length=4"),
         pytest.param(("method=dyspec", "method.budget=8"), marks=pytest.mark.slow),
         pytest.param(("method=holistic", "method.reuse_draft=false", "method.reuse_target=false",
                       "method.precut=false", "method.draft_length=4"), marks=pytest.mark.slow)]


def generate(bundle, prompts, overrides, record: bool):
    from bench.core.engine import Engine
    from bench.core.timing import PhaseTimer
    from methods import build_method

    method = build_method(compose_cfg(*overrides).method, bundle)
    method.record_steps = record
    engine = Engine(bundle.model, bundle.eos_token_ids, bundle.max_context, temperature=0.0)
    return [method.generate(engine, p, 16, PhaseTimer()) for p in prompts]


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: o[0].split("=")[1])
def test_record_steps(smollm, prompts, overrides):
    bundle = with_draft(smollm, smollm.model)  # the target as its own draft: long acceptances
    off, on = generate(bundle, prompts[:1], overrides, False)[0], generate(bundle, prompts[:1], overrides, True)[0]
    assert on.output_ids == off.output_ids and on.accept_lengths == off.accept_lengths
    assert not any(k.startswith("step_") for k in off.counters)
    c = on.counters
    steps = len(on.accept_lengths) - 1  # the prefill's token is not a verification step
    assert all(len(c[k]) == steps for k in ("step_tokens", "step_parents", "step_conf", "step_accepted"))
    for i, (tokens, parents, conf, acc, n) in enumerate(zip(c["step_tokens"], c["step_parents"], c["step_conf"],
                                                          c["step_accepted"], on.accept_lengths[1:])):
        assert len(tokens) == len(parents) == len(conf) == len(acc) > 0
        assert all(-1 <= p < i for i, p in enumerate(parents))
        assert all(0 < x <= 1 for x in conf if x is not None)
        # a step commits its accepted drafts and the bonus token; the last one may be cut by the token limit
        assert sum(acc) + 1 == n if i < steps - 1 else n <= sum(acc) + 1
    assert sum(sum(a) for a in c["step_accepted"]) > 0
    assert "step_tokens" not in counter_totals([{"counters": c}])
    # Every step's draft forwards by size (bench.cost.replay), the first catching up the prompt and its first token.
    sizes = off.counters["draft_sizes"]
    assert [len(s) for s in sizes] == off.counters["draft_calls"] and sizes[0][0] == len(prompts[0]) + 1
    assert all(s[0] == n for s, n in zip(sizes[1:], off.accept_lengths[1:]))  # then what the step before committed
