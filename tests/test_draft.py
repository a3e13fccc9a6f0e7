"""Draft models: cut from a target (bench.models.drafts) and loaded on demand (bench.models.loading); their distillation
is tests/test_draft_training.py's. Tiny random Llamas, which that file uses too."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from transformers import LlamaConfig, LlamaForCausalLM

from bench.core.forward import cache_kw
from bench.errors import HarnessError
from bench.models.drafts import agreement, cost_ratio, init_draft_from_target, pick_layers
from bench.models.loading import ModelBundle, drafts_dir, load_model

V = 64


def llama(layers: int, vocab: int = V, tie: bool = False, seed: int = 0):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                      initializer_range=0.1, tie_word_embeddings=tie, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).eval()


def tokens(n: int, length: int, vocab: int = V, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(seed))


# -- init_draft_from_target -----------------------------------------------------------------------------


@pytest.mark.parametrize("tie", [False, True])
def test_one_layer_draft_of_one_layer_target_is_the_target(tie):
    target = llama(1, tie=tie)
    draft = init_draft_from_target(target, 1)
    x = tokens(2, 12)
    with torch.inference_mode():
        assert torch.equal(target(x).logits, draft(x).logits)
    assert (draft.lm_head.weight is draft.model.embed_tokens.weight) == tie
    assert not draft.training and draft.dtype == target.dtype


def test_chosen_layers_are_copied_not_shared():
    target = llama(5)
    draft = init_draft_from_target(target, 2, [1, 4])
    assert draft.config.num_hidden_layers == 2 and draft.config.draft_layer_ids == [1, 4]
    for j, i in enumerate([1, 4]):
        for (name, p), (_, q) in zip(draft.model.layers[j].named_parameters(),
                                     target.model.layers[i].named_parameters(), strict=True):
            assert torch.equal(p, q), name
            assert p.data_ptr() != q.data_ptr()
    assert torch.equal(draft.model.norm.weight, target.model.norm.weight)
    assert torch.equal(draft.lm_head.weight, target.lm_head.weight)
    # A 2-layer cut of a 5-layer target is another model: its output differs from the target's.
    x = tokens(1, 10)
    with torch.inference_mode():
        assert not torch.allclose(target(x).logits, draft(x).logits)


def test_draft_decodes_with_a_kv_cache_like_a_full_forward():
    """Copied attention layers must index the draft's own cache (layer_idx 0..n-1, not the target's ids)."""
    from transformers import DynamicCache

    draft = init_draft_from_target(llama(4), 2, [1, 3])
    x = tokens(1, 9)
    with torch.inference_mode():
        full = draft(x).logits[0, -1]
        cache = DynamicCache(config=draft.config)
        draft(x[:, :-1], **cache_kw(draft, cache), use_cache=True)
        step = draft(x[:, -1:], **cache_kw(draft, cache), use_cache=True).logits[0, -1]
    assert torch.allclose(full, step, atol=1e-5)


def test_init_is_deterministic_and_default_layers_are_the_first():
    target = llama(6)
    a, b = init_draft_from_target(target, 3), init_draft_from_target(target, 3)
    assert a.config.draft_layer_ids == [0, 1, 2]
    for (name, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(p, q), name


def test_layer_choices():
    assert pick_layers(30, 4) == [0, 1, 2, 3]
    assert pick_layers(30, 4, "spread") == [0, 10, 19, 29]
    assert pick_layers(30, 2, [5, 7]) == [5, 7]
    for bad in ([(30, 0, "first"), (30, 31, "first"), (30, 2, [0, 30]), (30, 2, [0]), (30, 2, "last")]):
        with pytest.raises(HarnessError):
            pick_layers(*bad)


def test_agreement_and_cost():
    target = llama(4)
    batches = [tokens(2, 16, seed=s) for s in range(2)]
    assert agreement(target, target, batches) == 1.0
    other = llama(4, seed=5)
    assert agreement(target, other, batches) < 0.5  # independent random models rarely agree
    ratio = cost_ratio(target, init_draft_from_target(target, 1), steps=4)
    assert 0 < ratio < 10


# -- loading the draft ------------------------------------------------------------------------------------


def bundle_for(target, draft_cfg, model_cache) -> ModelBundle:
    return ModelBundle(name="tiny", model=target, tokenizer=None, device=torch.device("cpu"), dtype=torch.float32,
                       vocab_size=V, eos_token_ids=[0], pad_token_id=0, max_context=256, source="test",
                       draft_cfg=None if draft_cfg is None else OmegaConf.create(draft_cfg),
                       model_cache=str(model_cache))


def one_line_error(bundle) -> str:
    with pytest.raises(HarnessError) as err:
        bundle.load_draft()
    message = str(err.value)
    assert "\n" not in message
    return message


def test_load_draft_errors(tmp_path, monkeypatch):
    target = llama(2)
    cache = tmp_path / "models"
    assert one_line_error(bundle_for(target, None, cache)) == "model 'tiny' has no draft model (set model.draft)"
    trained = {"name": "tiny-draft", "source": "trained", "id": "tiny-draft"}
    assert one_line_error(bundle_for(target, trained, cache)).startswith(
        "draft 'tiny-draft' is not built: run `make draft`")
    missing = {"name": "d", "source": "path", "id": str(tmp_path / "nowhere")}
    assert "does not exist" in one_line_error(bundle_for(target, missing, cache))
    # No network here either way; offline fails fast. huggingface_hub reads the variable once, at import: without
    # its constant set too, a hub lookup retries a dead network for ~23 s before failing the same way.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    hub = {"name": "d", "source": "hub", "id": "nobody/no-such-draft-model"}
    assert one_line_error(bundle_for(target, hub, cache)).startswith(
        "cannot load draft 'd' from hub 'nobody/no-such-draft-model'")
    llama(1, vocab=V + 8).save_pretrained(tmp_path / "wide")
    wide = {"name": "wide", "source": "path", "id": str(tmp_path / "wide")}
    assert one_line_error(bundle_for(target, wide, cache)) == (
        f"draft 'wide' has vocabulary size {V + 8}, target 'tiny' has {V}: a draft must share the target's tokenizer")
    assert one_line_error(bundle_for(target, {**trained, "source": "carrier-pigeon"}, cache)).startswith(
        "unknown draft source")


def test_trained_draft_is_loaded_once(tmp_path):
    target = llama(3)
    cache = tmp_path / "models"
    saved = init_draft_from_target(target, 1)
    saved.save_pretrained(drafts_dir(cache) / "tiny-draft")
    bundle = bundle_for(target, {"name": "tiny-draft", "source": "trained", "id": "tiny-draft"}, cache)
    assert bundle.draft is None
    draft = bundle.load_draft()
    assert bundle.load_draft() is draft and not draft.training
    assert drafts_dir(cache) == tmp_path / "drafts"
    x = tokens(1, 8)
    with torch.inference_mode():
        assert torch.equal(draft(x).logits, saved(x).logits)


def test_loading_the_target_does_not_load_the_draft(tmp_path, smol_tokenizer):
    folder = tmp_path / "target"
    llama(1, vocab=len(smol_tokenizer)).save_pretrained(folder)
    smol_tokenizer.save_pretrained(folder)
    cfg = OmegaConf.create({
        "name": "tiny", "target": {"source": "path", "id": str(folder)},
        "draft": {"name": "tiny-draft", "source": "trained", "id": "not-built"},
        "dtype": "float32", "device": "cpu", "attn_implementation": "sdpa",
    })
    bundle = load_model(cfg, str(tmp_path / "models"))  # the draft is not built: no error yet
    assert bundle.draft is None and bundle.draft_cfg.id == "not-built"
    assert "is not built" in one_line_error(bundle)
