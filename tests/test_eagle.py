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
from bench.models.eagle import EagleHead, load_eagle
from bench.train import eagle as eagle_training
from bench.train.heads_data import Positions
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


def positions(target, n: int, seed: int) -> Positions:
    """The target's own greedy continuations of random prompts as heads_data's positions: per sequence the final
    hidden state at every position and the greedy token after it."""
    prompts = torch.randint(0, V, (n, 4), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        seqs = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=28,
                               do_sample=False, pad_token_id=0)
        hidden = target(seqs, output_hidden_states=True).hidden_states[-1][:, :-1]
    length = hidden.shape[1]
    return Positions(hidden.reshape(-1, hidden.shape[-1]), seqs[:, 1:].reshape(-1),
                     torch.arange(0, n * length + 1, length))


def train_head(target, steps: int = 200) -> EagleHead:
    """The EAGLE-1 recipe (bench/train/eagle.py) in miniature on the target's own greedy continuations. The engine's
    features and the proposer's pairing must match training's (f_i, t_{i+1}) for the drafts to be accepted."""
    torch.manual_seed(0)
    head = EagleHead(target)
    recipe = {"lr": 3e-3, "max_minutes": 10, "max_steps": steps, "batch_tokens": 2048, "noise": 0.0, "seed": 0}
    result = eagle_training.train(head, positions(target, 64, 0), recipe, progress_bar=False)
    assert result["steps"] == steps and result["loss_curve"][-1]["reg"] < result["loss_curve"][0]["reg"]
    return head


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
    """Batch 1 and batch 2 (rows against batch-1 greedy); a small dynamic tree keeps the
    untrained head's steps cheap."""
    method = eagle2(smollm, name, **settings)
    engine = Engine(smollm.model, smollm.eos_token_ids, smollm.max_context, device=smollm.device)
    one = method.generate(engine, prompts[0], 24, PhaseTimer(sync=False))
    assert one.output_ids == greedy[0][:24]
    rows = method.generate_batch(engine, prompts[1:3], 16, PhaseTimer(sync=False),
                                 [torch.Generator().manual_seed(i) for i in range(2)])
    for gen, ref in zip(rows, greedy[1:3], strict=True):
        assert gen.output_ids == ref[:16] and sum(gen.accept_lengths) == len(gen.output_ids)


def test_heldout_agreement_by_depth():
    target = per_token_target()
    head, heldout = train_head(target), positions(target, 16, 7)
    trained, untrained = eagle_training.agreement(head, heldout, 3), eagle_training.agreement(EagleHead(target), heldout, 3)
    assert len(trained) == 3 and trained[0] > 0.75 and untrained[0] < 0.3
    assert trained[0] >= trained[2] - 0.05  # own features only lose information with depth


def test_head_has_only_its_own_weights():
    target = tiny_llama(V)
    head = EagleHead(target)
    names = set(head.state_dict())
    assert not any("embed" in n or "lm_head" in n for n in names)
    assert "fc.weight" in names and not any("input_layernorm" in n and "weight" in n for n in names)


def test_build_writes_a_head_that_loads(tmp_path, monkeypatch):
    """make eagle's build on a tiny target (its self-distillation data stubbed by the tiny model's own): the folder
    holds weights and report, the report reads back, and load_eagle(source=trained) gives the trained head."""
    from bench.models.eagle import eagle_dir, load_eagle

    target = per_token_target()
    data = SimpleNamespace(train=positions(target, 32, 0), heldout=positions(target, 8, 1))
    monkeypatch.setattr(eagle_training, "heads_data", lambda *a, **k: (data, tmp_path / "data"))
    model_cfg = OmegaConf.create({
        "name": "tiny", "target": {"source": "path", "id": "tiny"}, "heads": {"train": {"seed": 0}},
        "eagle": {"name": "tiny-eagle", "source": "trained", "id": "tiny-eagle",
                  "train": {"lr": 3e-3, "max_minutes": 5, "max_steps": 30, "batch_tokens": 1024, "eval_depths": 2,
                            "cost_reps": 2, "log_every": 5}}})
    out = eagle_dir(tmp_path / "models") / "tiny-eagle"
    report = eagle_training.build_eagle(target, None, model_cfg, out, tmp_path, None, str(tmp_path), False)
    assert report["steps"] == 30 and len(report["agreement"]) == 2 and report["cost"]["ratio"] > 0
    assert eagle_training.read_report(out) == report and "agreement by depth" in eagle_training.summary(report)
    bundle = SimpleNamespace(eagle_cfg=model_cfg.eagle, model=target, model_cache=str(tmp_path / "models"),
                             name="tiny", device=torch.device("cpu"), dtype=torch.float32)
    loaded = load_eagle(bundle)
    assert eagle_training.agreement(loaded, data.heldout, 2) == report["agreement"]


def test_hub_head_offline_is_one_line(monkeypatch):
    """A model config naming an official head on the hub fails in one line when the hub cannot be reached."""
    from bench.errors import HarnessError
    from bench.models.eagle import official_file

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    cfg = OmegaConf.create({"source": "hub", "id": "yuhuili/EAGLE-Vicuna-7B-v1.3-not-cached"})
    with pytest.raises(HarnessError) as err:
        official_file(cfg)
    assert "cannot get EAGLE head 'yuhuili/EAGLE-Vicuna-7B-v1.3-not-cached' from the hub" in str(err.value)
    assert "\n" not in str(err.value)


def test_half_precision_head_keeps_fp32_rotary_frequencies():
    """In bf16 the head's weights are bf16 but its rotary inv_freq stays the fp32 one (issue 40, defect 8: a cast
    of the whole head rounded it, shifting long-distance positions by up to radians)."""
    target = tiny_llama(V).to(torch.bfloat16)
    cfg = OmegaConf.create({"id": "tiny", "source": "init", "seed": 0})
    bundle = SimpleNamespace(model=target, device=torch.device("cpu"), dtype=torch.bfloat16, name="tiny",
                             eagle_cfg=cfg, model_cache=None)
    head = load_eagle(bundle)
    exact = type(head.rotary)(config=head.config).inv_freq
    assert head.fc.weight.dtype == torch.bfloat16 and head.rotary.inv_freq.dtype == torch.float32
    assert torch.equal(head.rotary.inv_freq, exact)


def test_dynamic_tree_index_tensors_computed_on_the_device_equal_the_hosts():
    """EAGLE-2's tree (methods/shared/device_tree.py) computes Tree.on's index tensors from the parents on the
    device instead of sending them: the same tensors, for chains, stars and random breadth-first trees."""
    from bench.core.tree import tree_from_parents
    from methods.shared.device_tree import tree_on_device

    gen = torch.Generator().manual_seed(0)
    trees = [[-1, 0], [-1, 0, 1, 2], [-1, 0, 0, 0]]
    for _ in range(20):
        parents = [-1]
        for i in range(1, 30):  # breadth first: a parent no earlier than the previous node's
            parents.append(int(torch.randint(max(parents[-1], 0), i, (1,), generator=gen)))
        trees.append(parents)
    for parents in trees:
        built = tree_on_device(torch.tensor(parents[1:]))
        assert built.parents.tolist() == parents and built.on("cpu") is built.device_tree
        for got, want in zip(built.on("cpu"), tree_from_parents(parents).on("cpu"), strict=True):
            assert got.dtype == want.dtype and torch.equal(got, want)
