"""Settings a run refuses before anything is measured, and configs that pick the right source (issue 40, defects 5,
7, 15 and 16): no real model, tiny stand-ins and a faked CUDA node."""

from __future__ import annotations

import pytest
import torch
from omegaconf import open_dict

from bench.errors import ConfigError, HarnessError
from bench.models.loading import ModelBundle
from bench.run import jobs, runner
from bench.run.validate import check_method
from tests.conftest import compose_cfg, tiny_llama
from tests.test_pair_loading import word_tokenizer


def test_only_the_attentions_the_engine_can_mask_pass_before_the_model_loads():
    cfg = compose_cfg("method=token_recycling")
    for attn in ("flash_attention_2", "flash_attention_3", "flex_attention", "sdpa_paged"):
        cfg.model.attn_implementation = attn
        with pytest.raises(ConfigError, match=f"model.attn_implementation={attn} cannot apply"):
            check_method(cfg)
    for attn in ("eager", "sdpa"):
        cfg.model.attn_implementation = attn
        check_method(cfg)


def test_eagle_goals_use_the_models_own_head():
    for model, source in (("vicuna-7b", "hub"), ("smollm2-135m", "trained")):
        assert compose_cfg("experiment=eagle/goals", f"model={model}").model.eagle.source == source


def tiny_runner(monkeypatch, tmp_path, max_new: int, context: int, words=("<unk>",), extra=()):
    """A Runner over MT-Bench's first question on a tiny model whose tokenizer makes one token of each word."""
    bundle = ModelBundle(name="tiny", model=tiny_llama(), tokenizer=word_tokenizer(list(words)),  # default: every word <unk>
                         device=torch.device("cpu"), dtype=torch.float32, vocab_size=64, eos_token_ids=[0],
                         pad_token_id=0, max_context=context, source="test")
    monkeypatch.setattr(runner, "get_bundle", lambda *a, **k: bundle)
    # MT-Bench's question 81 itself: the test needs no copy of the dataset (a clean clone may have none)
    item = {"question_id": 81, "category": "writing", "group": "writing", "turns": [
        ("Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences "
         "and must-see attractions."),
        "Rewrite your previous response. Start every sentence with the letter A."]}
    monkeypatch.setattr(runner, "load_selection", lambda *a, **k: ([item], "question 81"))
    cfg = compose_cfg("dataset=mt_bench", "method=ar", "run.limit=1", f"run.max_new_tokens={max_new}",
                      "model.chat_template=none", f"paths.results={tmp_path}", *extra)
    return runner.Runner(cfg)


def test_a_later_turn_that_may_not_fit_is_refused_before_the_run_starts(monkeypatch, tmp_path):
    # MT-Bench question 81: 20 words in turn 1, 10 in turn 2 (template none: one token per word, BOS aside)
    first = len(word_tokenizer(["<unk>"])(
        "Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences "
        "and must-see attractions.").input_ids)
    context = first + 100 + 16 + 40  # turn 1 fits with 40 tokens to spare; turn 2 adds turn 1's answer (100)
    with pytest.raises(HarnessError, match="turn 2 of question 81: prompt of up to"):
        tiny_runner(monkeypatch, tmp_path, max_new=100, context=context)
    tiny_runner(monkeypatch, tmp_path, max_new=100, context=context + 100)  # room for both turns


def test_graph_mode_sizes_its_cache_to_the_dataset(monkeypatch, tmp_path):
    """run.graph_capacity=auto: the longest prompt (turn 2, counting turn 1's answer at max_new_tokens) and its output
    plus the widest bucket, rounded up to 64, as transformers sizes its static cache to the run; a number is kept."""
    from bench.core.graph_engine import DRAFT_ROOM, sized_capacity

    assert [sized_capacity(n) for n in (0, 300, 320, 384)] == [128, 448, 448, 512]
    tok = word_tokenizer(["<unk>"])
    first = ("Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences "
             "and must-see attractions.")
    second = len(tok(f"{first} Rewrite your previous response. Start every sentence with the letter A.").input_ids)
    auto = tiny_runner(monkeypatch, tmp_path, max_new=40, context=1024, extra=("run.graphs=true",))
    assert auto.capacity == auto.engine.kv.capacity == sized_capacity(second + 40 + 40)
    assert auto.capacity % 64 == 0 and auto.capacity >= second + 2 * 40 + DRAFT_ROOM
    fixed = tiny_runner(monkeypatch, tmp_path, max_new=40, context=1024,
                        extra=("run.graphs=true", "run.graph_capacity=960"))
    assert fixed.engine.kv.capacity == 960


def fake_cuda(monkeypatch, gpus: int):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)


def test_the_parallel_launcher_refuses_several_jobs_sharing_one_gpu(monkeypatch):
    model = compose_cfg("model=vicuna-7b").model
    fake_cuda(monkeypatch, gpus=2)
    with pytest.raises(HarnessError, match="runs 3 jobs at once"):
        jobs.check_gpu_jobs(model, 3)
    with pytest.raises(HarnessError, match="one sweep per GPU"):
        jobs.check_gpu_jobs(model, 2)  # two GPUs, but both jobs would load on cuda (cuda:0)
    jobs.check_gpu_jobs(model, 1)
    with open_dict(model):
        model.device = "cpu"
    jobs.check_gpu_jobs(model, 16)  # CPU jobs on a GPU node: one per core, as before
    fake_cuda(monkeypatch, gpus=0)
    jobs.check_gpu_jobs(compose_cfg("model=vicuna-7b").model, 4)  # no GPU: the model fails to load by itself


def test_a_prompt_outside_the_models_vocabulary_is_refused(monkeypatch, tmp_path):
    """A random-init shape with fewer tokens than the tokenizer (llama-7b's 32000 under SmolLM2's 49152) would index
    past the embedding: refused in one line before anything runs."""
    words = ["<unk>"] + [f"w{i}" for i in range(69)] + ["Compose"]  # "Compose" is token 70 of a 64-token model
    with pytest.raises(HarnessError, match="prompt token id 70 is outside the 64-token vocabulary"):
        tiny_runner(monkeypatch, tmp_path, max_new=8, context=512, words=words)


def test_the_recorded_selection_says_what_the_runs_limits_kept(monkeypatch, tmp_path):
    """A summary's `selection` said "all 3 rows in file order" of a run.limit=2 run."""
    items = [{"question_id": q, "category": "writing", "group": "writing", "turns": ["a b c"]} for q in (1, 2, 3)]
    monkeypatch.setattr(runner, "load_selection", lambda *a, **k: (items, "all 3 rows in file order"))
    bundle = ModelBundle(name="tiny", model=tiny_llama(), tokenizer=word_tokenizer(["<unk>"]),
                         device=torch.device("cpu"), dtype=torch.float32, vocab_size=64, eos_token_ids=[0],
                         pad_token_id=0, max_context=256, source="test")
    monkeypatch.setattr(runner, "get_bundle", lambda *a, **k: bundle)
    cfg = compose_cfg("dataset=mt_bench", "method=ar", "run.limit=2", "run.max_new_tokens=4",
                      "model.chat_template=none", f"paths.results={tmp_path}")
    assert runner.Runner(cfg).selection == "all 3 rows in file order; run: 2 of them (the first 2)"
