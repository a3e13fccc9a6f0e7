"""Draft-model methods on the real embedded model: token-identical to greedy AR at temperature 0, and sound
bookkeeping when sampling. Drafts are built in-process (bench.draft_model): an untrained 2-layer cut of the
target (many rejections) and the target itself as its own draft (long acceptances, deep KV compaction).
Losslessness does not depend on draft quality, so neither needs `make draft`."""

from __future__ import annotations

import dataclasses

import pytest

from bench.core.engine import Engine
from bench.core.timing import PhaseTimer
from bench.models.drafts import init_draft_from_target
from methods import build_method
from tests.conftest import compose_cfg
from tests.test_real_model import MAX_NEW, prompts  # noqa: F401  (fixture)

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def ar_outputs(smollm, prompts):  # noqa: F811
    method = build_method(compose_cfg("method=ar").method, smollm)
    engine = Engine(smollm.model, smollm.eos_token_ids, smollm.max_context)
    return [method.generate(engine, p, MAX_NEW, PhaseTimer()).output_ids for p in prompts]


@pytest.fixture(scope="module")
def drafts(smollm):
    return {"cut2": init_draft_from_target(smollm.model, 2), "self": smollm.model}


def with_draft(bundle, draft):
    copy = dataclasses.replace(bundle)
    copy.load_draft = lambda: draft
    return copy


def run(bundle, prompts, overrides, temperature=0.0, n_new=MAX_NEW, seed=0):  # noqa: F811
    method = build_method(compose_cfg(*overrides).method, bundle)
    engine = Engine(bundle.model, bundle.eos_token_ids, bundle.max_context, temperature=temperature)
    gens = []
    for i, p in enumerate(prompts):
        engine.reseed(seed + i)
        gens.append(method.generate(engine, p, n_new, PhaseTimer()))
    return gens


SEQUOIA = ("method=sequoia", "method.calibration.dataset=humaneval", "method.calibration.limit=2",
           "method.calibration.tokens=64", "method.size=16")
CASES = [
    ("cut2", ("method=sd",)),
    ("self", ("method=sd", "method.draft_length=6")),
    ("cut2", ("method=specinfer", "method.branches=4", "method.depth=4")),
    ("cut2", SEQUOIA),
    ("cut2", ("method=dyspec", "method.budget=24")),
    ("self", ("method=dyspec", "method.budget=24")),
    ("cut2", ("method=dyspec", "method.algorithm=threshold", "method.budget=24")),
]


@pytest.mark.parametrize("draft,overrides", CASES, ids=lambda c: c if isinstance(c, str) else
                         "+".join(x.split("=", 1)[1] for x in c[:3]))
def test_identical_to_greedy_ar(smollm, prompts, ar_outputs, drafts, draft, overrides, tmp_path):  # noqa: F811
    if overrides[0] == "method=sequoia":
        overrides = (*overrides, f"method.calibration.cache_dir={tmp_path}")
    gens = run(with_draft(smollm, drafts[draft]), prompts, overrides)
    for i, (gen, ref) in enumerate(zip(gens, ar_outputs)):
        assert gen.output_ids == ref, f"prompt {i} diverges"
        assert sum(gen.accept_lengths) == len(gen.output_ids)
    steps = [a for g in gens for a in g.accept_lengths]
    mat = sum(steps) / len(steps)
    # A method that never accepted a draft would pass the identity check trivially.
    assert mat > (2.5 if draft == "self" else 1.0), mat
    assert {"draft_forward", "tree"} <= set(gens[0].phase_times)


@pytest.mark.parametrize("overrides", [("method=sd",), ("method=specinfer", "method.branches=4", "method.depth=3"),
                                       ("method=dyspec", "method.budget=16"),
                                       ("method=dyspec", "method.algorithm=threshold", "method.budget=16")],
                         ids=lambda o: "+".join(x.split("=", 1)[1] for x in o))
def test_sampling_runs_and_is_reproducible(smollm, prompts, drafts, overrides):  # noqa: F811
    bundle = with_draft(smollm, drafts["self"])
    a = run(bundle, prompts[:2], overrides, temperature=0.6, n_new=24)
    b = run(bundle, prompts[:2], overrides, temperature=0.6, n_new=24)
    for ga, gb in zip(a, b):
        assert ga.output_ids == gb.output_ids  # same seed, same sample
        assert sum(ga.accept_lengths) == len(ga.output_ids) and 0 < len(ga.output_ids) <= 24
        assert "sampling" in ga.phase_times
    # With the target as its own draft, p == q: every draft is accepted (up to float noise).
    steps = [s for g in a for s in g.accept_lengths]
    assert sum(steps) / len(steps) > 2.0
