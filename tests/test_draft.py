"""Draft models: cut from a target (bench.draft_model), loaded on demand (bench.models), distilled
(bench.draft_training, scripts/train_draft.py). Tiny random Llamas; the SmolLM2 tokenizer for chat data."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from transformers import LlamaConfig, LlamaForCausalLM

from bench.errors import HarnessError
from bench.models.drafts import agreement, cost_ratio, init_draft_from_target, pick_layers
from bench.models.loading import ModelBundle, drafts_dir, load_model
from bench.models.training import (
    REPORT,
    build_draft,
    distill_loss,
    pack,
    read_report,
    summary_line,
    train,
    write_draft,
)
from tests.conftest import compose_cfg

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
        draft(x[:, :-1], past_key_values=cache, use_cache=True)
        step = draft(x[:, -1:], past_key_values=cache, use_cache=True).logits[0, -1]
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
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network here either way; offline fails fast
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


@pytest.fixture(scope="module")
def smol_tokenizer():
    from bench.models.loading import load_tokenizer

    return load_tokenizer(compose_cfg("model=smollm2-135m").model)


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


# -- distillation -----------------------------------------------------------------------------------------


def test_distill_loss_is_kl_target_to_draft():
    t, d = torch.randn(2, 3, 7), torch.randn(2, 3, 7)
    p, q = t.softmax(-1), d.softmax(-1)
    expected = (p * (p.log() - q.log())).sum(-1).mean()
    assert torch.allclose(distill_loss(t, d), expected, atol=1e-6)
    assert distill_loss(t, t).abs() < 1e-6


def test_training_lowers_the_loss_and_freezes_embeddings():
    target = llama(3)
    draft = init_draft_from_target(target, 1)
    embed = draft.model.embed_tokens.weight.clone()
    windows = tokens(4, 32)
    recipe = {"batch_size": 2, "lr": 1e-2, "warmup_steps": 0, "max_minutes": 5, "max_tokens": 10**6,
              "max_steps": 12, "seed": 0}
    result = train(target, draft, windows, recipe, progress_bar=False)
    losses = [c["loss"] for c in result["loss_curve"]]
    assert result["steps"] == 12 and result["trained_tokens"] == 12 * 2 * 32
    assert losses[-1] < 0.7 * losses[0]
    assert torch.equal(draft.model.embed_tokens.weight, embed)
    assert not draft.training and not any(p.requires_grad for p in draft.parameters())


def test_pack_drops_only_the_tail():
    out = pack([[1, 2, 3], [4, 5], [6, 7, 8, 9]], 4)
    assert out.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]]
    with pytest.raises(HarnessError):
        pack([[1, 2]], 4)


class FailingDraft:
    """Writes part of a model, then fails: as a crash or a full disk in the middle of save_pretrained."""

    def save_pretrained(self, folder):
        Path(folder, "config.json").write_text("{}")
        raise OSError("disk full")


def test_write_is_atomic(tmp_path):
    out = tmp_path / "drafts" / "d"
    with pytest.raises(OSError):
        write_draft(FailingDraft(), None, {"x": 1}, out)
    assert not out.exists()  # nothing that looks complete
    write_draft(llama(1), None, {"x": 1}, out)
    assert read_report(out) == {"x": 1}
    with pytest.raises(OSError):
        write_draft(FailingDraft(), None, {"x": 2}, out)
    assert read_report(out) == {"x": 1}  # the previous draft survives a failed rebuild
    assert sorted(p.name for p in out.parent.iterdir()) == ["d"]  # the half-written folder is removed


HUMANEVAL_0 = "Check if in given list of numbers, are any two numbers closer to each other than given threshold."


def write_mirror(root: Path) -> None:
    (root / "t").mkdir(parents=True)
    text = [{"text": f"Row {i} of plain text about rivers, mountains and the weather in spring. " * 6}
            for i in range(12)]
    text[3]["text"] = "Copied from an evaluation set: " + HUMANEVAL_0  # must be dropped from training
    (root / "t" / "text.jsonl").write_text("".join(json.dumps(r) + "\n" for r in text))
    chat = [{"instruction": f"Question {i}: name a colour.", "output": f"Answer {i}: blue."} for i in range(8)]
    (root / "t" / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chat))


def test_build_draft_smoke(tmp_path, smol_tokenizer):
    """Three training steps end to end: data split and decontamination, report, atomic folder, loadable."""
    mirror = tmp_path / "mirror"
    write_mirror(mirror)
    target = llama(2, vocab=len(smol_tokenizer))
    recipe = {
        "layers": 1, "init_layers": "first", "seq_len": 32, "batch_size": 2, "lr": 1e-3, "warmup_steps": 1,
        "grad_clip": 1.0, "max_minutes": 5, "max_tokens": 10**6, "max_steps": 3, "seed": 0, "eval_tokens": 64,
        "cost_steps": 2, "window_words": 12,
        "sources": [
            {"name": "text", "mirror_path": "t/text.jsonl", "format": "jsonl", "text": "{text}",
             "train_rows": [0, 8], "heldout_rows": [8, 12]},
            {"name": "chat", "mirror_path": "t/chat.jsonl", "format": "jsonl",
             "chat": {"user": "{instruction}", "assistant": "{output}"}, "heldout_every": 4},
        ],
        "disjoint_from": [{"dataset": "humaneval"}],
    }
    model_cfg = OmegaConf.create({"name": "tiny", "target": {"source": "path", "id": "x"},
                                  "chat_template": "tokenizer",
                                  "draft": {"name": "tiny-draft", "source": "trained", "id": "tiny-draft",
                                            "train": recipe}})
    out = drafts_dir(tmp_path / "models") / "tiny-draft"
    report = build_draft(target, smol_tokenizer, model_cfg, out, str(mirror), str(tmp_path / "cache"),
                         progress_bar=False)
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny-draft"]
    assert (out / "config.json").is_file() and json.loads((out / REPORT).read_text()) == report
    assert report["steps"] == 3 and len(report["loss_curve"]) == 3 and report["layers"] == 1
    assert set(report["agreement"]) == set(report["agreement_untrained"]) == {"text", "chat"}
    assert all(0 <= a <= 1 for a in report["agreement"].values())
    assert report["cost_ratio"] > 0 and report["recipe"] == recipe
    data = report["data"]
    assert data["text"]["train_documents"] == 7 and data["text"]["dropped_overlapping_eval"] == 1
    assert data["text"]["heldout_documents"] == 4
    assert data["chat"]["heldout_documents"] == 2 and data["chat"]["train_documents"] == 6
    assert "agreement with tiny" in summary_line(report)
    bundle = bundle_for(target, {"name": "tiny-draft", "source": "trained", "id": "tiny-draft"},
                        tmp_path / "models")
    bundle = replace(bundle, vocab_size=len(smol_tokenizer))
    assert bundle.load_draft().config.num_hidden_layers == 1


def test_chat_documents_use_the_chat_template(smol_tokenizer):
    from bench.models.chat import prompt_ids
    from bench.models.training import document_ids

    src = {"chat": {"user": "{instruction}", "assistant": "{output}"}}
    text, ids = document_ids({"instruction": "Hi?", "output": "Hello."}, src, smol_tokenizer, "tokenizer", 2)
    prompt = prompt_ids(smol_tokenizer, "tokenizer", [], "Hi?")
    assert ids[: len(prompt)] == prompt and ids[-1] == 2
    assert smol_tokenizer.decode(ids[len(prompt) : -1]) == "Hello."
    assert "Hi?" in text and "Hello." in text


# -- the script -------------------------------------------------------------------------------------------


def test_script_errors_are_one_line(capsys):
    from scripts.train_draft import main

    assert main(["--bogus"]) == 2
    assert main(["model=no-such-model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)


def test_script_gives_draftless_models_the_reference_recipe():
    from scripts.train_draft import with_trained_draft

    smol = compose_cfg("model=smollm2-135m").model
    same, hint = with_trained_draft(smol)
    assert same is smol and hint is None
    cfg, hint = with_trained_draft(compose_cfg("model=vicuna-7b").model)
    assert cfg.draft.source == "trained" and cfg.draft.id == "vicuna-7b-draft"
    assert OmegaConf.to_container(cfg.draft.train) == OmegaConf.to_container(smol.draft.train)
    assert "vicuna-7b-draft" in hint


def test_model_configs_name_their_drafts():
    for size, draft in (("7b", "JackFram/llama-68m"), ("13b", "JackFram/llama-68m"),
                        ("70b", "meta-llama/Llama-2-7b-hf")):
        cfg = compose_cfg(f"model=llama-2-{size}").model
        assert cfg.target.id == f"meta-llama/Llama-2-{size}-hf" and cfg.dtype == "float16"
        assert cfg.draft.source == "hub" and cfg.draft.id == draft and cfg.chat_template == "none"
    smol = compose_cfg("model=smollm2-135m").model.draft
    assert smol.source == "trained" and 2 <= smol.train.layers <= 4
