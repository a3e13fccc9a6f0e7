"""Outputs and accept lengths of every engine family on the real embedded model, against a committed record.

tests/fixtures/golden_runs.json was written by the code before the layout change (3 HumanEval prompts x 48
tokens, fp32 CPU). A refactor that changes what any method drafts or accepts fails here even when outputs
stay lossless (the lossless tests cannot see a lost draft). Draft-model methods use an untrained 2-layer cut
of the target and REST a store built in-process, so neither `make draft` nor `make datastore` is needed.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.core.engine import Engine
from bench.core.timing import PhaseTimer
from bench.models.chat import prompt_ids
from bench.models.drafts import init_draft_from_target
from data.corpus import load_corpus
from methods import build_method
from methods.rest.datastore import build, store_prefix
from tests.conftest import compose_cfg
from tests.test_rest import CORPUS

pytestmark = pytest.mark.model
GOLDEN = json.loads((Path(__file__).parent / "fixtures" / "golden_runs.json").read_text())
N, MAX_NEW = 3, 48


@pytest.fixture(scope="module")
def prompts(smollm):
    from data.loaders import load_items

    items = load_items(compose_cfg("dataset=humaneval").dataset, None, "/nonexistent")[:N]
    return [prompt_ids(smollm.tokenizer, "tokenizer", [], it["turns"][0]) for it in items]


@pytest.fixture(scope="module")
def store_dir(smollm, tmp_path_factory):
    d = tmp_path_factory.mktemp("golden-store")
    build(load_corpus(CORPUS), smollm.tokenizer, None, "/nonexistent", "smollm2-135m").save(
        store_prefix(d, "smollm2-135m", CORPUS["name"]))
    return d


@pytest.fixture(scope="module")
def with_cut_draft(smollm):
    draft = init_draft_from_target(smollm.model, 2)
    bundle = dataclasses.replace(smollm)
    bundle.load_draft = lambda: draft
    return bundle


CASES = {
    "ar": ("method=ar",), "pld": ("method=pld",), "token_recycling": ("method=token_recycling",),
    "lookahead": ("method=lookahead",), "rest": ("method=rest",),
    "sd": ("method=sd",), "dyspec": ("method=dyspec", "method.budget=24"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_same_outputs_and_accept_lengths_as_before(name, smollm, with_cut_draft, prompts, store_dir):
    overrides = CASES[name]
    if name == "rest":
        overrides += (f"method.store={CORPUS['name']}", f"method.store_dir={store_dir}")
    bundle = with_cut_draft if name in ("sd", "dyspec") else smollm
    method = build_method(compose_cfg(*overrides).method, bundle)
    engine = Engine(bundle.model, bundle.eos_token_ids, bundle.max_context)
    got = [method.generate(engine, p, MAX_NEW, PhaseTimer()) for p in prompts]  # in order: TR keeps its matrix
    for i, (gen, want) in enumerate(zip(got, GOLDEN[name])):
        assert gen.output_ids == want["output_ids"], f"{name}: prompt {i} output changed"
        assert gen.accept_lengths == want["accept_lengths"], f"{name}: prompt {i} accept lengths changed"
    assert all(g.output_ids == a["output_ids"] for g, a in zip(got, GOLDEN["ar"]))  # and lossless
