"""Batched decoding (run.batch_size > 1): every row gets the tokens batch-1 decoding gives it.

Tiny random Llama (eager and sdpa attention): every proposer at B = 4 on prompts of different lengths, rows
that stop early (EOS, limit) leave the batch, sampled rows reproduce batch-1 samples of the same seed. Real
embedded model: ar, pld, token_recycling, medusa and bpd at B = 4 on 6 HumanEval prompts of different lengths (a
full batch, then one of 2 rows) against batch-1 greedy decoding (the acceptance test of batched decoding).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from bench.core.engine import Engine
from bench.core.timing import PhaseTimer
from bench.errors import HarnessError
from bench.metrics import first_divergence
from bench.models.drafts import init_draft_from_target
from bench.models.heads import MedusaHeads
from methods import build_method
from tests.conftest import compose_cfg, tiny_llama

V = 100
NO_EOS = 10_000
_g = torch.Generator().manual_seed(3)
PROMPTS = [torch.randint(0, V, (n,), generator=_g).tolist() for n in (5, 17, 9, 12, 3, 21, 7)]
PROMPTS.append([5, 6, 7, 8, 9, 10] * 3 + [5, 6])  # repetition: PLD and Lookahead draft early


def heads_for(model, trained_like: bool = True) -> MedusaHeads:
    torch.manual_seed(1)
    heads = MedusaHeads(model.config.hidden_size, model.config.vocab_size, 5, lm_head=model.get_output_embeddings())
    if trained_like:  # random blocks: heads disagree with the lm_head, so trees vary per row
        for block in heads.blocks:
            torch.nn.init.normal_(block[0].linear.weight, std=0.5)
    return heads.eval()


def tiny_bundle(model):
    draft = init_draft_from_target(model, 1)
    heads = heads_for(model)
    return SimpleNamespace(name="tiny", device=torch.device("cpu"), dtype=torch.float32, vocab_size=V, model=model,
                           eos_token_ids=[NO_EOS], pad_token_id=0, max_context=512, tokenizer=None,
                           load_draft=lambda: draft, heads=heads, load_heads=lambda: heads)


def batched(method, engine, prompts, batch_size, max_new, seed=0):
    """Outputs of `prompts` decoded `batch_size` at a time; row i is seeded seed + i."""
    out = []
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i : i + batch_size]
        gens = [torch.Generator().manual_seed(seed + i + j) for j in range(len(chunk))]
        out += method.generate_batch(engine, chunk, max_new, PhaseTimer("cpu"), gens)
    return out


def one_by_one(method, engine, prompts, max_new, seed=0):
    out = []
    for i, p in enumerate(prompts):
        engine.reseed(seed + i)
        out.append(method.generate(engine, p, max_new, PhaseTimer("cpu")))
    return out


TINY_METHODS = {
    "ar": ("method=ar",),
    "pld": ("method=pld",),
    "token_recycling": ("method=token_recycling",),
    "lookahead": ("method=lookahead", "method.level=4", "method.window=3", "method.guess=3"),
    "medusa": ("method=medusa",),
    "bpd": ("method=bpd",),
    "sd": ("method=sd", "method.draft_length=4"),
    "specinfer": ("method=specinfer", "method.branches=2", "method.depth=3"),
    "dyspec": ("method=dyspec", "method.budget=12"),
}


@pytest.fixture(scope="module", params=["eager", "sdpa"])
def tiny(request):
    return tiny_llama(V, request.param, 512)


@pytest.fixture(scope="module")
def tiny_ar(tiny):
    method = build_method(compose_cfg("method=ar").method, tiny_bundle(tiny))
    return [g.output_ids for g in one_by_one(method, Engine(tiny, [NO_EOS], 512), PROMPTS, 24)]


@pytest.mark.parametrize("name", sorted(TINY_METHODS))
def test_tiny_rows_identical_to_batch1_ar(tiny, tiny_ar, name):
    bundle = tiny_bundle(tiny)
    method = build_method(compose_cfg(*TINY_METHODS[name]).method, bundle)
    gens = batched(method, Engine(tiny, [NO_EOS], 512), PROMPTS, 4, 24)
    for i, (gen, ref) in enumerate(zip(gens, tiny_ar, strict=True)):
        assert gen.output_ids == ref, f"{name}: row {i % 4} of batch {i // 4} diverges"
        assert sum(gen.accept_lengths) == len(gen.output_ids)
        assert gen.occupancy[0] == 4 and gen.occupancy == sorted(gen.occupancy, reverse=True)
        assert 0 < gen.elapsed <= sum(gen.phase_times.values()) + 1e-9


def test_rows_stop_at_their_own_eos_and_leave_the_batch(tiny, tiny_ar):
    eos = tiny_ar[1][5]  # row 1 stops at its 6th token; other rows may stop earlier or run to the limit
    engine = Engine(tiny, [eos], 512)
    method = build_method(compose_cfg("method=token_recycling").method, tiny_bundle(tiny))
    gens = batched(method, engine, PROMPTS[:4], 4, 24)
    for gen, ref in zip(gens, tiny_ar[:4]):
        cut = ref.index(eos) + 1 if eos in ref else len(ref)
        assert gen.output_ids == ref[:cut]
    assert gens[1].occupancy[-1] < 4 and gens[1].elapsed < max(g.elapsed for g in gens) + 1e-9


def test_different_limits_per_row_do_not_shift_kv(tiny, tiny_ar):
    """A row at max_new_tokens leaves while longer prompts go on: the cache rows stay aligned."""
    method = build_method(compose_cfg("method=pld").method, tiny_bundle(tiny))
    engine = Engine(tiny, [NO_EOS], 512)
    gens = batched(method, engine, [PROMPTS[4], PROMPTS[5]], 2, 1)  # limit 1: both leave after the prefill
    assert [g.output_ids for g in gens] == [tiny_ar[4][:1], tiny_ar[5][:1]]


@pytest.mark.parametrize("name", ["pld", "sd", "medusa"])
def test_sampled_rows_reproduce_batch1_samples(tiny, name):
    """At temperature > 0 each row draws from its own generator: the same seed gives batch 1's sample.
    (Not for Token Recycling: its shared matrix learns from the other rows, so its drafts, and with them the
    verifier's draws, differ from batch 1's; each row is still a sample of the target distribution.)"""
    bundle = tiny_bundle(tiny)
    engine = Engine(tiny, [NO_EOS], 512, temperature=0.8)
    single = one_by_one(build_method(compose_cfg(*TINY_METHODS[name]).method, bundle), engine, PROMPTS[:4], 16)
    rows = batched(build_method(compose_cfg(*TINY_METHODS[name]).method, bundle), engine, PROMPTS[:4], 4, 16)
    assert [g.output_ids for g in rows] == [g.output_ids for g in single]


def test_shared_matrix_learns_from_every_row(tiny):
    """Token Recycling's adjacency matrix is one per method: every row's verification writes into it."""
    method = build_method(compose_cfg("method=token_recycling").method, tiny_bundle(tiny))
    gens = batched(method, Engine(tiny, [NO_EOS], 512), PROMPTS[:2], 2, 8)
    for gen in gens:  # each row's first new token was the root of its first tree, then written to the matrix
        assert bool(method.adj[gen.output_ids[0]].any())


# ---- the real embedded model ---------------------------------------------------------------------------

REAL = {
    "ar": ("method=ar",),
    "pld": ("method=pld",),
    # an 8-node tree: the batched tree path is the same, and B = 4 x 81 tokens a step cost ~20 s for no new path
    "token_recycling": ("method=token_recycling", "tree.paths=[[0],[1],[2],[3],[0,0],[1,0],[0,0,0],[0,0,0,0]]"),
    "medusa": ("method=medusa",),
    "bpd": ("method=bpd",),
}
REAL_NEW = 12  # tree methods at B = 4 verify 4 x 64 tokens a step: ~10x an AR step here (12 = 4-9 steps)


@pytest.fixture(scope="module")
def real(smollm, prompts, greedy):
    """6 HumanEval prompts of different lengths (batches of 4 and 2 rows) and their greedy outputs: the session's
    first four prompts with its HF greedy reference (tests/conftest.py) cut to REAL_NEW tokens, then the next two
    of new lengths with batch-1 greedy AR; and a bundle whose heads are the trained ones when `make heads` was
    run, else untrained (each head = lm_head: output must still match)."""
    from bench.models.chat import prompt_ids
    from data.loaders import load_items

    chosen, more = list(prompts[:4]), []
    for it in load_items(compose_cfg("dataset=humaneval").dataset, None, "/nonexistent")[:16]:
        ids = prompt_ids(smollm.tokenizer, "tokenizer", [], it["turns"][0])
        if len(more) < 2 and len(ids) not in {len(p) for p in chosen + more}:
            more.append(ids)
    assert len({len(p) for p in chosen + more}) == 6
    try:
        heads = smollm.load_heads()
    except HarnessError:  # heads not built here: untrained ones test the same code path
        heads = heads_for(smollm.model, trained_like=False)
    bundle = dataclasses.replace(smollm)
    bundle.load_heads = lambda: heads
    ar = build_method(compose_cfg("method=ar").method, bundle)
    engine = Engine(bundle.model, bundle.eos_token_ids, bundle.max_context)
    refs = [g[:REAL_NEW] for g in greedy[:4]] + [g.output_ids for g in one_by_one(ar, engine, more, REAL_NEW)]
    return bundle, chosen + more, refs


@pytest.mark.model
# PLD and BPD batched on the real model in `make test-slow` (their batch-1 real cases: tests/test_golden_runs.py,
# tests/test_medusa.py; their batched tiny cases above)
@pytest.mark.parametrize("name", [n if n not in ("pld", "bpd") else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(REAL)])
def test_real_model_rows_identical_to_batch1_greedy(real, name):
    bundle, prompts, refs = real
    method = build_method(compose_cfg(*REAL[name]).method, bundle)
    engine = Engine(bundle.model, bundle.eos_token_ids, bundle.max_context)
    gens = batched(method, engine, prompts, 4, REAL_NEW)
    for i, (gen, ref) in enumerate(zip(gens, refs, strict=True)):
        assert gen.output_ids == ref, f"{name}: prompt {i} diverges at token {first_divergence(gen.output_ids, ref)}"


@pytest.mark.model
@pytest.mark.parametrize("name", ["rest", "sequoia"])
def test_real_model_rest_and_sequoia_rows_identical(real, rest_store, name, tmp_path):
    """The two proposers the tiny model cannot run (a datastore of real tokens; Sequoia's calibration on a real
    dataset) at B = 2 on 3 prompts: the last batch has one row."""
    from tests.conftest import rest_overrides

    bundle, prompts, refs = real
    if name == "rest":
        overrides = rest_overrides(rest_store)
    else:
        cut = init_draft_from_target(bundle.model, 2)
        bundle = dataclasses.replace(bundle)
        bundle.load_draft = lambda: cut
        overrides = ("method=sequoia", "method.calibration.dataset=humaneval", "method.calibration.limit=2",
                     "method.calibration.tokens=64", "method.size=16", f"method.calibration.cache_dir={tmp_path}")
    method = build_method(compose_cfg(*overrides).method, bundle)
    engine = Engine(bundle.model, bundle.eos_token_ids, bundle.max_context)
    gens = batched(method, engine, prompts[:3], 2, REAL_NEW)
    for i, (gen, ref) in enumerate(zip(gens, refs)):
        assert gen.output_ids == ref, f"{name}: prompt {i} diverges at token {first_divergence(gen.output_ids, ref)}"
