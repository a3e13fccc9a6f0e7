"""Question selection: per-group and overall limits, and shuffling that keeps the same questions."""

from __future__ import annotations

from omegaconf import OmegaConf

from bench.run.runner import select_items

ITEMS = [{"question_id": i, "group": "ab"[i % 2]} for i in range(10)]


def opts(**kw):
    return OmegaConf.create({"limit": None, "limit_per_group": None, "shuffle": False, "seed": 0, **kw})


def test_limit_per_group_keeps_file_order():
    assert [it["question_id"] for it in select_items(ITEMS, opts(limit_per_group=2))] == [0, 1, 2, 3]


def test_limit_per_group_spreads_over_a_groups_categories():
    """SpecBench's mt_bench group holds MT-Bench's categories in blocks: its first 3 questions would all be
    writing. Each category gives its first, then its second, ...; the run keeps file order."""
    items = [{"question_id": i, "group": "mt_bench", "category": c} for i, c in
             enumerate(["writing"] * 3 + ["roleplay"] * 3 + ["math"] * 3)] + [{"question_id": 9, "group": "qa",
                                                                                  "category": "qa"}]
    assert [it["question_id"] for it in select_items(items, opts(limit_per_group=4))] == [0, 1, 3, 6, 9]
    assert [it["question_id"] for it in select_items(items, opts(limit_per_group=2))] == [0, 3, 9]


def test_limit():
    assert [it["question_id"] for it in select_items(ITEMS, opts(limit=3))] == [0, 1, 2]


def test_shuffle_changes_order_not_questions():
    plain = select_items(ITEMS, opts(limit_per_group=3))
    shuffled = select_items(ITEMS, opts(limit_per_group=3, shuffle=True))
    assert [it["question_id"] for it in shuffled] != [it["question_id"] for it in plain]
    assert sorted(it["question_id"] for it in shuffled) == [it["question_id"] for it in plain]
