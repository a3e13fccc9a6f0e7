"""Post-use & Pre-cut Tables 3 and 4 (bench/report/holistic) on hand-written runs: levels read from the switches,
speedups against the AR run measured like it, both utilisations from the step counters, the two claims decided
from the data, the paper's numbers beside, and one error line without runs."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from bench.errors import HarnessError
from bench.report.holistic.table3 import flatten_claim, holistic_table3, reuse_claim
from bench.report.holistic.table4 import holistic_table4

LEVELS = {"sd": (False, False, False), "reuse_draft": (True, False, False), "reuse_target": (True, True, False),
          "precut": (True, True, True)}


def write_run(root, name, method, *, seconds, level=None, length=None, calls=4, drafted=4, accepted=1, extra=0):
    """One question, one turn of 10 new tokens in 5 steps (prefill + 4 verifications) taking `seconds`."""
    d = root / "runs" / name
    d.mkdir(parents=True)
    record = {"question_id": 1, "new_tokens": 10, "wall_time": seconds, "accept_lengths": [1, 3, 2, 2, 2]}
    settings = {}
    if method == "holistic":
        rd, rt, pc = LEVELS[level]
        settings = {"reuse_draft": rd, "reuse_target": rt, "precut": pc, "draft_length": length}
        record["counters"] = {"draft_calls": [calls] * 4, "draft_tokens": [drafted] * 4,
                              "accepted_draft": [accepted] * 4, "target_extra": [extra] * 4,
                              "draft_fetches": [2] * 4 if rd else [0] * 4, "draft_hits": [1] * 4 if rd else [0] * 4,
                              "target_fetches": [1] * 4 if rt else [0] * 4, "target_hits": [int(extra > 0)] * 4}
    (d / "records.jsonl").write_text(json.dumps(record) + "\n")
    meta = {"run_id": name, "created": f"2026-01-01T00:00:{len(list(d.parent.iterdir())):02d}",
            "experiment": "holistic", "method": method, "model": "m", "dataset": "humaneval", "temperature": 0.0,
            "machine": "cpu", "max_new_tokens": 128, "variant": level, "method_settings": settings}
    (d / "summary.json").write_text(json.dumps(meta))


@pytest.fixture
def results(tmp_path):
    write_run(tmp_path, "ar", "ar", seconds=1.0)
    for n, t_sd, t_cut in ((3, 2.0, 1.6), (12, 4.0, 1.5)):
        write_run(tmp_path, f"sd{n}", "holistic", seconds=t_sd, level="sd", length=n, calls=n, drafted=n)
        write_run(tmp_path, f"rd{n}", "holistic", seconds=t_sd * 0.9, level="reuse_draft", length=n, calls=n // 2,
                  drafted=n)
        write_run(tmp_path, f"rt{n}", "holistic", seconds=t_sd * 0.8, level="reuse_target", length=n, calls=n // 2,
                  drafted=n, extra=1)
        write_run(tmp_path, f"pc{n}", "holistic", seconds=t_cut, level="precut", length=n, calls=2, drafted=2)
    return tmp_path


def test_table3_cells_and_claims(results):
    md = holistic_table3(results, "m")
    data = pd.read_csv(results / "tables" / "holistic_table3.csv")
    cell = data.set_index(["level", "lambda"])
    assert cell.at[("sd", 12), "speedup"] == pytest.approx(0.25)  # AR 10 tok/s, sd 2.5 tok/s
    assert cell.at[("sd", 12), "util_eq3"] == pytest.approx(10 / 48)  # 10 new tokens / 4 steps x 12 calls
    assert cell.at[("sd", 12), "util_accepted"] == pytest.approx(1 / 12)
    assert cell.at[("reuse_draft", 3), "draft_hit_rate"] == pytest.approx(0.5)
    assert cell.at[("precut", 24), "paper_speedup"] == pytest.approx(3.40)  # paper's column without our run
    assert pd.isna(cell.at[("precut", 24), "speedup"])
    # Reuse halves the draft calls at the same MAT; Pre-cut's speedups (1/1.6, 1/1.5) spread less than reuse's.
    assert reuse_claim(data).startswith("holds")
    assert flatten_claim(data).startswith("holds")
    assert "| + Ex-ante reduction (Pre-cut) | 0.62 (2.87)" in md and "Claim, Pre-cut flattens" in md


def test_claims_fail_when_the_data_says_so(results):
    data = pd.read_csv(holistic_table3(results, "m") and results / "tables" / "holistic_table3.csv")
    worse = data.copy()
    worse.loc[worse["level"] == "reuse_target", "util_eq3"] = 0.01
    assert reuse_claim(worse).startswith("does not hold")
    steep = data.copy()
    steep.loc[(steep["level"] == "precut") & (steep["lambda"] == 12), "speedup"] = 0.01
    assert flatten_claim(steep).startswith("does not hold")


def test_table4_ours_beside_the_papers_pairs(results):
    md = holistic_table4(results, "m")
    data = pd.read_csv(results / "tables" / "holistic_table4.csv")
    assert len(data) == 7 and data.iloc[-1]["source"] == "measured"
    ours = data.iloc[-1]
    assert ours.speculative_util == pytest.approx(1 / 12)  # sd at lambda 12
    assert pd.isna(ours.ours_mat)  # no precut run at lambda 24
    assert "8.18/68.2%" in md and "—" in md


def test_no_runs_is_one_error(tmp_path):
    (tmp_path / "runs").mkdir()
    with pytest.raises(HarnessError, match="make reproduce-holistic-table3"):
        holistic_table3(tmp_path, "m")
