"""Post-use & Pre-cut (`holistic`) on the real embedded model: token-identical to greedy AR in every switch
combination, also when cached phrases are accepted at the draft and at the target (a cache filled with the
reference text forces hits) and when every cached phrase is wrong; the step counters add up."""

from __future__ import annotations

import itertools

import pytest

from bench.core.engine import Engine
from bench.core.timing import PhaseTimer
from bench.metrics import counter_totals
from methods import build_method
from tests.conftest import MAX_NEW, assert_lossless, compose_cfg, run_method, with_draft

pytestmark = pytest.mark.model

SWITCHES = list(itertools.product([False, True], repeat=3))


def overrides(reuse_draft: bool, reuse_target: bool, precut: bool, *more: str) -> tuple[str, ...]:
    return ("method=holistic", f"method.reuse_draft={reuse_draft}", f"method.reuse_target={reuse_target}",
            f"method.precut={precut}", "method.controller.warmup_steps=8", *more)


# Every switch on in `make test`; the other seven combinations in `make test-slow`.
@pytest.mark.parametrize("switches", [s if all(s) else pytest.param(s, marks=pytest.mark.slow) for s in SWITCHES],
                         ids=lambda s: "".join("DTP"[i] if on else "-" for i, on in enumerate(s)))
def test_every_switch_combination_is_lossless(smollm, prompts, greedy, drafts, switches):
    # The untrained 2-layer cut: many rejections, phrases learned from the committed text and Eq. 7 runs. 2 prompts
    # x 32 tokens: dozens of verifications (the controller's 8 of warm-up, then its own decisions), the second
    # prompt on the cache the first filled; without reuse nothing carries over, so 1 prompt.
    n = 2 if any(switches[:2]) else 1
    gens = run_method(with_draft(smollm, drafts["cut2"]), prompts[:n], *overrides(*switches, "method.draft_length=4"),
                      max_new=32)
    assert_lossless(gens, [g[:32] for g in greedy[:n]])
    for g in gens:
        c = g.counters
        assert len(c["draft_calls"]) == len(g.accept_lengths) - 1  # one entry per verification
        assert all(1 <= n <= 4 for n in c["draft_tokens"])
        if not switches[2]:  # without Pre-cut every draft runs to its length (the output limit aside)
            assert max(c["draft_tokens"]) == 4
        # Committed per step: the accepted drafts, the phrase tokens the target accepted, the bonus token
        # (fewer only where EOS or the length limit cut the step).
        for a, d, e in zip(g.accept_lengths[1:], c["accepted_draft"], c["target_extra"]):
            assert a <= d + e + 1
        if not switches[1]:
            assert sum(c["target_extra"]) == 0
        if switches[2]:
            assert {"controller", "cache"} <= set(g.phase_times) if any(switches[:2]) else "controller" in g.phase_times
        assert {"draft_forward", "rollback", "target_forward"} <= set(g.phase_times)  # Table 9's components


def build(bundle, *more):
    return build_method(compose_cfg(*more).method, bundle)


def decode(method, bundle, prompts, max_new=MAX_NEW):
    engine = Engine(bundle.model, bundle.eos_token_ids, bundle.max_context)
    return [method.generate(engine, p, max_new, PhaseTimer()) for p in prompts]


@pytest.mark.slow  # behaviour beyond the lossless case kept in make test
def test_cached_phrases_accepted_at_draft_and_target(smollm, prompts, greedy, drafts):
    # The target as its own draft agrees with a cache filled with the reference outputs: phrases must be taken at
    # the draft (several tokens per draft forward) and extend the output at the target.
    bundle = with_draft(smollm, drafts["self"])
    method = build(bundle, *overrides(True, True, False, "method.draft_length=4"))
    for p, ref in zip(prompts[:3], greedy[:3]):
        method.cache_tokens.push_text([p[-1], *ref], 0)
    gens = decode(method, bundle, prompts[:3])
    assert_lossless(gens, greedy[:3])
    total = counter_totals([{"counters": g.counters} for g in gens])
    assert total["draft_hits"] > 0 and total["draft_reused"] > total["draft_hits"]
    assert total["target_hits"] > 0 and total["target_extra"] > 0
    # Reuse at the draft saves draft forwards: fewer calls than draft tokens.
    assert total["draft_calls"] < total["draft_tokens"]


@pytest.mark.slow  # behaviour beyond the lossless case kept in make test
def test_wrong_phrases_never_change_the_output(smollm, prompts, greedy, drafts):
    # Every key used by the outputs holds phrases that continue wrongly (the reference shifted by one token).
    bundle = with_draft(smollm, drafts["self"])
    method = build(bundle, *overrides(True, True, True, "method.draft_length=4"))
    for ref in greedy[:3]:
        for i, tok in enumerate(ref[:-3]):
            method.cache_tokens.push(tok, [ref[i + 2], ref[i + 3], 7])
    gens = decode(method, bundle, prompts[:3])
    assert_lossless(gens, greedy[:3])


@pytest.mark.slow  # the token cache across prompts (tests/test_holistic_parts.py tests it alone)
def test_warm_cache_carries_over_prompts_cold_does_not(smollm, prompts, drafts):
    bundle = with_draft(smollm, drafts["cut2"])
    # Drafts of 4 (not the default 24: the untrained cut's long drafts cost ~5x and the carry-over does not care)
    warm = build(bundle, *overrides(True, True, False, "method.draft_length=4"))
    cold = build(bundle, *overrides(True, True, False, "method.draft_length=4", "method.cache.warm=false"))
    decode(warm, bundle, prompts[:1], 24)
    decode(cold, bundle, prompts[:1], 24)
    n = len(warm.cache_tokens)
    assert n > 0 and len(cold.cache_tokens) > 0
    warm.start(prompts[1])  # the next prompt-turn
    cold.start(prompts[1])
    assert len(warm.cache_tokens) == n and len(cold.cache_tokens) == 0
    assert warm.state_dict()["cache"]["keys"] and "cache" not in cold.state_dict()


def test_sampling_is_refused(smollm, prompts, drafts):
    with pytest.raises(Exception, match="greedily"):
        run_method(with_draft(smollm, drafts["cut2"]), prompts[:1], "method=holistic", temperature=0.6, max_new=4)


@pytest.mark.slow  # the controller's freeze (tests/test_holistic_parts.py tests Q-learning alone)
def test_frozen_controller_stops_learning_after_warm_up(smollm, prompts, drafts):
    """Figure 4's Q_init: the Q-table of the warm-up, then no more updates (and the run records the switch)."""
    bundle = with_draft(smollm, drafts["cut2"])
    method = build(bundle, *overrides(False, False, True, "method.controller.warmup_steps=2",
                                      "method.controller.freeze_after_warmup=true", "method.draft_length=4"))
    assert method.describe()["controller"]["freeze_after_warmup"] is True
    decode(method, bundle, prompts[:1], 24)
    ctl = method.controller
    assert ctl.steps > 2 and ctl.q  # learned during the first 2 verifications, counted every one after
    frozen = {s: list(v) for s, v in ctl.q.items()}
    decode(method, bundle, prompts[1:2], 24)
    assert {s: v for s, v in ctl.q.items() if s in frozen} == frozen


def test_the_credit_rule_reaches_the_controller_and_the_record(smollm, drafts):
    bundle = with_draft(smollm, drafts["cut2"])
    method = build(bundle, *overrides(False, False, True, "method.controller.credit=direct"))
    assert method.controller.credit == "direct" and method.describe()["controller"]["credit"] == "direct"
    assert build(bundle, *overrides(False, False, True)).controller.credit == "discounted"
