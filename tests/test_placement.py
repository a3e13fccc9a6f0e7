"""Models larger than one device (bench.models.placement): the embedded model loaded through a device map that
offloads layers to disk decodes losslessly on our engine, and a model too large for where its config puts it fails
in one `error:` line before any weight is read."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from omegaconf import open_dict

from bench.core.engine import Engine
from bench.core.timing import PhaseTimer
from bench.models import placement
from bench.models.loading import load_model
from bench.paths import PROJECT
from methods import build_method
from tests.conftest import compose_cfg

pytestmark = pytest.mark.model
LLAMA_70B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
             "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
             "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096}


@pytest.mark.slow  # a whole decode through accelerate offload; the placement checks above stay
def test_offloaded_model_decodes_losslessly(smollm, prompts, greedy, tmp_path):
    cfg = compose_cfg("model=smollm2-135m", f"model.offload_folder={tmp_path / 'offload'}")
    layers = smollm.model.config.num_hidden_layers
    with open_dict(cfg):
        cfg.model.device_map = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.norm": "cpu",
                                "lm_head": "cpu",
                                **{f"model.layers.{i}": "disk" if i in (1, layers // 2) else "cpu"
                                   for i in range(layers)}}
    bundle = load_model(cfg.model, str(PROJECT / "data" / "cache" / "models"))
    offloaded = [n for n, p in bundle.model.named_parameters() if p.device.type == "meta"]
    assert offloaded and all(".layers.1." in n or f".layers.{layers // 2}." in n for n in offloaded)
    assert bundle.linear_backend == "plain" and bundle.device == torch.device("cpu")
    engine = Engine(bundle.model, bundle.eos_token_ids, bundle.max_context, device=bundle.device)
    for name in ("ar", "token_recycling"):
        method = build_method(compose_cfg(f"method={name}").method, bundle)
        for prompt, ref in zip(prompts[:2], greedy[:2]):
            out = method.generate(engine, prompt, 24, PhaseTimer(sync=False))
            assert out.output_ids == ref[:24], name


def test_too_large_model_fails_in_one_line_before_reading_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_70B))  # a 70B config and no weights at all
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "model=smollm2-135m", "model.target.source=path",
         f"model.target.id={tmp_path}", "dataset=humaneval", "method=ar", "run.limit=1", "logger=none",
         f"paths.results={tmp_path / 'results'}"],
        cwd=PROJECT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "needs 275.9 GB" in lines[0], proc.stderr
    assert "device_map" in lines[0]
    assert not (tmp_path / "results" / "runs").exists()


def test_weight_estimate_matches_the_loaded_model(smollm):
    path = smollm.model.config._name_or_path
    params = {p.data_ptr(): p.numel() for p in smollm.model.parameters()}  # tied embeddings once
    assert placement.weight_bytes(path, torch.float32) == 4 * sum(params.values())
    assert placement.weight_bytes(path, torch.bfloat16) == 2 * sum(params.values())
