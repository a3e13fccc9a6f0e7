"""Draft models: cut from a target (bench.models.drafts), loaded on demand (bench.models.loading), distilled
(bench.train.draft, scripts/train_draft.py). Tiny random Llamas; the SmolLM2 tokenizer for chat data."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from transformers import LlamaConfig, LlamaForCausalLM

from bench.core.forward import cache_kw
from bench.errors import HarnessError
from bench.models.drafts import agreement, cost_ratio, init_draft_from_target, pick_layers
from bench.models.loading import ModelBundle, drafts_dir, load_model
from bench.train.draft import (
    REPORT,
    batches,
    build_draft,
    evaluate,
    prepare_draft,
    read_report,
    summary_line,
    train,
    trimmed_distill_loss,
    write_draft,
)
from bench.train.draft_data import DraftData, Sequences, to_sequences
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


def test_trimmed_distill_loss_is_cross_entropy_to_the_renormalised_target():
    logits = torch.randn(3, 4)  # V' = 4 tokens: ids 10, 11, 12, 13
    index_of = torch.full((20,), -1)
    index_of[10:14] = torch.arange(4)
    topk_ids = torch.tensor([[10, 12, 5], [13, 3, 4], [1, 2, 3]])  # row 2: nothing inside V' (skipped)
    topk_logp = torch.log(torch.tensor([[0.5, 0.2, 0.3], [0.6, 0.2, 0.2], [0.5, 0.3, 0.2]]))
    log_q = torch.log_softmax(logits, -1)
    row0 = -(5 / 7 * log_q[0, 0] + 2 / 7 * log_q[0, 2])  # p over {10, 12} renormalised: 0.5 and 0.2 of 0.7
    row1 = -log_q[1, 3]
    got = trimmed_distill_loss(logits, topk_ids, topk_logp.half(), index_of)
    assert torch.allclose(got, (row0 + row1) / 2, atol=1e-3)
    # The skipped row must not poison the gradient either.
    logits.requires_grad_(True)
    trimmed_distill_loss(logits, topk_ids, topk_logp.half(), index_of).backward()
    assert torch.isfinite(logits.grad).all() and (logits.grad[2] == 0).all()


def test_batches_respect_the_token_budget():
    seqs = sequences([[1, 2, 3], [4, 5], [6, 7, 8, 9, 10], [11]], prompt=1)
    groups = batches(seqs, [0, 1, 2, 3], max_tokens=6)
    assert sorted(s for g in groups for s in g) == [0, 1, 2, 3]
    lengths = [3, 2, 5, 1]
    assert all(max(lengths[s] for s in g) * len(g) <= 6 or len(g) == 1 for g in groups)


def sequences(seqs: list[list[int]], prompt: int, target=None, k: int = 4) -> Sequences:
    """Sequences of the given ids (first `prompt` tokens the prompt) with the target's top-k (or random)."""
    items = []
    for i, ids in enumerate(seqs):
        n = len(ids) - prompt
        if target is not None:
            with torch.inference_mode():
                logp = torch.log_softmax(target(input_ids=torch.tensor([ids])).logits[0, prompt - 1 : prompt - 1 + n],
                                         -1)
        else:
            logp = torch.log_softmax(torch.randn(n, V), -1)
        top = logp.topk(k, -1)
        items.append((i % 2, False, (ids[:prompt], ids[prompt:], top.indices.int(), top.values.half())))
    return to_sequences(items)


def test_training_lowers_the_loss_and_freezes_embeddings():
    target = llama(3)
    draft = prepare_draft(target, {"layers": 1, "init_layers": "first"})
    embed = draft.model.embed_tokens.weight.clone()
    train_seqs = sequences(tokens(6, 24).tolist(), prompt=4, target=target)
    data = DraftData(train_seqs, train_seqs, ["a", "b"])
    ranking = list(range(V))
    index_of = torch.arange(V)
    recipe = {"batch_tokens": 48, "lr": 1e-2, "warmup_steps": 0, "max_minutes": 5, "max_steps": 12, "seed": 0,
              "eval_every_minutes": None}
    before = evaluate(draft, data, ranking, [V], pad=0, max_tokens=64)
    result = train(draft, data, index_of, torch.tensor(ranking), recipe, pad=0, progress_bar=False)
    losses = [c["loss"] for c in result["loss_curve"]]
    assert result["steps"] == 12 and len(losses) == 12
    assert sum(losses[-3:]) < 0.8 * sum(losses[:3])
    assert torch.equal(draft.model.embed_tokens.weight, embed)
    after = evaluate(draft, data, ranking, [8, V], pad=0, max_tokens=64)
    assert sum(after["agreement"][V].values()) > sum(before["agreement"][V].values())
    assert set(after["agreement"][8]) == {"a", "b"} and len(after["hits"]) == 8 and sum(after["hits"]) <= 1


class FailingDraft:
    """Writes part of a model, then fails: as a crash or a full disk in the middle of save_pretrained."""

    def save_pretrained(self, folder):
        Path(folder, "config.json").write_text("{}")
        raise OSError("disk full")


def test_write_is_atomic(tmp_path):
    out = tmp_path / "drafts" / "d"
    with pytest.raises(OSError):
        write_draft(FailingDraft(), None, {"x": 1}, None, 0, out)
    assert not out.exists()  # nothing that looks complete
    write_draft(llama(1), None, {"x": 1}, list(range(V)), 10, out)
    assert read_report(out) == {"x": 1} and (out / "vocab.json").is_file()
    with pytest.raises(OSError):
        write_draft(FailingDraft(), None, {"x": 2}, None, 0, out)
    assert read_report(out) == {"x": 1}  # the previous draft survives a failed rebuild
    assert sorted(p.name for p in out.parent.iterdir()) == ["d"]  # the half-written folder is removed


HUMANEVAL_0 = "Check if in given list of numbers, are any two numbers closer to each other than given threshold."


def write_mirror(root: Path) -> None:
    (root / "t").mkdir(parents=True)
    text = [{"text": f"Row {i} of plain text about rivers, mountains and the weather in spring. " * 6}
            for i in range(12)]
    text[3]["text"] = "Copied from an evaluation set: " + HUMANEVAL_0  # must be dropped from training
    (root / "t" / "text.jsonl").write_text("".join(json.dumps(r) + "\n" for r in text))
    chat = [{"instruction": f"Question {i}: name a colour."} for i in range(8)]
    (root / "t" / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chat))


def test_build_draft_smoke(tmp_path, smol_tokenizer):
    """End to end on a tiny target: prompts split and decontaminated, greedy and sampled answers with their
    top-k cached, three training steps, report, atomic folder with its ranking, loadable trimmed."""
    mirror = tmp_path / "mirror"
    write_mirror(mirror)
    target = llama(2, vocab=len(smol_tokenizer))
    data = {
        "temperature": 0.6, "max_new_tokens": 6, "max_prompt_tokens": 64, "generate_batch_size": 4, "topk": 4,
        "window_words": 12, "seed": 0,
        "sources": [
            {"name": "chat", "mirror_path": "t/chat.jsonl", "format": "jsonl", "prompt": "{instruction}",
             "heldout_every": 4, "greedy": 3, "sampled": 2, "heldout": 2},
            {"name": "text", "mirror_path": "t/text.jsonl", "format": "jsonl", "prompt": "{text}", "chat": False,
             "prompt_tokens": 8, "train_rows": [0, 8], "heldout_rows": [8, 12], "greedy": 4, "sampled": 3,
             "heldout": 2},
        ],
        "disjoint_from": [{"dataset": "humaneval"}],
    }
    recipe = {"layers": 1, "init_layers": "first", "vocab": 256, "vocab_report": [64, 256], "batch_tokens": 256,
              "lr": 1e-3, "warmup_steps": 1, "grad_clip": 1.0, "max_minutes": 5, "max_steps": 3,
              "eval_every_minutes": None, "cost_steps": 2, "seed": 0, "data": data}
    model_cfg = OmegaConf.create({"name": "tiny", "target": {"source": "path", "id": "x"}, "dtype": "float32",
                                  "chat_template": "tokenizer",
                                  "draft": {"name": "tiny-draft", "source": "trained", "id": "tiny-draft",
                                            "vocab": 256, "train": recipe}})
    out = drafts_dir(tmp_path / "models") / "tiny-draft"
    report = build_draft(target, smol_tokenizer, model_cfg, out, str(mirror), str(tmp_path / "cache"),
                         progress_bar=False)
    assert sorted(p.name for p in out.parent.iterdir()) == ["selfdistill", "tiny-draft"]
    assert (out / "config.json").is_file() and json.loads((out / REPORT).read_text()) == report
    assert report["steps"] == 3 and len(report["loss_curve"]) == 3 and report["layers"] == 1
    assert all(math.isfinite(c["loss"]) for c in report["loss_curve"])
    assert set(report["agreement"]) == set(report["agreement_untrained"]) == {"text", "chat"}
    assert all(0 <= a <= 1 for a in report["agreement"].values())
    full = str(len(smol_tokenizer))
    assert set(report["coverage"]) == set(report["agreement_by_vocab"]) == {"64", "256", full}
    assert report["coverage"]["64"] <= report["coverage"]["256"] <= report["coverage"][full] == 1.0
    assert set(report["cost_ratio_by_vocab"]) == {"64", "256", "full"} and report["cost_ratio"] > 0
    assert set(report["predicted"]["256"]["this_machine"]) >= {"chain_speedup", "tree_speedup"}
    text = report["data"]["sources"]["text"]
    assert text["dropped_overlapping_eval"] == 1 and text["train_greedy"]["responses"] == 4
    assert text["train_sampled"]["responses"] == 3 and text["heldout_greedy"]["responses"] == 2
    assert report["data"]["sources"]["chat"]["heldout"] == 2
    assert "agreement with tiny" in summary_line(report)
    bundle = bundle_for(target, {"name": "tiny-draft", "source": "trained", "id": "tiny-draft", "vocab": 256},
                        tmp_path / "models")
    bundle = replace(bundle, vocab_size=len(smol_tokenizer))
    draft = bundle.load_draft()
    assert draft.config.num_hidden_layers == 1 and draft.vocab_ids.numel() == 256
    # A second build finds the cached answers (no generation): same data, same report apart from timings.
    again = build_draft(target, smol_tokenizer, model_cfg, out, str(mirror), str(tmp_path / "cache"),
                        progress_bar=False)
    assert again["data"]["cache"] == report["data"]["cache"] and again["coverage"] == report["coverage"]


def test_raw_text_prompts_are_the_first_tokens(smol_tokenizer, tmp_path):
    from bench.train.selfdistill import collect_prompts

    write_mirror(tmp_path)
    src = {"name": "text", "mirror_path": "t/text.jsonl", "format": "jsonl", "prompt": "{text}", "chat": False,
           "prompt_tokens": 8, "train_rows": [0, 8], "heldout_rows": [8, 12]}
    found, _ = collect_prompts({"sources": [src]}, smol_tokenizer, "tokenizer", str(tmp_path), str(tmp_path))
    assert all(len(p) == 8 for p in found["train"] + found["heldout"]) and len(found["train"]) == 8
    assert smol_tokenizer.decode(found["train"][0]).startswith("Row ")


def test_a_split_capped_at_zero_is_left_empty_on_purpose(smol_tokenizer, tmp_path):
    """An evaluation-only source (EAGLE-3's generated answers: train 0) keeps its held-out prompts; a recipe that
    leaves nothing at all is still one error."""
    from bench.train.selfdistill import collect_prompts

    write_mirror(tmp_path)
    src = {"name": "text", "mirror_path": "t/text.jsonl", "format": "jsonl", "prompt": "{text}",
           "train_rows": [0, 8], "heldout_rows": [8, 12]}
    found, _ = collect_prompts({"sources": [src], "max_train_prompts": 0}, smol_tokenizer, "tokenizer",
                               str(tmp_path), str(tmp_path))
    assert found["train"] == [] and len(found["heldout"]) == 4
    with pytest.raises(HarnessError, match="no prompts left"):
        collect_prompts({"sources": [src], "max_train_prompts": 0, "max_heldout_prompts": 0}, smol_tokenizer,
                        "tokenizer", str(tmp_path), str(tmp_path))


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


def test_sweep_rows_and_choice():
    from scripts.draft_sweep import choose, sweep_rows

    def report(layers, alpha, cost):
        from bench.train.draft_choice import predictions, verify_curve

        verify = {"1": 1.0, "65": 3.0}

        def entry(vocab, c):
            return {"vocab": vocab, "agreement": alpha, "cost_ratio": c,
                    "this_machine": predictions(alpha, [alpha, 0.1], c, verify=verify_curve(verify)),
                    "gpu_like": predictions(alpha, [alpha, 0.1], c)}

        return {"layers": layers, "vocab": 8, "train_seconds": 120, "sources": ["chat"], "verify_ratio": verify,
                "predicted": {"8": entry(8, cost), "full": entry(64, 2 * cost)},
                "agreement_during_training": [{"minutes": 1.0, "agreement": {"chat": alpha / 2},
                                               "hits": [alpha / 2, 0.1]}]}

    rows = [row for r in (report(2, 0.6, 0.1), report(4, 0.6, 0.2)) for row in sweep_rows(r)]
    assert len(rows) == 6 and {r["minutes"] for r in rows} == {1.0, 2.0}
    import pandas as pd

    # Same agreement, half the cost, fully trained: the 2-layer draft at V' = 8 wins every criterion.
    lines = choose(pd.DataFrame(rows))
    assert len(lines) == 4 and all("2 layers, V' = 8, 2.0 min" in line for line in lines)


def test_sweep_script_needs_a_sweep_block(capsys):
    from scripts.draft_sweep import main

    assert main(["model=vicuna-7b"]) == 2
    assert capsys.readouterr().err.strip() == "error: model 'vicuna-7b' has no draft.sweep block"
