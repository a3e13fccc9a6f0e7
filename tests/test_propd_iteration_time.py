"""scripts/propd_iteration_time.py (the measured iteration times behind ProPD's Figure 3 and its dynamic trees) on a
tiny model: the grid it times, the run's threads and jobs in its machine label, and a timed forward that is a real
forward of the prefix and chain."""

from __future__ import annotations

import importlib.util
import json
from types import SimpleNamespace

import torch
from transformers import DynamicCache

from bench.core.forward import cache_kw
from bench.core.machine import JOBS_ENV
from bench.paths import PROJECT
from tests.conftest import tiny_llama


def load_script():
    spec = importlib.util.spec_from_file_location("propd_iteration_time",
                                                  PROJECT / "scripts" / "propd_iteration_time.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_iteration_time_script_on_a_tiny_model(tmp_path, monkeypatch, capsys):
    script = load_script()
    model = tiny_llama()
    bundle = SimpleNamespace(name="tiny", model=model, vocab_size=64, dtype=torch.float32, device=torch.device("cpu"),
                             max_context=128)
    monkeypatch.setattr(script, "get_bundle", lambda *a, **k: bundle)
    out = tmp_path / "results" / "propd" / "iteration_time.json"
    argv = ["--reps", "2", "--batches", "1,2", "--sizes", "1,4,8", "--seq-len", "16", "--seq-lens", "8,16",
            "--seq-sizes", "4", "--max-tokens", "8", "--out", str(out)]
    assert script.main(argv) == 0 and str(out) in capsys.readouterr().out
    data = json.loads(out.read_text())
    points = {(r["batch"], r["tree_size"], r["seq_len"]) for r in data["rows"]}
    # (1, 4, 16) is in both grids, measured once; batch 2 x 8 tokens = 16 > --max-tokens is skipped.
    assert points == {(1, 1, 16), (1, 4, 16), (1, 8, 16), (2, 1, 16), (2, 4, 16), (1, 4, 8)}
    assert data["skipped"] == [{"batch": 2, "tree_size": 8, "seq_len": 16}]
    assert all(0 < r["min_seconds"] <= r["seconds"] <= r["max_seconds"] for r in data["rows"])
    assert data["model"] == "tiny" and data["reps"] == 2
    assert script.main(["--reps", "0"]) == 2 and script.main(["--bogus"]) == 2


def test_iteration_time_script_takes_the_threads_and_jobs_of_a_run(tmp_path, monkeypatch):
    # run.threads and run.jobs_beside, as bench.run takes them: the file's machine label says both (it once timed
    # on every core whatever run.threads said, labelled 2t on the 2-core VM)
    script = load_script()
    bundle = SimpleNamespace(name="tiny", model=tiny_llama(), vocab_size=64, dtype=torch.float32,
                             device=torch.device("cpu"), max_context=64)
    monkeypatch.setattr(script, "get_bundle", lambda *a, **k: bundle)
    monkeypatch.delenv(JOBS_ENV, raising=False)
    out, threads = tmp_path / "t.json", torch.get_num_threads()
    try:
        argv = ["--reps", "1", "--batches", "1", "--sizes", "1", "--seq-lens", "8", "--seq-sizes", "1",
                "--seq-len", "8", "--out", str(out), "run.threads=1", "run.jobs_beside=1"]
        assert script.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    assert "/1t/2jobs" in json.loads(out.read_text())["machine"]


def test_iteration_time_forward_is_a_real_forward_of_the_prefix_and_chain():
    # The timed forward (cache + 4D additive mask) computes what a plain forward over prefix + chain computes.
    script = load_script()
    model, gen = tiny_llama(attn_implementation="sdpa"), torch.Generator().manual_seed(1)
    prefix = torch.randint(32, 63, (2, 6), generator=gen)
    ids, pos, mask = script.tree_inputs(64, 2, 4, 6, torch.float32, "cpu", gen)
    cache = DynamicCache(config=model.config)
    kv = cache_kw(model, cache)
    with torch.inference_mode():
        model(input_ids=prefix, **kv, use_cache=True)
        timed = model(input_ids=ids, position_ids=pos, attention_mask=mask, **kv, use_cache=True)
        plain = model(input_ids=torch.cat([prefix, ids], 1)).logits[:, 6:]
    assert torch.allclose(timed.logits, plain, atol=1e-5)
