"""Question selection: per-group and overall limits, and shuffling that keeps the same questions."""

from __future__ import annotations

from omegaconf import OmegaConf

from bench.run.runner import select_items

ITEMS = [{"question_id": i, "group": "ab"[i % 2]} for i in range(10)]


def opts(**kw):
    return OmegaConf.create({"limit": None, "limit_per_group": None, "shuffle": False, "seed": 0, **kw})


def test_limit_per_group_keeps_file_order():
    assert [it["question_id"] for it in select_items(ITEMS, opts(limit_per_group=2))] == [0, 1, 2, 3]


def test_limit():
    assert [it["question_id"] for it in select_items(ITEMS, opts(limit=3))] == [0, 1, 2]


def test_shuffle_changes_order_not_questions():
    plain = select_items(ITEMS, opts(limit_per_group=3))
    shuffled = select_items(ITEMS, opts(limit_per_group=3, shuffle=True))
    assert [it["question_id"] for it in shuffled] != [it["question_id"] for it in plain]
    assert sorted(it["question_id"] for it in shuffled) == [it["question_id"] for it in plain]
