"""The EAGLE head as the draft of the draft-model methods (model.draft.source=eagle, bench/models/eagle_draft.py).

On a tiny target: the adapter's logits for a drafted chain equal the head's own chain drafting through
methods/eagle/proposer.py (same feature/token pairing and positions), whether the chain's nodes are forwarded one
per call (sd, DySpec) or together in one call (Post-use & Pre-cut's phrases); a head trained on the target's
pairs is accepted by sd through the engine (the features reach the draft's cache). On the real model: sd, DySpec,
Sequoia, SpecInfer and Post-use & Pre-cut with the (untrained) head are token-identical to greedy AR.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from bench.core.engine import Engine
from bench.core.kv import cut
from bench.core.timing import PhaseTimer
from bench.errors import HarnessError
from bench.models.eagle import EagleHead
from bench.models.eagle_draft import EagleDraft
from methods import build_method
from tests.conftest import assert_lossless, compose_cfg, run_method, tiny_llama
from tests.test_eagle import per_token_target, train_head

V = 64


def tiny_head(target) -> EagleHead:
    torch.manual_seed(0)
    head = EagleHead(target).eval()
    with torch.no_grad():  # larger weights than the default init: logits that differ from position to position
        for p in head.parameters():
            p.normal_(0, 0.3)
    return head


def bundle_for(target, head):
    draft = EagleDraft(head, target, "eagle:tiny", "cpu", torch.float32)
    return SimpleNamespace(model=target, device=torch.device("cpu"), dtype=torch.float32, vocab_size=V, name="tiny",
                           eos_token_ids=[V + 5], max_context=512, load_eagle=lambda: head, load_draft=lambda: draft,
                           draft_cfg=None, tokenizer=None, pad_token_id=0)


def tree_mask(cached: int, visible: list[list[bool]]) -> torch.Tensor:
    """The additive mask the draft-model base builds: the committed prefix, then the tree columns given."""
    rows = torch.tensor(visible)
    tree = torch.zeros(rows.shape).masked_fill_(~rows, torch.finfo(torch.float32).min)
    return torch.cat([torch.zeros(len(visible), cached), tree], 1)[None, None]


@torch.no_grad()
def test_adapter_chain_equals_the_heads_own_drafting():
    target = tiny_llama(V)
    head = tiny_head(target)
    bundle = bundle_for(target, head)
    prompt = torch.randint(0, V, (7,), generator=torch.Generator().manual_seed(2))
    features = target.get_decoder()(input_ids=prompt[None]).last_hidden_state[0]
    seq = torch.cat([prompt, target(prompt[None]).logits[0, -1].argmax()[None]])  # the prefill's committed token
    n = len(seq)

    # methods/eagle/proposer.py: catch up on the prompt's (f_i, t_{i+1}), then a chain, one level per forward
    own = build_method(OmegaConf.merge(compose_cfg("method=eagle2").method, {"topk": 1}), bundle)
    own.start(prompt.tolist())
    own.observe_features(features)
    fhat = own.catch_up(seq, n)
    expected, chain = [head.logits(fhat)], []
    for depth in range(1, 4):
        chain.append(int(expected[-1].argmax()))
        # the node's parent is the previous level's entry: row depth - 1 of the tree's ancestor rows (0: the root)
        fhat = own.level(torch.tensor([chain[-1]]), fhat[None], depth, torch.tensor([depth - 1]))[0]
        expected.append(head.logits(fhat))

    # the adapter, called as DraftModelProposer calls a draft: catch-up, then one node per forward
    draft = bundle.load_draft()
    cache = draft.new_cache()
    cache.observe(features)
    got = [draft(input_ids=seq[None], position_ids=torch.arange(n)[None], past_key_values=cache,
                 logits_to_keep=1).logits[0, -1]]
    for depth, token in enumerate(chain, start=1):
        mask = tree_mask(n, [[True] * depth])
        got.append(draft(input_ids=torch.tensor([[token]]), position_ids=torch.tensor([[n - 1 + depth]]),
                         attention_mask=mask, past_key_values=cache).logits[0, -1])
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert len({int(x.argmax()) for x in expected}) > 1  # the chain is not one repeated token

    # the whole chain in one call (Post-use & Pre-cut's phrases): the head runs once per nesting level
    cut(cache, n)  # the chain's entries out again
    mask = tree_mask(n, [[True, False, False], [True, True, False], [True, True, True]])
    one = draft(input_ids=torch.tensor([chain]), position_ids=torch.arange(n, n + 3)[None], attention_mask=mask,
                past_key_values=cache).logits[0]
    torch.testing.assert_close(one, torch.stack(got[1:]), atol=1e-4, rtol=1e-4)
    assert cache.get_seq_length() == n + 3 and cache.outputs.shape[0] == n + 3


def test_teacher_forced_scoring_equals_the_cached_path():
    """Without a cache (Sequoia's acceptance measurement) the adapter computes the target's features itself."""
    target = tiny_llama(V)
    draft = EagleDraft(tiny_head(target), target, "eagle:tiny", "cpu", torch.float32)
    ids = torch.randint(0, V, (1, 9), generator=torch.Generator().manual_seed(4))
    whole = draft(input_ids=ids).logits[0]
    with torch.no_grad():
        features = target.get_decoder()(input_ids=ids).last_hidden_state[0]
    cache = draft.new_cache()
    cache.observe(features[:4])
    first = draft(input_ids=ids[:, :5], past_key_values=cache).logits[0]
    cache.observe(features[4:8])
    rest = draft(input_ids=ids[:, 5:], past_key_values=cache).logits[0]
    torch.testing.assert_close(whole, torch.cat([first, rest]), atol=1e-4, rtol=1e-4)


def test_sd_accepts_a_trained_head_through_the_engine():
    """The engine's features reach the draft's cache and line up: sd's chain of 4 with a head trained on the
    target's pairs is accepted far more often than with an untrained one, and stays identical to greedy AR."""
    target = per_token_target()
    assert sd_mat(target, train_head(target)) > 2.5
    assert sd_mat(target, EagleHead(target).eval()) < 1.5


def sd_mat(target, head, layers=None) -> float:
    """sd's MAT (chain of 4) over 4 prompts x 24 tokens with `head` as the draft, each output checked against
    greedy AR; `layers`: the three layers the draft proposer must ask the engine for (EAGLE-3)."""
    prompts = torch.randint(0, V, (4, 4), generator=torch.Generator().manual_seed(5)).tolist()
    engine = Engine(target, [V + 5], 512)
    bundle = bundle_for(target, head)
    method = build_method(compose_cfg("method=sd", "method.draft_length=4").method, bundle)
    assert method.feature_layers == layers
    ar = build_method(compose_cfg("method=ar").method, bundle)
    steps = []
    for p in prompts:
        out = method.generate(engine, p, 24, PhaseTimer(sync=False))
        assert out.output_ids == ar.generate(engine, p, 24, PhaseTimer(sync=False)).output_ids
        steps += out.accept_lengths[1:]
    return sum(steps) / len(steps)


@pytest.mark.parametrize("overrides", [("method=sd",), ("method=dyspec", "method.budget=8")],
                         ids=lambda o: o[0].split("=")[1])
def test_sampled_batch_rows_reproduce_batch1_samples(overrides):
    """At temperature 0.8 each row's features and head outputs live in its own draft cache: batch rows give the
    batch-1 samples of the same seeds."""
    target = tiny_llama(V)
    bundle = bundle_for(target, tiny_head(target))
    engine = Engine(target, [V + 5], 512, temperature=0.8)
    prompts = torch.randint(0, V, (3, 6), generator=torch.Generator().manual_seed(6)).tolist()
    method = build_method(compose_cfg(*overrides).method, bundle)
    single = []
    for i, p in enumerate(prompts):
        engine.reseed(i)
        single.append(method.generate(engine, p, 12, PhaseTimer(sync=False)).output_ids)
    gens = [torch.Generator().manual_seed(i) for i in range(len(prompts))]
    rows = method.generate_batch(engine, prompts, 12, PhaseTimer(sync=False), gens)
    assert [g.output_ids for g in rows] == single
    assert all(sum(g.accept_lengths) == 12 for g in rows)


def test_vocab_must_be_null_and_hf_assisted_refuses():
    from bench.models.loading import load_draft_model

    target = tiny_llama(V)
    head = EagleHead(target).eval()
    bundle = SimpleNamespace(name="tiny", draft_cfg=OmegaConf.create({"name": "d", "source": "eagle", "vocab": 8}),
                             load_eagle=lambda: head, model=target, device="cpu", dtype=torch.float32,
                             eagle_cfg=OmegaConf.create({"id": "tiny-eagle", "source": "init"}))
    with pytest.raises(HarnessError, match="vocab"):
        load_draft_model(bundle)
    bundle.draft_cfg.vocab = None
    draft = load_draft_model(bundle)
    assert isinstance(draft, EagleDraft) and draft.name_or_path == "eagle:tiny-eagle"
    bundle.load_draft = lambda: draft
    with pytest.raises(HarnessError, match="hf_assisted"):
        build_method(compose_cfg("method=hf_assisted").method, bundle)


# -- the real embedded model -------------------------------------------------------------------------------------
# `make test` keeps specinfer (a tree; its one real-model case there); the others have theirs in
# tests/test_golden_runs.py (sd, dyspec), tests/test_batch.py (sequoia) and tests/test_holistic.py: `make test-slow`.
SLOW = pytest.mark.slow
CASES = [
    pytest.param(("method=sd", "method.draft_length=4"), marks=SLOW),
    pytest.param(("method=dyspec", "method.budget=8"), marks=SLOW),
    pytest.param(("method=sequoia", "method.calibration.dataset=humaneval", "method.calibration.limit=1",
                  "method.calibration.tokens=32", "method.size=8"), marks=SLOW),
    ("method=specinfer", "method.branches=2", "method.depth=3"),
    pytest.param(("method=holistic",), marks=SLOW),
]


@pytest.fixture(scope="module")
def eagle_bundle(smollm):
    """The embedded model with model.draft.source=eagle (its untrained head: losslessness does not need a good
    one), loaded through ModelBundle.load_draft as a run would."""
    cfg = OmegaConf.merge(smollm.draft_cfg, {"source": "eagle", "vocab": None})
    bundle = dataclasses.replace(smollm, draft_cfg=cfg, draft=None)
    assert isinstance(bundle.load_draft(), EagleDraft)
    assert bundle.draft_label().startswith("eagle-")
    return bundle


@pytest.mark.model
@pytest.mark.parametrize("overrides", CASES, ids=lambda o: o[0].split("=")[1])
def test_identical_to_greedy_ar_on_the_real_model(eagle_bundle, prompts, greedy, overrides, tmp_path):
    if overrides[0] == "method=sequoia":
        overrides = (*overrides, f"method.calibration.cache_dir={tmp_path}")
    gens = run_method(eagle_bundle, prompts[:2], *overrides, max_new=24)
    assert_lossless(gens, [g[:24] for g in greedy[:2]])
    assert gens[0].phase_times.get("draft_forward", 0) > 0


@pytest.mark.slow  # ~12 s: trains the tiny head first
def test_an_eagle3_head_drafts_for_sd_through_the_engine():
    """EAGLE-3's head as the draft (model.draft.source=eagle3): the engine hands the draft proposer the three layers'
    states (feature_layers), the head fuses them, its draft vocabulary is widened to the target's; trained on the
    tiny target's continuations with the training-time test it is accepted by sd, an untrained one far less, both
    identical to greedy AR."""
    from bench.models.eagle3 import Eagle3Head
    from bench.train import eagle3 as train3
    from tests.test_eagle3 import continuations
    from tests.test_eagle3 import per_token_target as per_token_target3
    from tests.test_eagle3_train import split_of

    target = per_token_target3()
    seqs = continuations(target, 48, 0)
    trained = Eagle3Head.from_target(target, tokens=seqs[:, 4:].unique(), seed=0)
    train3.train(trained, target.get_output_embeddings().weight.detach(), split_of(target, seqs, trained.layers),
                 {"lr": 3e-3, "max_minutes": 5, "max_steps": 150, "batch_tokens": 16 * 32, "ttt_steps": 4},
                 progress_bar=False)
    assert trained.d2t.numel() < V  # a reduced draft vocabulary: widened with -inf outside
    logits = EagleDraft(trained, target, "eagle3:tiny", "cpu", torch.float32)(input_ids=torch.tensor([[3, 5, 7, 9]])).logits[0]
    assert logits.shape[-1] == V and torch.isinf(logits[:, ~trained.t2d]).all()
    assert sd_mat(target, trained, trained.layers) > 2.5
    assert sd_mat(target, Eagle3Head.from_target(target, seed=0).eval(), trained.layers) < 1.5
