"""bench.core.engine on a tiny random Llama (CPU, fp32): every method is lossless vs greedy AR, counts, EOS, timing."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from bench.core.engine import Engine
from bench.core.proposer import Draft, Proposer
from bench.core.timing import PHASES, PhaseTimer
from bench.core.tree import chain, tree_from_paths
from methods.ar import Autoregressive
from methods.hf import HFGenerate, HFPromptLookup
from methods.pld import PromptLookup
from methods.token_recycling.proposer import TokenRecycling
from tests.conftest import tiny_llama

CONF = Path(__file__).resolve().parents[1] / "conf"
V = 100
NO_EOS = 10_000  # outside the vocabulary: never emitted
SMALL_TREE = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 0, 0]]
_g = torch.Generator().manual_seed(1)
PROMPTS = [torch.randint(0, V, (12,), generator=_g).tolist() for _ in range(3)]
PROMPTS.append([5, 6, 7, 8, 9, 10] * 3 + [5, 6])  # repetition: PLD drafts from the first step


@pytest.fixture(scope="module", params=["eager", "sdpa"])
def model(request):
    m = tiny_llama(V, request.param, 512)
    assert m.config._attn_implementation == request.param
    m._ar_cache = {}
    return m


def bundle(model, eos=NO_EOS):
    return SimpleNamespace(device="cpu", vocab_size=V, model=model, eos_token_ids=[eos], pad_token_id=0)


def generate(model, method, prompt, max_new, eos=NO_EOS):
    return method.generate(Engine(model, [eos], max_context=512), prompt, max_new, PhaseTimer("cpu"))


def ar(model, prompt, max_new):
    key = (tuple(prompt), max_new)
    if key not in model._ar_cache:
        model._ar_cache[key] = generate(
            model, Autoregressive(None, bundle(model)), prompt, max_new
        ).output_ids
    return model._ar_cache[key]


def tr(model, paths=None, **kw):
    cfg = OmegaConf.load(CONF / "method" / "token_recycling.yaml")
    cfg.tree = OmegaConf.load(CONF / "tree" / "tr_2_2_2.yaml") if paths is None else {"paths": paths}
    for k, v in kw.items():
        cfg[k] = v
    return TokenRecycling(cfg, bundle(model))


def pld(model, **kw):
    cfg = OmegaConf.load(CONF / "method" / "pld.yaml")
    for k, v in kw.items():
        cfg[k] = v
    return PromptLookup(cfg, bundle(model))


@torch.inference_mode()
def test_ar_matches_naive_greedy(model):
    for prompt in PROMPTS[:2]:
        seq = list(prompt)
        for _ in range(20):
            seq.append(int(model(torch.tensor([seq]), use_cache=False).logits[0, -1].argmax()))
        out = generate(model, Autoregressive(None, bundle(model)), prompt, 20)
        assert out.output_ids == seq[len(prompt) :]
        assert out.accept_lengths == [1] * 20


@torch.inference_mode()
def test_ar_and_a_tree_method_hold_under_the_older_crop_rule(model, crop_before_5_14):
    """Before transformers 5.14 crop(0) emptied the cache, and AR's every step (nothing to drop) called it."""
    seq = list(PROMPTS[0])
    for _ in range(20):
        seq.append(int(model(torch.tensor([seq]), use_cache=False).logits[0, -1].argmax()))
    for method in (Autoregressive(None, bundle(model)), tr(model)):
        assert generate(model, method, PROMPTS[0], 20).output_ids == seq[len(PROMPTS[0]):]


@pytest.mark.parametrize("name", ["tr_2_2_2", "tr_small", "tr_small_first", "pld", "pld_hf"])
def test_methods_equal_ar(model, name):
    make = {
        "tr_2_2_2": lambda: tr(model),
        "tr_small": lambda: tr(model, SMALL_TREE, topk=3),
        "tr_small_first": lambda: tr(model, SMALL_TREE, topk=3, update_strategy="first"),
        "pld": lambda: pld(model),
        "pld_hf": lambda: pld(model, max_ngram=2, full_continuation=False),
    }[name]
    method = make()  # one instance for all prompts: TR's matrix stays hot
    drafted = []
    for prompt in PROMPTS + PROMPTS:  # twice: the second pass sees a warm TR matrix
        out = generate(model, method, prompt, 40)
        assert out.output_ids == ar(model, prompt, 40)
        assert sum(out.accept_lengths) == len(out.output_ids) == 40
        drafted.append(max(out.accept_lengths))
    assert max(drafted[len(PROMPTS) :]) > 1
    if name.startswith("pld"):
        assert drafted[-1] > 1  # the repetitive prompt


def test_tr_hot_matrix_helps_on_repeat(model):
    method, prompt = tr(model), PROMPTS[0]
    first = generate(model, method, prompt, 40)
    second = generate(model, method, prompt, 40)
    assert first.output_ids == second.output_ids == ar(model, prompt, 40)
    assert len(second.accept_lengths) < len(first.accept_lengths)
    assert max(second.accept_lengths) > 1


@pytest.mark.parametrize("max_new", [1, 2, 7])
@pytest.mark.parametrize("name", ["ar", "tr", "pld"])
def test_counts_and_limit(model, name, max_new):
    method = {"ar": Autoregressive, "tr": tr, "pld": pld}[name]
    method = method(None, bundle(model)) if name == "ar" else method(model)
    prompt = PROMPTS[3]
    if name == "tr":
        generate(model, method, prompt, 20)  # warm the matrix so drafts run past the limit
    out = generate(model, method, prompt, max_new)
    assert len(out.output_ids) == max_new  # no EOS in reach: exactly the limit
    assert sum(out.accept_lengths) == len(out.output_ids)
    assert out.accept_lengths[0] == 1
    assert out.output_ids == ar(model, prompt, 20)[:max_new]


def hf(model, lookup=False, eos=NO_EOS):
    if lookup:
        return HFPromptLookup(OmegaConf.create({"num_draft_tokens": 10, "max_ngram": 2}), bundle(model, eos))
    return HFGenerate(OmegaConf.create({}), bundle(model, eos))


def test_hf_baselines_match_engine(model):
    """hf_generate equals AR; hf_pld equals pld in its HF setting token for token and step for step."""
    ours = pld(model, max_ngram=2, full_continuation=False)
    for prompt in PROMPTS:
        plain, lookup = generate(model, hf(model), prompt, 40), generate(model, hf(model, True), prompt, 40)
        assert plain.output_ids == lookup.output_ids == ar(model, prompt, 40)
        assert plain.accept_lengths == [1] * 40 and set(plain.phase_times) == {"generate"}
        assert lookup.accept_lengths == generate(model, ours, prompt, 40).accept_lengths
        assert sum(lookup.accept_lengths) == 40
    assert max(lookup.accept_lengths) > 1


@pytest.mark.parametrize("name", ["ar", "tr", "pld", "hf_generate", "hf_pld"])
def test_eos_stop(model, name):
    prompt = PROMPTS[3]
    ref = ar(model, prompt, 40)
    k = next(i for i in range(5, 40) if ref[i] not in ref[:i])  # first occurrence of ref[k] is at k
    method = {
        "ar": lambda: Autoregressive(None, bundle(model)),
        "tr": lambda: tr(model),
        "pld": lambda: pld(model),
        "hf_generate": lambda: hf(model, eos=ref[k]),
        "hf_pld": lambda: hf(model, True, eos=ref[k]),
    }[name]()
    if name == "tr":
        generate(model, method, prompt, 40)  # warm: the EOS is then met inside an accepted draft
    out = generate(model, method, prompt, 40, eos=ref[k])
    assert out.output_ids == ref[: k + 1]
    assert sum(out.accept_lengths) == k + 1


class Oracle(Proposer):
    """Drafts the true AR continuation: as a chain, or inside a tree behind wrong siblings."""

    # slots: 1=[0] wrong, 2=[1] t1, 3=[0,0] trap, 4=[1,0] t2, 5=[1,1] wrong, 6=[1,0,0] t3, 7=[1,0,0,0] t4
    TREE = tree_from_paths([[0], [1], [0, 0], [1, 0], [1, 1], [1, 0, 0], [1, 0, 0, 0]])

    def __init__(self, full, as_tree):
        super().__init__(None, None)
        self.full, self.as_tree = torch.tensor(full), as_tree

    def propose(self, seq, length):
        t = self.full[length : length + 4]
        if not self.as_tree:
            return Draft(chain(4), t.clone())
        w = (t + 1) % V
        return Draft(self.TREE, torch.stack([w[0], t[0], t[1], t[1], w[1], t[2], t[3]]))


@pytest.mark.parametrize("as_tree", [False, True], ids=["chain", "tree"])
def test_oracle_accepts_everything(model, as_tree):
    for prompt in PROMPTS[:2]:
        ref = ar(model, prompt, 40)
        out = generate(model, Oracle(prompt + ref, as_tree), prompt, 21)
        assert out.accept_lengths == [1, 5, 5, 5, 5]
        assert out.output_ids == ref[:21]


def test_oracle_eos_twice_in_one_step(model):
    """The EOS token occurs twice inside one accepted chunk: output stops at the first one."""
    for prompt in PROMPTS:
        ref = ar(model, prompt, 40)
        step = [0] + [(i - 1) // 5 + 1 for i in range(1, 40)]  # oracle step committing ref[i]
        hits = [
            k
            for k in range(1, 39)
            if ref[k] not in ref[:k]
            and ref[k] in ref[k + 1 : 40]
            and step[ref.index(ref[k], k + 1)] == step[k]
        ]
        if hits:
            break
    assert hits, "no prompt has a token repeated inside one oracle step"
    k = hits[0]
    out = generate(model, Oracle(prompt + ref, as_tree=False), prompt, 40, eos=ref[k])
    assert out.output_ids == ref[: k + 1]
    assert out.accept_lengths[-1] < 5 and sum(out.accept_lengths) == k + 1


@pytest.mark.parametrize("name", ["ar", "tr"])
def test_phase_times_tile_wall_time(model, name):
    method = Autoregressive(None, bundle(model)) if name == "ar" else tr(model)
    engine = Engine(model, [NO_EOS], max_context=512)
    ratios = []
    for _ in range(5):  # best of 5: a busy CI machine may preempt us in the few untimed lines
        t0 = time.perf_counter()
        out = method.generate(engine, PROMPTS[0], 30, PhaseTimer("cpu"))
        wall = time.perf_counter() - t0
        assert set(out.phase_times) == set(PHASES)  # every phase is lapped, AR included
        ratios.append(sum(out.phase_times.values()) / wall)
    assert min(ratios, key=lambda r: abs(r - 1)) == pytest.approx(1.0, abs=0.02)


def test_context_limit_raises(model):
    engine = Engine(model, [NO_EOS], max_context=len(PROMPTS[0]) + 5)
    with pytest.raises(RuntimeError, match="context"):
        tr(model).generate(engine, PROMPTS[0], 20, PhaseTimer("cpu"))


def test_target_forward_seam_and_acceptance_reach_the_proposer(model):
    """Every target forward goes through the engine's `forward` seam, and `update` gets each step's
    acceptance: its accept_len is what the step committed (no EOS or limit cut in this run)."""
    from bench.core.forward import full_forward

    calls = []

    def counting_forward(m, input_ids, **kw):
        calls.append(input_ids.shape[1])
        return full_forward(m, input_ids, **kw)

    seen = []

    class Recording(PromptLookup):
        def update(self, inputs, logits, target, acceptance):
            seen.append((int(acceptance.accept_len[0]), acceptance.slots().tolist()))
            super().update(inputs, logits, target, acceptance)

    prompt = PROMPTS[3]
    cfg = OmegaConf.load(CONF / "method" / "pld.yaml")
    engine = Engine(model, [NO_EOS], max_context=512, forward=counting_forward)
    out = Recording(cfg, bundle(model)).generate(engine, prompt, 24, PhaseTimer("cpu"))
    assert out.output_ids == ar(model, prompt, 24)
    assert calls[0] == len(prompt) and len(calls) == len(out.accept_lengths)  # prefill + one per step
    steps = out.accept_lengths[1:]
    assert [n for n, _ in seen[:-1]] == steps[:-1] and seen[-1][0] >= steps[-1]  # the last step may be cut
    assert all(slots[0] == 0 and len(slots) == n for n, slots in seen)
    assert max(steps) > 1  # PLD drafted and had drafts accepted on this repetitive prompt


def test_tree_and_batch_masks_are_aligned_for_cuda_sdpa(monkeypatch):
    """Every 4D mask that reaches sdpa in a decode step has rows MASK_ALIGN-aligned: CUDA's memory-efficient sdpa
    copies a mask that is not into a padded one in each layer (two launches a layer on a launch-bound GPU). The
    values are the plain mask's: tree_mask against the prefix + bias it stands for."""
    from bench.core.forward import MASK_ALIGN, tree_mask

    sdpa, masks, widths = torch.nn.functional.scaled_dot_product_attention, [], []

    def spy(*args, attn_mask=None, **kw):
        masks.append(attn_mask)
        widths.append(args[0].shape[-2])
        return sdpa(*args, attn_mask=attn_mask, **kw)

    model = tiny_llama(V, "sdpa", 512)
    engine = Engine(model, [NO_EOS], max_context=512)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    tr(model).generate(engine, PROMPTS[0], 6, PhaseTimer("cpu"))
    masks[:] = [m for m in masks if m is not None]  # the batch-1 prefill has none
    gens = [torch.Generator().manual_seed(i) for i in range(2)]
    tr(model).generate_batch(engine, PROMPTS[:2], 6, PhaseTimer("cpu"), gens)
    masks = [m for m in masks if m is not None and m.shape[-2] != m.shape[-1]]  # not the batched prefill's (HF's)
    assert {m.shape[0] for m in masks} == {1, 2} and {m.shape[-2] for m in masks} == {tr(model).tree.size + 1}
    assert all(m.stride(-1) == 1 and all(s % MASK_ALIGN == 0 for s in m.stride()[:-1]) for m in masks)
    masks.clear()  # a chain at batch 1 (PLD) too: transformers' own causal mask would be a bool one, not aligned
    widths.clear()
    PromptLookup(OmegaConf.load(CONF / "method" / "pld.yaml"), bundle(model)).generate(
        engine, PROMPTS[3], 24, PhaseTimer("cpu"))
    drafted = [m for m, w in list(zip(masks, widths))[2:] if w > 1]  # past the prefill (its two layers)
    assert len(drafted) >= 2 and len(drafted) % 2 == 0  # PLD drafted on the repetitive prompt; one per layer
    assert all(m.dtype == torch.float32 and m.stride(-1) == 1 and m.stride(-2) % MASK_ALIGN == 0 for m in drafted)
    tree = tree_from_paths(SMALL_TREE)
    n, low = tree.size + 1, torch.finfo(torch.float32).min
    plain = torch.full((n + 2, 13 + n + 2), low)
    plain[:, :13] = 0.0
    plain[:n, 13 : 13 + n] = tree.attention_bias(torch.float32, "cpu")
    mask = tree_mask([tree], 13, n + 2, torch.float32, "cpu")
    assert torch.equal(mask[0, 0], plain) and mask.stride(-2) % MASK_ALIGN == 0
