"""Caches shared by concurrent processes (bench/cachefile.py): one process builds while the others wait and reuse
its result, nothing partial is ever left, and a damaged cache of every kind is reported in one line, then rebuilt
(or, for caches only a make step builds, a one-line error naming that step)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf

from bench.cachefile import CorruptCache, atomic_dir, atomic_write, load_or_build, lock
from bench.errors import HarnessError
from bench.paths import PROJECT

OFFLINE = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
PAYLOAD_SIZE = 200_000

# One process of the four: waits for a common start time, then load_or_build with a slow, counted build.
WORKER = f"""
import sys, time
from pathlib import Path
from bench.cachefile import CorruptCache, atomic_write, load_or_build
cache, count, out, start = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4])
payload = bytes(i % 251 for i in range({PAYLOAD_SIZE}))

def load(p):
    data = p.read_bytes()
    if len(data) != len(payload):
        raise CorruptCache(f"{{len(data)}} bytes")
    return data

def build(p):
    with count.open("a") as f:  # under the cache's lock: one line per build
        f.write("built\\n")
    time.sleep(0.5)  # slow enough that the other three arrive while it builds
    atomic_write(p, payload)
    return payload

time.sleep(max(0.0, start - time.time()))
out.write_bytes(load_or_build(cache, load, build, "test cache"))
"""


def one_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    return lines[0]


def test_four_processes_build_once_and_agree(tmp_path):
    cache, count = tmp_path / "cache" / "blob.bin", tmp_path / "builds.txt"
    start = time.time() + 2.0  # every interpreter is up by then: the four calls start together
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(cache), str(count), str(tmp_path / f"out{i}"),
                               str(start)], cwd=PROJECT, env={**os.environ, **OFFLINE},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    assert [rc for rc, _ in results] == [0, 0, 0, 0], results
    assert count.read_text() == "built\n"  # the build ran exactly once
    payload = bytes(i % 251 for i in range(PAYLOAD_SIZE))
    assert cache.read_bytes() == payload
    assert all((tmp_path / f"out{i}").read_bytes() == payload for i in range(4))
    assert sorted(p.name for p in cache.parent.iterdir()) == ["blob.bin", "blob.bin.lock"]  # no temp, no partial


def test_failed_writes_leave_nothing_and_stale_temps_are_swept(tmp_path):
    target = tmp_path / "c" / "x.json"
    with pytest.raises(RuntimeError), atomic_dir(tmp_path / "c" / "folder") as d:
        (d / "part").write_text("half")
        raise RuntimeError("killed")
    assert not (tmp_path / "c" / "folder").exists() and not list((tmp_path / "c").iterdir())
    stale = tmp_path / "c" / ".x.json.abcd1234.tmp"  # what a killed writer leaves
    stale.write_text("{")
    other = tmp_path / "c" / ".x.json.more.abcd1234.tmp"  # another cache's (x.json.more) temporary: kept
    other.write_text("{")
    with lock(target):
        atomic_write(target, "{}")
    assert sorted(p.name for p in target.parent.iterdir()) == [".x.json.more.abcd1234.tmp", "x.json", "x.json.lock"]


def test_load_or_build_reports_removes_and_rebuilds(tmp_path, capfd):
    path = tmp_path / "v.json"
    path.write_text('{"value": ')  # cut off

    def build(p):
        atomic_write(p, json.dumps({"value": 7}))
        return 7

    assert load_or_build(path, lambda p: json.loads(p.read_text())["value"], build, "test value") == 7
    line = one_line(capfd.readouterr().err)
    assert line.startswith(f"cache: test value {path} is corrupt (JSONDecodeError") and line.endswith("rebuilding")
    assert json.loads(path.read_text()) == {"value": 7}


# ---------------------------------------------------------------------------------------------- AR references

def test_reference_store_drops_damaged_lines_and_sees_other_writers(tmp_path, capfd):
    from bench.run.reference import ReferenceStore

    folder = tmp_path / "ar_reference"
    a = ReferenceStore(folder, "m")
    a.put([1, 2], 4, [5, 6, 7, 8])
    a.put([3], 4, [9, 9, 9, 9])
    good = a.path.read_text()
    a.path.write_text(good + "{not json\n" + '{"key": "k", "output_ids": [1, 2')  # a garbled line, a cut-off line
    b = ReferenceStore(folder, "m")
    line = one_line(capfd.readouterr().err)
    assert line.startswith(f"cache: {a.path} is corrupt (ValueError: 2 bad line(s)") and "keeping 2 good" in line
    assert a.path.read_text() == good  # rewritten with the good entries only
    assert b.get([1, 2], 4) == [5, 6, 7, 8]
    b.put([7], 4, [1, 1, 1, 1])
    assert a.get([7], 4) == [1, 1, 1, 1]  # a miss looks in the file again: another process may have added it
    a.put([7], 4, [2, 2, 2, 2])  # already there: the first entry stays, nothing appended
    assert [json.loads(x)["output_ids"] for x in a.path.read_text().splitlines()][-1] == [1, 1, 1, 1]
    assert len(a.path.read_text().splitlines()) == 3 and capfd.readouterr().err == ""


# ---------------------------------------------------------------------------------------------- forward cost

def test_forward_cost_curve_corrupt_is_remeasured(tmp_path, monkeypatch, capfd):
    import torch

    from bench.models import forward_cost

    bundle = SimpleNamespace(name="tiny", dtype=torch.float32, device=torch.device("cpu"), model=torch.nn.Linear(1, 1))
    monkeypatch.setattr(forward_cost, "measure", lambda *a, **k: {1: 0.010, 2: 0.012})
    path = forward_cost.cache_file(tmp_path, bundle)
    path.write_text('{"sizes": [1, 2], "ms": [10.0]}')  # sizes and ms do not match
    curve = forward_cost.load_or_measure(bundle, tmp_path)
    line = one_line(capfd.readouterr().err)
    assert line.startswith(f"cache: forward-cost curve {path} is corrupt (CorruptCache:")
    assert curve["ms"] == pytest.approx([10.0, 12.0]) and json.loads(path.read_text()) == curve
    assert forward_cost.load_or_measure(bundle, tmp_path) == curve and capfd.readouterr().err == ""


# ---------------------------------------------------------------------------------------------- tree statistics

def tree_calib(tmp_path):
    return OmegaConf.create({"dataset": "alpaca_eval", "limit": 2, "max_new_tokens": 8, "depth": 2, "topk": 2,
                             "cache_dir": str(tmp_path / "tree_stats")})


def test_tree_stats_corrupt_is_one_line_error_and_recalibrated(tmp_path, monkeypatch, capfd):
    import torch

    from methods.shared.trees.static import AcceptanceStats, TreeStats, load_stats, stats_file
    from methods.token_recycling import calibration

    bundle = SimpleNamespace(name="tiny", dtype=torch.float32)
    calib = tree_calib(tmp_path)
    path = stats_file(calib, bundle)
    path.parent.mkdir(parents=True)
    path.write_text('{"trials": [[4, 4], [2, 2]], "hits": [[9, 1], [1, 1]], "calibration": {}}')  # hits > trials
    with pytest.raises(HarnessError) as err:
        load_stats(calib, bundle)
    msg = str(err.value)
    assert "\n" not in msg and "is corrupt" in msg  # the command names the calibration this run changed
    assert ('`make tree-stats MODEL=tiny ARGS="tree.calibration.limit=2 tree.calibration.max_new_tokens=8 '
            'tree.calibration.depth=2 tree.calibration.topk=2"`') in msg

    stats = TreeStats(AcceptanceStats(2, 2), AcceptanceStats(2, 2))
    stats.tree.trials[:], stats.tree.hits[:] = 4, 2
    monkeypatch.setattr(calibration, "calibrate", lambda calib, bundle: stats)
    assert calibration.write_tree_stats(calib, bundle) == (path, True)  # `make tree-stats` rebuilds it
    assert one_line(capfd.readouterr().err).startswith(f"cache: tree statistics {path} is corrupt")
    assert load_stats(calib, bundle).tree.hits.tolist() == [[2, 2], [2, 2]]
    assert calibration.write_tree_stats(calib, bundle) == (path, False)


# ---------------------------------------------------------------------------------------------- Sequoia acceptance

def test_sequoia_acceptance_corrupt_is_remeasured(tmp_path, monkeypatch, capfd):
    from methods.shared.trees import sequoia as sequoia_tree

    calib = OmegaConf.create({"dataset": "c4", "limit": 2, "tokens": 8, "cache_dir": str(tmp_path)})
    bundle = SimpleNamespace(name="tiny", model=None)
    monkeypatch.setattr(sequoia_tree, "calibration_rows", lambda calib, bundle: [[1, 2, 3]])
    monkeypatch.setattr(sequoia_tree, "measure_acceptance", lambda *a: np.array([0.5, 0.25]))
    path = sequoia_tree.acceptance_file(str(tmp_path), "tiny", "d", 0.0, 0.6, 2, calib)
    path.write_bytes(b"\x00\x00\x00")  # zeroed by a crash
    acc = sequoia_tree.load_or_measure_acceptance(bundle, None, "d", 0.0, 0.6, 2, calib)
    assert one_line(capfd.readouterr().err).startswith(f"cache: Sequoia acceptance vector {path} is corrupt")
    assert acc.tolist() == [0.5, 0.25] and json.loads(path.read_text())["acceptance"] == [0.5, 0.25]


# ---------------------------------------------------------------------------------------------- REST datastores

def test_datastore_damaged_or_mismatched_set_is_one_line_error(tmp_path, capfd):
    import importlib.util

    from methods.rest.datastore import Datastore, open_store

    prefix = tmp_path / "m-toy"
    Datastore.from_documents([[1, 2, 3, 4], [2, 3, 5]], 16, {"corpus": "toy"}).save(prefix)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m-toy.json", "m-toy.lock", "m-toy.sa.npy",
                                                         "m-toy.tokens.npy"]
    assert open_store(tmp_path, "m", "toy").meta["length"] == 9
    sa = prefix.with_name("m-toy.sa.npy")
    whole = sa.read_bytes()
    sa.write_bytes(whole[:-5])  # cut off
    with pytest.raises(HarnessError) as err:
        open_store(tmp_path, "m", "toy")
    msg = str(err.value)
    assert "\n" not in msg and "REST datastore 'toy'" in msg and "is corrupt" in msg and "make datastore MODEL=m" in msg

    other = tmp_path / "other"  # arrays of another store beside this sidecar: not one set
    Datastore.from_documents([[1, 2]], 16).save(other)
    for suffix in (".tokens.npy", ".sa.npy"):
        other.with_name("other" + suffix).replace(prefix.with_name("m-toy" + suffix))
    with pytest.raises(HarnessError, match="the sidecar says 9"):
        open_store(tmp_path, "m", "toy")

    spec = importlib.util.spec_from_file_location("build_datastore", PROJECT / "scripts" / "build_datastore.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    capfd.readouterr()
    assert script.up_to_date(prefix, {}, "") is None  # so `make datastore` builds it again
    assert one_line(capfd.readouterr().err).startswith(f"cache: REST datastore {prefix}.* is corrupt")


# ---------------------------------------------------------------------------------------------- model folders

def tiny_model_dir(folder: Path) -> Path:
    from conftest import tiny_llama
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # its bar is not ours to count among the stderr lines
    try:
        tiny_llama().save_pretrained(folder)
    finally:
        hf_logging.enable_progress_bar()
    return folder


def cut_weights(folder: Path) -> None:
    w = folder / "model.safetensors"
    w.write_bytes(w.read_bytes()[:-100])


def test_check_model_dir_finds_damage(tmp_path):
    from bench.models.loading import check_model_dir

    d = tiny_model_dir(tmp_path / "m")
    assert check_model_dir(d) == d
    cut_weights(d)
    with pytest.raises(CorruptCache, match="model.safetensors has .* bytes, its header says"):
        check_model_dir(d)
    (d / "model.safetensors").unlink()
    with pytest.raises(CorruptCache, match="weights missing"):
        check_model_dir(d)
    (d / "config.json").write_text('{"model_type": ')
    with pytest.raises(ValueError):
        check_model_dir(d)


def test_converted_model_corrupt_is_reconverted(tmp_path, monkeypatch, capfd):
    from bench.models import loading

    gguf = tmp_path / "pkg" / "tiny.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    converted = []

    def fake_convert(gguf, path):
        with atomic_dir(path) as tmp:
            tiny_model_dir(tmp)
        converted.append(path)

    monkeypatch.setattr(loading, "write_converted", fake_convert)
    cache = tmp_path / "models"
    first = Path(loading.convert_gguf(gguf, None, cache))
    assert converted == [first] and capfd.readouterr().err == ""
    cut_weights(first)  # a copy cut short (full disk, or a kill before conversions were atomic)
    assert Path(loading.convert_gguf(gguf, None, cache)) == first
    line = one_line(capfd.readouterr().err)
    assert line.startswith(f"cache: converted model {first} is corrupt") and line.endswith("rebuilding")
    assert converted == [first, first] and loading.check_model_dir(first)
    assert sorted(p.name for p in cache.iterdir()) == [first.name, first.name + ".lock"]


def test_trained_draft_corrupt_is_one_line_error_naming_make_draft(tmp_path, capfd):
    from bench.models.loading import load_draft_model
    from bench.train.draft import read_report, write_draft
    out = tmp_path / "drafts" / "tiny-draft"
    model = SimpleNamespace(save_pretrained=lambda folder: tiny_model_dir(Path(folder)))
    write_draft(model, None, {"draft": "tiny-draft"}, None, 0, out)
    cut_weights(out)
    bundle = SimpleNamespace(name="tiny", model_cache=str(tmp_path / "models"),
                             draft_cfg=OmegaConf.create({"name": "tiny-draft", "source": "trained", "id": "tiny-draft"}))
    with pytest.raises(HarnessError) as err:
        load_draft_model(bundle)
    msg = str(err.value)
    assert "\n" not in msg and f"trained draft 'tiny-draft' ({out}) is corrupt" in msg and "`make draft MODEL=tiny`" in msg
    assert read_report(out) is None  # so `make draft` trains it again instead of calling it up to date
    assert one_line(capfd.readouterr().err).startswith(f"cache: trained draft {out} is corrupt")


# ---------------------------------------------------------------------------------------------- prompt-set items

def test_items_cache_cut_off_is_one_line_error_naming_make_data(tmp_path):
    from data.loaders import DataError, resolve_items

    items = tmp_path / "cache" / "gsm8k" / "items.jsonl"
    items.parent.mkdir(parents=True)
    items.write_text('{"question_id": 1, "category": "math", "group": "math", "turns": ["1+1?"]}\n{"question_id": 2, "cat')
    cfg = OmegaConf.load(PROJECT / "conf" / "dataset" / "gsm8k.yaml")
    with pytest.raises(DataError) as err:
        resolve_items(cfg, None, str(tmp_path / "cache"))
    assert "\n" not in str(err.value) and "corrupt cache" in str(err.value) and "`make data`" in str(err.value)


# ---------------------------------------------------------------------------------------------- the real thing

def tree_digest(folder: Path) -> dict[str, str]:
    """sha256 of every file; tokenizer_config.json records whether the hub was offline, so that key is left out."""
    digest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}
    tok = json.loads((folder / "tokenizer_config.json").read_text())
    tok.pop("local_files_only", None)
    digest["tokenizer_config.json"] = hashlib.sha256(json.dumps(tok, sort_keys=True).encode()).hexdigest()
    return digest


@pytest.mark.model
@pytest.mark.slow
def test_two_cli_runs_at_once_on_an_empty_model_cache(tmp_path):
    """Two runs started together on a fresh checkout: one converts the embedded model, the other waits for it;
    both succeed and share one AR reference entry. (Distinct run.seed: the same job twice would be one job.)"""
    models, results = tmp_path / "models", tmp_path / "results"
    procs = [subprocess.Popen(
        [sys.executable, "-m", "bench.run", "model=smollm2-135m", "dataset=humaneval", "method=ar", "run.limit=1",
         "run.max_new_tokens=4", "run.warmup=0", "logger=none", f"run.seed={i}", f"paths.model_cache={models}",
         f"paths.results={results}"],
        cwd=PROJECT, env={**os.environ, **OFFLINE}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]

    (converted,) = [p for p in models.iterdir() if not p.name.endswith(".lock")]  # no temporary folder left
    from bench.models.loading import check_model_dir

    assert check_model_dir(converted)
    single = PROJECT / "data" / "cache" / "models" / converted.name  # the project's own one-process conversion
    if single.is_dir():
        assert tree_digest(converted) == tree_digest(single)

    (ref_file,) = (results / "cache" / "ar_reference").glob("*.jsonl")
    refs = [json.loads(line) for line in ref_file.read_text().splitlines()]
    assert len(refs) == 1 and len(refs[0]["output_ids"]) == 4  # the first writer's entry; the others found it
    for out, _ in outs:
        (run_dir,) = [Path(ln[len("results: "):]) for ln in out.splitlines() if ln.startswith("results: ")]
        (record,) = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
        assert record["output_ids"] == refs[0]["output_ids"] and record["lossless"]["equal"]


def test_an_atomic_folder_is_readable_like_any_file(tmp_path):
    """safetensors (and mkstemp) write 0600: trained drafts and EAGLE heads were private to their writer."""
    import stat

    with atomic_dir(tmp_path / "folder") as d:
        (d / "sub").mkdir()
        (d / "sub" / "w.safetensors").write_bytes(b"x")
        (d / "sub" / "w.safetensors").chmod(0o600)
    assert stat.S_IMODE((tmp_path / "folder" / "sub" / "w.safetensors").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "folder" / "sub").stat().st_mode) == 0o755


def test_an_artifact_built_with_another_recipe_is_named(tmp_path, capsys):
    """Heads `make heads` would rebuild (their report's recipe differs from the config's) were used silently."""
    from bench.models.built import recipe_differs

    report = tmp_path / "heads_report.json"
    report.write_text(json.dumps({"recipe": {"batch_positions": 0, "lr": 0.001}}))
    assert recipe_differs(report, OmegaConf.create({"batch_positions": 256, "lr": 0.001}), "heads 'h'", "`make heads`") \
        == ["batch_positions"]
    assert "warning: heads 'h' were built with another recipe" in capsys.readouterr().err
    assert recipe_differs(report, {"batch_positions": 0, "lr": 0.001}, "heads 'h'", "`make heads`") == []
    assert recipe_differs(tmp_path / "none.json", {"lr": 1}, "heads 'h'", "`make heads`") == []


def test_missing_tree_stats_name_the_command_for_this_runs_dtype(tmp_path):
    """The statistics file is per dtype: a bf16 run was told a command that writes the fp32 file."""
    import torch

    from bench.errors import ConfigError
    from methods.shared.trees.static import load_stats

    bundle = SimpleNamespace(name="tiny", dtype=torch.bfloat16)
    with pytest.raises(ConfigError, match="model.dtype=bfloat16"):
        load_stats(tree_calib(tmp_path), bundle)
