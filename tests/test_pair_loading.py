"""The papers' model pairs load and fit (issue 40, defects 4, 13 and 14), shown on tiny random models and fake
device sizes: no weights, no GPU.

- A draft whose vocabulary contains the target's (CodeLlama-7B-Instruct's 32016 tokens against 34B's 32000) loads
  with its extra rows sliced off; a draft with another vocabulary is still refused.
- Without a device map the target is loaded straight onto its device (never staged whole in host memory), and the
  fit check counts host RAM where a device map puts weights on the host.
- With `device_map: auto` the draft's bytes are kept free on the first GPU, where the draft goes.
"""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf, open_dict

from bench.errors import HarnessError
from bench.models import loading, placement
from bench.models.loading import ModelBundle
from tests.conftest import compose_cfg
from tests.test_draft import llama

LLAMA_70B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
             "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
             "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096}
LLAMA_7B = {**LLAMA_70B, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 32}
GPU = 80e9  # bytes per fake GPU (an "80 GB" card reports ~85e9; the round figure keeps the arithmetic plain)


def word_tokenizer(words: list[str]):
    """A fast tokenizer whose token i is words[i] (one word, one token)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=words[0])


def saved_draft(folder, vocab: int, words: list[str]):
    draft = llama(1, vocab=vocab, seed=3)
    draft.save_pretrained(folder)
    word_tokenizer(words).save_pretrained(folder)
    return draft


def bundle_with_draft(target, tokenizer, folder) -> ModelBundle:
    cfg = OmegaConf.create({"name": "tiny-draft", "source": "path", "id": str(folder), "vocab": None})
    return ModelBundle(name="tiny", model=target, tokenizer=tokenizer, device=torch.device("cpu"),
                       dtype=torch.float32, vocab_size=target.config.vocab_size, eos_token_ids=[0], pad_token_id=0,
                       max_context=256, source="test", draft_cfg=cfg)


SHARED = [f"w{i}" for i in range(64)]


def test_a_draft_whose_vocabulary_contains_the_targets_loads_with_the_extra_rows_sliced_off(tmp_path):
    target = llama(1, vocab=64)
    original = saved_draft(tmp_path, 72, SHARED + [f"<fill{i}>" for i in range(8)])  # 8 infilling-like extras
    draft = bundle_with_draft(target, word_tokenizer(SHARED), tmp_path).load_draft()
    assert draft.get_output_embeddings().weight.shape[0] == 64
    assert draft.get_input_embeddings().weight.shape[0] == 64 and draft.config.vocab_size == 64
    ids = torch.tensor([[1, 5, 63, 7]])
    with torch.no_grad():  # the shared tokens' logits are the draft's own, the extra ones are gone
        assert torch.equal(draft(input_ids=ids).logits, original(input_ids=ids).logits[..., :64])


@pytest.mark.parametrize("case", ["other-tokens", "smaller"])
def test_a_draft_with_another_vocabulary_is_still_refused(tmp_path, case):
    target = llama(1, vocab=64)
    if case == "other-tokens":  # larger, but its first 64 tokens are not the target's
        saved_draft(tmp_path, 72, SHARED[:10] + ["x"] + SHARED[11:] + [f"<fill{i}>" for i in range(8)])
        match = "token 10"
    else:
        saved_draft(tmp_path, 48, SHARED[:48])
        match = "vocabulary size 48"
    with pytest.raises(HarnessError, match=match):
        bundle_with_draft(target, word_tokenizer(SHARED), tmp_path).load_draft()


class Loaded(Exception):
    """Raised by the stand-in from_pretrained once it has seen its arguments."""


def spy_load(monkeypatch, tmp_path, device: str) -> dict:
    """load_model's from_pretrained arguments for a target on `device` (CUDA faked: nothing is loaded)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    seen = {}

    def from_pretrained(path, **kwargs):
        seen.update(kwargs)
        raise Loaded

    (tmp_path / "config.json").write_text(json.dumps(LLAMA_7B))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(placement, "check_fits", lambda *a: None)
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda *a, **k: None)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", from_pretrained)
    cfg = compose_cfg("model=smollm2-135m", "model.target.source=path", f"model.target.id={tmp_path}",
                      f"model.device={device}", "model.draft=null", "model.eagle=null", "model.heads=null",
                      "model.early_heads=null")
    with pytest.raises(Loaded):
        loading.load_model(cfg.model, str(tmp_path / "cache"))
    return seen


def test_a_target_without_a_device_map_loads_straight_onto_its_gpu(monkeypatch, tmp_path):
    assert spy_load(monkeypatch, tmp_path, "cuda").get("device_map") == torch.device("cuda")


def test_a_target_on_the_cpu_loads_as_before(monkeypatch, tmp_path):
    assert "device_map" not in spy_load(monkeypatch, tmp_path, "cpu")


def fake_node(monkeypatch, gpus: int, host: float):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(placement, "memory_of", lambda d: GPU if torch.device(d).type == "cuda" else host)


def test_the_fit_check_counts_host_ram_where_a_device_map_puts_weights_on_the_host(monkeypatch, tmp_path):
    monkeypatch.setattr(placement, "weight_bytes", lambda path, dtype, revision=None: 138e9)  # a 70B target in fp16
    fake_node(monkeypatch, gpus=1, host=32e9)
    cfg = compose_cfg("model=llama-2-70b").model
    with open_dict(cfg):
        cfg.max_memory = {0: "80GB", "cpu": "200GB"}  # 280 GB asked, but the host has 32 GB free
    with pytest.raises(HarnessError, match="needs 138.0 GB"):
        placement.check_fits(cfg, "unread", torch.float16, torch.device("cuda"))
    cfg.max_memory = {0: "80GB", "cpu": "70GB"}
    fake_node(monkeypatch, gpus=1, host=100e9)
    placement.check_fits(cfg, "unread", torch.float16, torch.device("cuda"))  # 150 GB: fits


def gpu_bytes(model, device_map: dict) -> dict:
    """Bytes of the model's weights per device of a device map."""
    out: dict = {}
    for name, p in model.named_parameters():
        where = next(v for k, v in sorted(device_map.items(), key=lambda kv: -len(kv[0]))
                     if k == "" or name == k or name.startswith(k + "."))
        out[where] = out.get(where, 0) + p.numel() * 2
    return out


def test_a_70b_device_map_keeps_the_drafts_bytes_free_on_the_first_gpu(monkeypatch, tmp_path):
    from accelerate import infer_auto_device_map, init_empty_weights
    from transformers import AutoModelForCausalLM, LlamaConfig
    from transformers.integrations.accelerate import get_balanced_memory

    (tmp_path / "config.json").write_text(json.dumps(LLAMA_7B))
    fake_node(monkeypatch, gpus=2, host=500e9)
    cfg = compose_cfg("model=llama-2-70b", "model.draft.source=path", f"model.draft.id={tmp_path}").model
    draft = placement.weight_bytes(str(tmp_path), torch.float16)
    assert loading.companion_bytes(cfg, torch.float16, str(tmp_path / "cache")) == draft
    kwargs = placement.load_kwargs(cfg, torch.device("cuda"), reserve=draft)
    assert kwargs["device_map"] == "auto"
    assert kwargs["max_memory"][0] == GPU - placement.GPU_HEADROOM - draft
    assert kwargs["max_memory"][1] == GPU - placement.GPU_HEADROOM

    with init_empty_weights():
        target = AutoModelForCausalLM.from_config(LlamaConfig(**LLAMA_70B), dtype=torch.float16)
    no_split = target._no_split_modules

    def placed(max_memory):  # as transformers' from_pretrained turns device_map="auto" into a map
        balanced = get_balanced_memory(target, max_memory=dict(max_memory), no_split_module_classes=no_split)
        return gpu_bytes(target, infer_auto_device_map(target, max_memory=balanced, no_split_module_classes=no_split))

    unreserved = placed({0: GPU, 1: GPU, "cpu": 500e9})
    assert unreserved[0] + draft > GPU  # the defect: the 13.5 GB draft does not fit beside cuda:0's share
    used = placed(kwargs["max_memory"])
    assert set(used) == {0, 1}  # nothing offloaded to the host
    assert used[0] + draft <= GPU - placement.GPU_HEADROOM
