"""A model config's name does not identify its weights: `model.target.id=<folder>` over an existing config keeps the
name. The greedy reference and the baselines are keyed on the weights too (bench.models.loading.weights_id), so a
run over other weights neither writes nor reads the real model's reference, nor pairs with its runs (a run over an
edited copy had written its tokens as smollm2-135m's reference, and every later run of the real model then read
"not lossless")."""

from __future__ import annotations

import os

from omegaconf import OmegaConf

from bench.models.loading import weights_id
from bench.report.select import paired_baseline
from bench.run.store import Run, latest_baseline


def folder_model(path, payload: bytes = b"0" * 8):
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(payload)
    return OmegaConf.create({"name": "m", "target": {"source": "path", "id": str(path)}})


def test_weights_id_tells_folders_and_edits_apart(tmp_path):
    a, b = folder_model(tmp_path / "a"), folder_model(tmp_path / "b")
    ida, idb = weights_id(a, a.target.id), weights_id(b, b.target.id)
    assert ida != idb and weights_id(a, a.target.id) == ida  # another folder; the same folder twice
    weights = tmp_path / "a" / "model.safetensors"
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # edited in place, same size
    assert weights_id(a, a.target.id) != ida
    hub = OmegaConf.create({"name": "m", "target": {"source": "hub", "id": "org/x"}})
    pinned = OmegaConf.create({"name": "m", "target": {"source": "hub", "id": "org/x", "revision": "abc"}})
    assert weights_id(hub, "org/x") != weights_id(pinned, "org/x") != ida


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
