"""hf_assisted: `generate(assistant_model=draft)` is greedy-lossless, its steps are target forwards, and the
settings it records are the ones transformers used. Tiny random Llama; then the real embedded model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from bench.core.engine import Engine
from bench.core.timing import PhaseTimer
from bench.models.drafts import init_draft_from_target
from bench.paths import PROJECT
from methods.ar import Autoregressive
from methods.hf import ASSISTANT_KEYS, HFAssisted, StepRecorder, assistant_defaults
from tests.conftest import MAX_NEW, assert_lossless, compose_cfg, tiny_llama

V = 100
NO_EOS = 10_000
_g = torch.Generator().manual_seed(3)
PROMPTS = [torch.randint(0, V, (12,), generator=_g).tolist() for _ in range(2)]
PROMPTS.append([5, 6, 7, 8, 9, 10] * 3 + [5, 6])
N = 24


@pytest.fixture(scope="module")
def target():
    return tiny_llama(V, "sdpa", 512)


def bundle(model, draft):
    return SimpleNamespace(device="cpu", vocab_size=V, model=model, eos_token_ids=[NO_EOS], pad_token_id=0,
                           load_draft=lambda: draft, draft_cfg=OmegaConf.create({"id": "test-draft"}))


def assisted(model, draft, **settings):
    cfg = OmegaConf.load(PROJECT / "conf" / "method" / "hf_assisted.yaml")
    for k, v in settings.items():
        cfg[k] = v
    return HFAssisted(cfg, bundle(model, draft))


_AR: dict = {}


def ar(model, prompt, n):
    key = (id(model), tuple(prompt), n)
    if key not in _AR:
        engine = Engine(model, [NO_EOS], max_context=512)
        _AR[key] = engine.generate(Autoregressive(None, bundle(model, None)), prompt, n, PhaseTimer()).output_ids
    return _AR[key]


class ForwardCounter:
    """Counts the target's forward calls through a public torch hook."""

    def __init__(self, model):
        self.calls = 0
        self.handle = model.register_forward_hook(self)

    def __call__(self, module, args, output):
        self.calls += 1


@pytest.mark.parametrize("layers", [1, 2])
def test_lossless_and_one_step_per_target_forward(target, layers):
    """1 layer: a draft that is often wrong; 2 layers: a full copy of the target, so drafts are accepted."""
    draft = init_draft_from_target(target, layers)
    method = assisted(target, draft)
    steps = []
    for prompt in PROMPTS:
        counter = ForwardCounter(target)
        try:
            out = method.generate(None, prompt, N, PhaseTimer())
        finally:
            counter.handle.remove()
        assert out.output_ids == ar(target, prompt, N)
        assert sum(out.accept_lengths) == len(out.output_ids) == N
        assert len(out.accept_lengths) == counter.calls  # one recorded step per target forward
        steps += out.accept_lengths
    mat = sum(steps) / len(steps)
    if layers == 2:
        # The draft is the target, so every draft token is accepted; but the random model is never 40% sure,
        # so transformers' default confidence threshold (0.4) stops each draft after its first token.
        assert mat >= 2
    assert set(out.phase_times) == {"generate"}


def test_candidate_checks_are_not_steps():
    """transformers <= 5.17 (the GPU images') calls the stopping criteria on an assisted step's candidates before
    the target's forward, then on the committed tokens after it (5.24 only after): either way, one step a forward."""
    forwards = [0]
    ids = [torch.zeros(1, n, dtype=torch.long) for n in range(40)]
    # per step: the tokens with its candidates, then the tokens committed (prompt of 10; the last step drafts none)
    steps = [(15, 12), (22, 13), (13, 14)]
    for checks_candidates in (True, False):
        recorder = StepRecorder(lambda: forwards[0])
        for candidates, committed in steps:
            if checks_candidates:
                recorder(ids[candidates], None)
            forwards[0] += 1
            recorder(ids[committed], None)
        assert recorder.lengths == [12, 13, 14]
    plain = StepRecorder()  # no forward count (plain generate): every call is a step
    plain(ids[11], None), plain(ids[12], None)
    assert plain.lengths == [11, 12]


def test_settings_reach_the_assistant(target):
    """num_assistant_tokens is read from the draft's generation_config: 3 drafts + 1 bonus at most per step."""
    draft = init_draft_from_target(target, 2)  # always right: a step is as long as the draft allows
    method = assisted(target, draft, num_assistant_tokens=3, num_assistant_tokens_schedule="constant",
                      assistant_confidence_threshold=0.0)
    out = method.generate(None, PROMPTS[0], N, PhaseTimer())
    assert out.output_ids == ar(target, PROMPTS[0], N)
    assert max(out.accept_lengths) == 4 and out.accept_lengths[1:-1] == [4] * (len(out.accept_lengths) - 2)
    info = method.describe()
    assert (info["num_assistant_tokens"], info["num_assistant_tokens_schedule"],
            info["assistant_confidence_threshold"]) == (3, "constant", 0.0)
    assert info["configured"]["num_assistant_tokens"] == 3 and info["transformers"]
    assert info["confidence_threshold_adapts"] is False


def test_null_settings_record_transformers_defaults(target):
    method = assisted(target, init_draft_from_target(target, 1))
    method.generate(None, PROMPTS[1], 10, PhaseTimer())
    info = method.describe()
    defaults = assistant_defaults()
    assert set(defaults) == set(ASSISTANT_KEYS)  # this transformers exposes all three
    assert {k: info[k] for k in ASSISTANT_KEYS} == defaults
    assert info["configured"] == dict.fromkeys(ASSISTANT_KEYS)
    assert info["draft_layers"] == 1


def test_heuristic_schedule_carries_over_and_is_recorded(target):
    draft = init_draft_from_target(target, 2)
    method = assisted(target, draft, num_assistant_tokens=2, num_assistant_tokens_schedule="heuristic",
                      assistant_confidence_threshold=0.0)
    gen = method.generate(None, PROMPTS[0], N, PhaseTimer())
    # Every draft is accepted, so transformers grew the draft length (+2 per step) and wrote it back.
    grown = method.describe()["num_assistant_tokens"]
    assert grown > 2 and gen.counters == {"assistant_tokens_start": [2], "assistant_tokens_end": [grown]}
    assert method.generate(None, PROMPTS[1], 4, PhaseTimer()).counters["assistant_tokens_start"] == [grown]


def test_sampling_is_reproducible_per_engine_seed(target):
    method = assisted(target, init_draft_from_target(target, 1))

    def run(seed):
        engine = SimpleNamespace(temperature=0.8, generator=torch.Generator().manual_seed(seed))
        return method.generate(engine, PROMPTS[0], N, PhaseTimer())

    a, b, c = run(0), run(0), run(1)
    assert a.output_ids == b.output_ids and len(a.output_ids) == N
    assert sum(a.accept_lengths) == N
    assert a.output_ids != c.output_ids  # at T=0.8 over 24 tokens of a random model, different seeds diverge


# -- the real embedded model ------------------------------------------------------------------------------


@pytest.mark.model
@pytest.mark.slow  # transformers' own loop; our wrapper's settings and losslessness stay in make test (tiny target)
def test_real_model_identical_to_greedy_ar(smollm, prompts, greedy, drafts):
    """An untrained 2-layer draft (first 2 target layers, tests/conftest.py): output equal to greedy AR, MAT from
    the steps."""
    from dataclasses import replace

    from methods import build_method

    with_draft = replace(smollm, draft=drafts["cut2"])  # the session bundle keeps its own (unbuilt) draft
    method = build_method(compose_cfg("method=hf_assisted").method, with_draft)
    engine = Engine(smollm.model, smollm.eos_token_ids, smollm.max_context)
    gens = [method.generate(engine, p, MAX_NEW, PhaseTimer()) for p in prompts[:3]]
    assert assert_lossless(gens, greedy[:3]) > 1.0
