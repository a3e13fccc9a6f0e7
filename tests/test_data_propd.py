"""ProPD's prompt sets in the data/ package: alpaca (the hub's, or EAGLE's 80-question subset offline) and
chatgpt_prompts (the hub only). Fast; no model; the hub is faked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from data.loaders import DataError, load_items, load_selection, resolve_items
from tests.fixtures.datasets import COUNTS, REPO, ds_cfg, fake_hub, fetch_data_module

# ---------------------------------------------------------------- ProPD's sets: alpaca (hub, or EAGLE's 80-question
# subset offline) and chatgpt_prompts (hub only). The hub is faked as in tests/test_data.py's
# test_cnn_dailymail_hub_is_sequoias_source.

ALPACA_MIRROR = "eagle_subsets/alpaca_question.jsonl"
ALPACA_NOTE = ("mirror subset: EAGLE's 80 Alpaca questions, used instead of the hub set tatsu-lab/alpaca "
               "(52,002 rows)")


# ---------------------------------------------------------------------------------------------------------- alpaca


def test_alpaca_offline_loads_the_mirror_subset_and_says_so(mirror, tmp_path, offline):
    items, what = load_selection(ds_cfg("alpaca"), mirror, str(tmp_path / "cache"))
    path = Path(mirror) / ALPACA_MIRROR
    assert what == f"all 80 rows in file order; 80 rows loaded from mirror {path} ({ALPACA_NOTE})"
    assert "subset" in what and "instead of the hub set tatsu-lab/alpaca" in what
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(items) == 80
    assert [it["question_id"] for it in items] == [r["question_id"] for r in rows] == list(range(80))
    assert [it["turns"] for it in items] == [r["turns"] for r in rows]
    assert all(len(it["turns"]) == 1 and it["turns"][0] for it in items)
    assert {(it["category"], it["group"]) for it in items} == {("alpaca", "alpaca")}  # the mirror's category is ""


def test_alpaca_subset_note_survives_the_cache(mirror, tmp_path, offline, capsys):
    cache = tmp_path / "cache"
    assert fetch_data_module().main(["--mirror", mirror, "--cache", str(cache), "alpaca"]) == 0
    assert ALPACA_NOTE in capsys.readouterr().out
    items, what = load_selection(ds_cfg("alpaca"), None, str(cache))
    assert len(items) == 80
    assert what == (f"all 80 rows in file order; 80 rows loaded from cache {cache / 'alpaca' / 'items.jsonl'} "
                    f"(built from mirror {Path(mirror) / ALPACA_MIRROR} ({ALPACA_NOTE}))")


def test_alpaca_hub_rows_append_a_nonblank_input_after_a_blank_line(tmp_path, monkeypatch):
    asked = fake_hub(monkeypatch, [
        {"instruction": "Give three tips for staying healthy.", "input": "", "output": "o", "text": "t"},
        {"instruction": "Translate the sentence into French.", "input": "I like {braces}.", "output": "o"},
        {"instruction": "Name a color.", "input": "  \n", "output": "o"},
    ])
    # The mirror dir exists but has no copy: the hub is used, with the hub field mapping.
    items, source = resolve_items(ds_cfg("alpaca"), str(tmp_path), str(tmp_path / "cache"))
    assert asked == [{"path": "tatsu-lab/alpaca", "split": "train"}]  # `fields` is not passed to load_dataset
    assert source == "hub tatsu-lab/alpaca"
    assert items == [
        {"question_id": 0, "category": "alpaca", "group": "alpaca",
         "turns": ["Give three tips for staying healthy."]},
        {"question_id": 1, "category": "alpaca", "group": "alpaca",
         "turns": ["Translate the sentence into French.\n\nI like {braces}."]},
        {"question_id": 2, "category": "alpaca", "group": "alpaca", "turns": ["Name a color."]},
    ]


def test_alpaca_hub_row_without_instruction_names_the_row(tmp_path, monkeypatch):
    fake_hub(monkeypatch, [{"instruction": "a", "input": ""}, {"input": "b"}])
    with pytest.raises(DataError, match=r"malformed line 2 in hub tatsu-lab/alpaca: missing field 'instruction'"):
        load_items(ds_cfg("alpaca"), None, str(tmp_path / "cache"))


def test_append_if_needs_a_template(tmp_path):
    (tmp_path / "f.jsonl").write_text('{"t": ["a"]}\n')
    cfg = {"name": "fake", "mirror_path": "f.jsonl", "category": "c", "turns_field": "t", "append_if": {"x": "{x}"}}
    with pytest.raises(DataError, match="append_if must be a mapping") as e:
        load_items(cfg, str(tmp_path), str(tmp_path / "cache"))
    assert "\n" not in str(e.value) and str(e.value).startswith("dataset 'fake': ")


def test_cache_without_source_file_is_reported_as_before(tmp_path):
    """A cache written before fetch_data recorded its source (no source.txt) still loads, labelled as before."""
    items = tmp_path / "cache" / "alpaca" / "items.jsonl"
    items.parent.mkdir(parents=True)
    items.write_text('{"question_id": 0, "category": "alpaca", "group": "alpaca", "turns": ["hi"]}\n')
    assert resolve_items(ds_cfg("alpaca"), None, str(tmp_path / "cache"))[1] == f"cache {items}"


# ------------------------------------------------------------------------------------------------- chatgpt_prompts


def test_chatgpt_prompts_hub_mapping(tmp_path, monkeypatch):
    asked = fake_hub(monkeypatch, [
        {"human_prompt": "Write a haiku about {tea}.", "chatgpt_response": "r1"},
        {"human_prompt": "Explain recursion.", "chatgpt_response": "r2"},
    ])
    items, what = load_selection(ds_cfg("chatgpt_prompts"), str(tmp_path), str(tmp_path / "cache"))
    assert asked == [{"path": "MohamedRashad/ChatGPT-prompts", "split": "train"}]
    assert what == "all 2 rows in file order; 2 rows loaded from hub MohamedRashad/ChatGPT-prompts"
    assert items == [
        {"question_id": 0, "category": "chatgpt_prompts", "group": "chatgpt_prompts",
         "turns": ["Write a haiku about {tea}."]},
        {"question_id": 1, "category": "chatgpt_prompts", "group": "chatgpt_prompts",
         "turns": ["Explain recursion."]},
    ]


@pytest.mark.parametrize("with_mirror", [True, False])
def test_chatgpt_prompts_offline_is_one_line_error(tmp_path, offline, with_mirror):
    cache = tmp_path / "cache"
    with pytest.raises(DataError) as e:
        load_items(ds_cfg("chatgpt_prompts"), str(tmp_path) if with_mirror else None, str(cache))
    mirror_why = "no mirror_path: no offline copy of this set" if with_mirror else "not set"
    assert str(e.value) == (
        f"dataset 'chatgpt_prompts' not found: mirror ({mirror_why}), "
        f"cache {cache / 'chatgpt_prompts' / 'items.jsonl'} (missing), "
        "hub MohamedRashad/ChatGPT-prompts (unreachable: ConnectionError: offline in tests)"
    )


def test_chatgpt_prompts_real_hub_offline_is_one_line(tmp_path):
    """The real datasets.load_dataset path with HF_HUB_OFFLINE=1 (set before import; an empty HF_HOME, so no
    copy cached by an earlier online run is found)."""
    code = (
        "from omegaconf import OmegaConf\nfrom data.loaders import load_items, DataError\n"
        "try:\n    load_items(OmegaConf.load('conf/dataset/chatgpt_prompts.yaml'), '/work/none', "
        f"{str(tmp_path / 'cache')!r})\n"
        "except DataError as e:\n    print(e)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    run = subprocess.run([sys.executable, "-c", code], check=False, cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0 and "Traceback" not in run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("dataset 'chatgpt_prompts' not found: mirror (no mirror_path: no offline copy")
    assert "hub MohamedRashad/ChatGPT-prompts (unreachable: " in lines[0]


def test_make_data_offline_skips_hub_only_sets_unless_named(mirror, tmp_path, offline, capsys):
    fetch_data = fetch_data_module()
    cache = tmp_path / "cache"
    assert fetch_data.main(["--mirror", mirror, "--cache", str(cache)]) == 0  # every set, as `make data`
    err = capsys.readouterr().err
    assert err.startswith("chatgpt_prompts SKIPPED (hub only, no offline copy): dataset 'chatgpt_prompts' not found")
    assert sorted(p.name for p in cache.iterdir()) == sorted(COUNTS)
    assert fetch_data.main(["--mirror", mirror, "--cache", str(cache), "chatgpt_prompts"]) == 1
    assert "chatgpt_prompts FAILED: dataset 'chatgpt_prompts' not found" in capsys.readouterr().err
