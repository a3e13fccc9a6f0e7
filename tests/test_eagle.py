"""EAGLE-1 and EAGLE-2 (methods/eagle, bench/models/eagle.py): the feature/token alignment is pinned on a tiny
model (a head trained on pairs (f_i, t_{i+1}) drafts what the target then accepts, an untrained one does not); eagle
and eagle2 are token-identical to greedy AR on the real model at batch 1 and 4 (the head untrained: losslessness does
not depend on it)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from bench.core.engine import Engine
from bench.core.timing import PhaseTimer
from bench.models.eagle import EagleHead
from methods import build_method
from tests.conftest import compose_cfg, tiny_llama

V = 64


def per_token_target():
    """A tiny Llama whose attention outputs are zeroed: its feature at i depends on token i alone, so a head that
    reads the right token can predict the next feature (nearly) exactly."""
    target = tiny_llama(V, max_positions=512)
    with torch.no_grad():
        for layer in target.model.layers:
            layer.self_attn.o_proj.weight.zero_()
    return target


def train_head(target, steps: int = 200) -> EagleHead:
    """The EAGLE-1 recipe in miniature: the target's own greedy continuations, pairs (f_i, t_{i+1}), the head
    regressing f_{i+1} (SmoothL1) and matching the target's next-token distribution at i+1 (soft CE, weight 0.1).
    The engine's features and the proposer's pairing must match this for the drafts to be accepted."""
    torch.manual_seed(0)
    head = EagleHead(target)
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, V, (64, 4), generator=g)
    with torch.no_grad():
        seqs = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=28,
                               do_sample=False, pad_token_id=0)
        feats = target(seqs, output_hidden_states=True).hidden_states[-1]
        p_next = torch.softmax(target.get_output_embeddings()(feats[:, 1:]), -1)
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=3e-3)
    n = seqs.shape[1] - 1
    pos = torch.arange(n)[None].expand(len(seqs), n)
    for _ in range(steps):
        out = head(seqs[:, 1:], feats[:, :-1], pos, None)  # f^_{i+1} from (f_i, t_{i+1}); None: a causal mask
        reg = torch.nn.functional.smooth_l1_loss(out, feats[:, 1:])
        cls = -(p_next * torch.log_softmax(head.logits(out), -1)).sum(-1).mean()
        opt.zero_grad()
        (reg + 0.1 * cls).backward()
        opt.step()
    return head.eval()


def tiny_bundle(model, head):
    return SimpleNamespace(model=model, device=torch.device("cpu"), dtype=torch.float32, vocab_size=V,
                           name="tiny", eos_token_ids=[V + 5], max_context=512, load_eagle=lambda: head)


def eagle2(bundle, name="eagle2", **settings):
    cfg = compose_cfg(f"method={name}").method
    return build_method(OmegaConf.merge(cfg, settings), bundle)


def chain_acceptance(target, head, prompts, name="eagle2", **settings) -> float:
    """Mean accepted drafts per verification (MAT - 1) of eagle2 (or eagle), checked against greedy AR."""
    engine = Engine(target, [V + 5], 512)
    method = eagle2(tiny_bundle(target, head), name, **settings)
    ar = build_method(compose_cfg("method=ar").method, tiny_bundle(target, head))
    steps = []
    for p in prompts:
        out = method.generate(engine, p, 24, PhaseTimer(sync=False))
        assert out.output_ids == ar.generate(engine, p, 24, PhaseTimer(sync=False)).output_ids
        steps += out.accept_lengths[1:]
    return sum(steps) / len(steps) - 1


def test_trained_head_aligns_features_and_tokens():
    target = per_token_target()
    prompts = torch.randint(0, V, (6, 4), generator=torch.Generator().manual_seed(5)).tolist()
    one = {"total_tokens": 2, "depth": 1, "topk": 1}  # one draft token: depth-1 acceptance
    aligned, untrained = train_head(target), EagleHead(target).eval()
    assert chain_acceptance(target, aligned, prompts, **one) > 0.75
    assert chain_acceptance(target, untrained, prompts, **one) < 0.3
    assert chain_acceptance(target, aligned, prompts, total_tokens=16, depth=4, topk=4) > 1.5  # MAT > 2.5
    assert chain_acceptance(target, aligned, prompts, "eagle") > 1.5  # EAGLE-1's static 25-node tree


@pytest.mark.model
@pytest.mark.parametrize("name,settings", [("eagle", {}), ("eagle2", {"total_tokens": 12, "depth": 3, "topk": 4})])
def test_lossless_on_the_real_model(smollm, prompts, greedy, name, settings):
    """Batch 1 and batch 4 (rows against batch-1 greedy); a small dynamic tree keeps the untrained head's steps
    cheap."""
    method = eagle2(smollm, name, **settings)
    engine = Engine(smollm.model, smollm.eos_token_ids, smollm.max_context, device=smollm.device)
    one = method.generate(engine, prompts[0], 24, PhaseTimer(sync=False))
    assert one.output_ids == greedy[0][:24]
    rows = method.generate_batch(engine, prompts[:4], 16, PhaseTimer(sync=False),
                                 [torch.Generator().manual_seed(i) for i in range(4)])
    for gen, ref in zip(rows, greedy, strict=False):
        assert gen.output_ids == ref[:16] and sum(gen.accept_lengths) == len(gen.output_ids)


def test_head_has_only_its_own_weights():
    target = tiny_llama(V)
    head = EagleHead(target)
    names = set(head.state_dict())
    assert not any("embed" in n or "lm_head" in n for n in names)
    assert "fc.weight" in names and not any("input_layernorm" in n and "weight" in n for n in names)
