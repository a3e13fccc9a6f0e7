"""Outputs and accept lengths of every engine family on the real embedded model, against a committed record.

tests/fixtures/golden_runs.json was written by the code before the layout change (3 HumanEval prompts x 48
tokens, fp32 CPU). A refactor that changes what any method drafts or accepts fails here even when outputs
stay lossless (the lossless tests cannot see a lost draft). It is also the real-model losslessness test of these
default configurations: AR's record is checked against HF greedy `generate`, every method against AR's record.
Draft-model methods use an untrained 2-layer cut of the target and REST the in-process store of
tests/conftest.py, so neither `make draft` nor `make datastore` is needed.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.models.drafts import init_draft_from_target
from tests.conftest import rest_overrides, run_method

pytestmark = pytest.mark.model
GOLDEN = json.loads((Path(__file__).parent / "fixtures" / "golden_runs.json").read_text())
N, MAX_NEW = 3, 48


@pytest.fixture(scope="module")
def with_cut_draft(smollm):
    draft = init_draft_from_target(smollm.model, 2)
    bundle = dataclasses.replace(smollm)
    bundle.load_draft = lambda: draft
    return bundle


CASES = {
    "ar": ("method=ar",), "pld": ("method=pld",), "token_recycling": ("method=token_recycling",),
    "lookahead": ("method=lookahead",), "rest": ("method=rest",),  # on the store of tests/conftest.py
    "sd": ("method=sd",), "dyspec": ("method=dyspec", "method.budget=24"),
}


def test_ar_record_is_hf_greedy(greedy):
    for i, want in enumerate(GOLDEN["ar"]):
        assert want["output_ids"] == greedy[i][:MAX_NEW], f"prompt {i}"


@pytest.mark.parametrize("name", list(CASES))
def test_same_outputs_and_accept_lengths_as_before(name, smollm, with_cut_draft, prompts, rest_store):
    overrides = rest_overrides(rest_store) if name == "rest" else CASES[name]
    bundle = with_cut_draft if name in ("sd", "dyspec") else smollm
    got = run_method(bundle, prompts[:N], *overrides, max_new=MAX_NEW)  # in order: TR keeps its matrix
    for i, (gen, want) in enumerate(zip(got, GOLDEN[name], strict=True)):
        assert gen.output_ids == want["output_ids"], f"{name}: prompt {i} output changed"
        assert gen.accept_lengths == want["accept_lengths"], f"{name}: prompt {i} accept lengths changed"
    assert all(g.output_ids == a["output_ids"] for g, a in zip(got, GOLDEN["ar"]))  # and lossless
