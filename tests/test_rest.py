"""REST on the real embedded model (SmolLM2-135M, fp32): token-identical to HF greedy, drafts accepted.

The store (tests/conftest.py `rest_store`) is built in-process from HumanEval without the tasks used as prompts.
The paper's settings are checked by tests/test_golden_runs.py (outputs, accept lengths, losslessness); here a
small tree with short spans, the recorded settings and the store's errors.
"""

from __future__ import annotations

import pytest

from bench.errors import HarnessError
from methods import build_method
from tests.conftest import REST_CORPUS, assert_lossless, compose_cfg, rest_overrides, run_method

pytestmark = pytest.mark.model


def rest(smollm, store_dir):
    return build_method(compose_cfg(*rest_overrides(store_dir)).method, smollm)


@pytest.mark.slow  # REST's real-model cases in make test: tests/test_batch.py and tests/test_golden_runs.py
def test_small_tree_identical_to_hf_generate(smollm, rest_store, prompts, greedy):
    gens = run_method(smollm, prompts[:3], *rest_overrides(rest_store), "method.num_draft=8", "method.max_span=4")
    assert assert_lossless(gens, greedy[:3]) > 1.0  # drafts were accepted, so the identity check is not trivial


def test_describe_records_the_store(smollm, rest_store):
    d = rest(smollm, rest_store).describe()
    assert d["datastore"] == REST_CORPUS["name"] and d["backend"] == "numpy-suffix-array"
    assert d["num_draft"] == 64 and d["max_span"] == 16 and d["datastore_tokens"] > 0
    assert d["datastore_build_seconds"] >= 0


def test_missing_store_says_make_datastore(smollm, tmp_path):
    with pytest.raises(HarnessError, match="make datastore MODEL=smollm2-135m"):
        rest(smollm, tmp_path)


def test_store_of_another_tokenizer_is_refused(smollm, rest_store, tmp_path):
    import json
    import shutil

    for f in rest_store.iterdir():
        shutil.copy(f, tmp_path / f.name)
    sidecar = tmp_path / f"smollm2-135m-{REST_CORPUS['name']}.json"
    meta = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**meta, "tokenizer_fingerprint": "0" * 16}))
    with pytest.raises(HarnessError, match="another tokenizer"):
        rest(smollm, tmp_path)


@pytest.mark.slow  # scripts/rest_replay.py end to end: a real run, then its replay along greedy AR
def test_replay_gives_the_mat_of_a_real_run(smollm, rest_store, prompts, capsys):
    """scripts/rest_replay.py (issue 17): replaying our retriever along greedy AR gives the MAT the engine's run gets."""
    from scripts.rest_replay import main

    store = [o for o in rest_overrides(rest_store) if o.startswith("method.")]
    main(["dataset=humaneval", "run.limit=2", "run.max_new_tokens=32", *store])
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("ours"))
    gens = run_method(smollm, prompts[:2], *rest_overrides(rest_store), max_new=32)
    steps = sum(len(g.accept_lengths) for g in gens)
    tokens = sum(sum(g.accept_lengths) for g in gens)
    assert f"({tokens} tokens / {steps} steps, 2 prompts)" in line


def test_a_store_built_otherwise_than_its_config_is_named_and_an_empty_one_refused(smollm, rest_store, tmp_path,
                                                                                   capsys):
    """A store under a configured corpus's name but built from other settings (datastore.max_documents=500 for a
    quick test replaces the real store in place) was used silently: the run warns and records it; one of 0
    documents is refused."""
    import json
    import shutil

    for f in rest_store.iterdir():  # the test corpus's store, filed as code_offline's
        shutil.copy(f, tmp_path / f.name.replace(REST_CORPUS["name"], "code_offline"))
    method = build_method(compose_cfg(*rest_overrides(tmp_path), "method.store=code_offline").method, smollm)
    assert "sources" in method.describe()["datastore_settings_differ"]
    assert "warning: REST datastore 'code_offline' was built with other settings" in capsys.readouterr().err
    sidecar = tmp_path / "smollm2-135m-code_offline.json"
    sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "documents": 0}))
    with pytest.raises(HarnessError, match="holds no documents"):
        build_method(compose_cfg(*rest_overrides(tmp_path), "method.store=code_offline").method, smollm)
