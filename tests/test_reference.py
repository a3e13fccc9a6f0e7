"""The greedy reference of the losslessness check is always batch-1 greedy AR through our engine: a batched AR run
made first does not become it and is itself checked against it; the reference file is keyed by everything that
can change greedy tokens."""

from __future__ import annotations

import json

import pytest

from bench.core.timing import PhaseTimer
from bench.run.runner import Runner, reference_key
from methods.ar import Autoregressive
from tests.conftest import compose_cfg

pytestmark = pytest.mark.model


def runner_for(tmp_path, *overrides):
    cfg = compose_cfg("model=smollm2-135m", "dataset=humaneval", "run.limit=2", "run.max_new_tokens=8",
                      "run.warmup=0", "logger=none", f"paths.results={tmp_path}", *overrides)
    return Runner(cfg)


def stored(runner) -> list[dict]:
    return [json.loads(line) for line in runner.references.path.read_text().splitlines()]


def test_batched_ar_made_first_is_checked_and_does_not_become_the_reference(smollm, tmp_path):
    runner = runner_for(tmp_path, "method=ar", "run.batch_size=2")
    assert not runner.is_reference
    records = runner.run()
    batch1 = [runner.engine.generate(Autoregressive(None, smollm), runner.encode([], it["turns"][0]), 8,
                                     PhaseTimer(sync=False)).output_ids for it in runner.items]
    assert [r["output_ids"] for r in records] == batch1  # fp32: batched rows equal batch-1 AR
    assert all(r["lossless"] == {"equal": True, "first_divergence": None, "reference": "ar", "grade": "identical",
                                 "ref_margin": None, "method_gap": None, "tolerance": None, "dtype": "float32"}
               for r in records)
    assert sorted(e["output_ids"] for e in stored(runner)) == sorted(batch1)

    # A batched row that differs from batch-1 AR is reported as a first divergence, and the reference keeps AR's.
    ids = runner.encode([], runner.items[0]["turns"][0])
    wrong = batch1[0][:3] + [batch1[0][3] + 1] + batch1[0][4:]
    got = runner.reference(ids, wrong)
    assert (got["equal"], got["first_divergence"], got["reference"], got["grade"]) == (False, 3, "ar", "mismatch")
    assert sorted(e["output_ids"] for e in stored(runner)) == sorted(batch1)


def test_batch1_ar_writes_the_reference_only_when_there_is_none(smollm, tmp_path):
    runner = runner_for(tmp_path, "method=ar")
    assert runner.is_reference
    ids = runner.encode([], runner.items[0]["turns"][0])
    first = runner.reference(ids, [1, 2, 3])
    assert first["reference"] == "self" and first["equal"]
    # Once it exists, a later batch-1 AR output is compared with it, not trusted.
    got = runner.reference(ids, [1, 2, 4])
    assert (got["equal"], got["first_divergence"], got["reference"], got["grade"]) == (False, 2, "ar", "mismatch")
    assert [e["output_ids"] for e in stored(runner)] == [[1, 2, 3]]


def test_reference_key_names_what_changes_greedy_tokens(smollm):
    key = reference_key(smollm)
    attn = smollm.model.config._attn_implementation
    for part in (smollm.name, "float32", "cpu", attn, smollm.linear_backend, smollm.weights):
        assert part in key, (part, key)
    assert "/" not in key and " " not in key and smollm.weights
