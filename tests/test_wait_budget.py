"""The methods part of gpu-check judges each run's decode waits by the CPU suite's budget (bench.check.wait_budget),
so that a lease's goals table says whether CUDA keeps them: run here on the tiny shape, as a lease runs it."""

from __future__ import annotations

import json

import pytest

from bench.check import gpu_check
from bench.check.check_table import table
from bench.check.goals import methods_goal
from methods.token_recycling.proposer import TokenRecycling


def methods_part(out, names=("ar", "token_recycling")) -> list[dict]:
    """The methods part at the CPU sizes with enough new tokens that each row takes several decode steps (the
    default 3 take one or two), as `--max-new` sets them."""
    assert gpu_check.main(["--small", "--device", "cpu", "--only", "methods", "--methods", ",".join(names),
                           "--max-new", "16", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["sizes"]["max_new"] == 16
    return results["methods"]


def row_of(records: list[dict], name: str) -> list[str]:
    """`name`'s cells in gpu-check's methods table."""
    text = table({"environment": {"cpu": "x", "torch": "2", "cuda": None, "transformers": "5", "accelerate": "1"},
                  "methods": records})
    return next(line for line in text.splitlines() if line.startswith(f"| {name} |")).strip("| ").split(" | ")[1:]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return methods_part(tmp_path_factory.mktemp("scratch"))


def test_each_run_is_judged_within_its_budget(records):
    assert len(records) == 8 and all(r["status"] == "ok" for r in records)
    for r in records:
        waits = r["decode_waits"]
        assert waits["within"] is True, r
        assert waits["row_steps"] >= 3 * r["batch"] and "known_over" not in waits
    # one read a step serves a batch's rows: AR's waits per row step are 1 / batch at T = 0
    assert {r["batch"]: r["decode_waits"]["waits"] for r in records if r["method"] == "ar"
            and r["temperature"] == 0} == {1: 1.0, 4: 0.25}
    goal = methods_goal(records)
    assert "decode waits within budget in 8 of 8 runs" in goal.measured and goal.met is None  # 2 of the methods
    assert row_of(records, "ar")[0].endswith("; decode 1 ≤ 1")  # b1 T0: one read a decode step


def test_a_read_added_to_a_proposer_fails_the_goal(tmp_path, monkeypatch):
    real = TokenRecycling.propose

    def with_item(self, seq, length):
        draft = real(self, seq, length)
        draft.tokens[0].item()  # the kind of read that slips into a proposer
        return draft

    monkeypatch.setattr(TokenRecycling, "propose", with_item)
    records = methods_part(tmp_path, ("token_recycling",))
    over = [r for r in records if r["decode_waits"]["within"] is False]
    assert {(r["batch"], r["temperature"]) for r in over} >= {(1, 0.0)}
    goal = methods_goal(records)
    assert goal.met is False and "token_recycling T=0 b=1 (2 > 1)" in goal.measured
    assert row_of(records, "token_recycling")[0].endswith("; **decode 2 > 1**")


def test_a_run_of_too_few_decode_steps_is_not_judged():
    from bench.check.wait_budget import judged

    few = judged("ar", 0.0, 1, {"waits": 5.0, "row_steps": 2, "draft_forwards": 0.0, "accepted": 0.0, "rows": 0.5})
    assert few["within"] is None and few["budget"] == 1.0
    assert methods_goal([{"method": "ar", "batch": 1, "temperature": 0.0, "status": "ok", "grades": ["identical"],
                          "host_waits_per_step": 3.0, "decode_waits": few}]).met is None
