"""Draft models distilled from a target (bench.train.draft, scripts/train_draft.py, the draft sweep): the loss, the
batches, training, the atomic write, the data build and the scripts. Tiny random Llamas (tests/test_draft.py's);
the SmolLM2 tokenizer for chat data."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from bench.errors import HarnessError
from bench.models.loading import drafts_dir
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
from tests.test_draft import V, bundle_for, llama, tokens

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
