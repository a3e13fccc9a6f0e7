"""The draft issue's sd table (bench/report/runs.py) on hand-written runs: one row per dataset, draft and
draft length (latest run wins), lambda in numeric order, and one error line without runs."""

from __future__ import annotations

import pytest

from bench.errors import HarnessError
from bench.report.runs import draft_sd_table
from tests.fixtures.runs import Memory, frame, write


def write_run(root, name, created, dataset, length, label, mat, speedup, intervals=None, speedup_interval=None):
    meta = {"run_id": name, "created": created, "experiment": "draft_sd_lambda", "method": "sd", "model": "m",
            "dataset": dataset, "temperature": 0.0,
            "method_settings": {"draft_label": label, "draft_length": length, "draft_vocab": 8192},
            "summary": {"n_questions": 5, "mat": mat, "tokens_per_s": {"mean_of_questions": 7.0},
                        "lossless": {"checked": 5, "equal": 5}, **({"intervals": intervals} if intervals else {})},
            "speedup": {"vs_ar": {"value": speedup, "interval": speedup_interval}}}
    write(root, [{}], meta)


def test_one_row_per_draft_and_length():
    runs = Memory()
    for i, length in enumerate((12, 4, 8)):
        write_run(runs, f"r{i}", f"2026-01-01T00:00:0{i}", "humaneval", length, "new", 1.5, 0.5)
    write_run(runs, "r3", "2026-01-01T00:00:03", "humaneval", 4, "new", 1.6, 0.7,  # a later run replaces r1
              {"mat": [1.5, 1.7], "tokens_per_s": [6.5, 7.5]}, [0.6, 0.8])
    write_run(runs, "r4", "2026-01-01T00:00:04", "humaneval", 4, "old", 1.9, 0.2)  # another draft: own row
    report = draft_sd_table(runs.runset(), "m")
    md = report.markdown
    rows = [line for line in md.splitlines() if line.startswith("| humaneval")]
    assert len(rows) == 4
    new = [r for r in rows if "| new" in r]
    assert [r.split("|")[4].strip() for r in new] == ["4", "8", "12"]
    # the run's stored intervals beside its numbers; runs without them show the number alone
    assert [c.strip() for c in new[0].split("|")[7:10]] == ["1.60 [1.50, 1.70]", "7.00 [6.50, 7.50]", "0.70 [0.60, 0.80]"]
    assert [c.strip() for c in new[1].split("|")[7:10]] == ["1.50", "7.00", "0.50"]
    data = frame(report, "tables/draft_sd.csv")
    latest = data[(data["draft"] == "new") & (data["lambda"] == 4)]
    assert latest.speedup_vs_ar.tolist() == [0.7] and latest.mat.tolist() == [1.6]
    assert latest.speedup_vs_ar_lo.tolist() == [0.6] and latest.mat_hi.tolist() == [1.7]


def test_no_runs_is_one_error():
    with pytest.raises(HarnessError, match="make reproduce-draft-sd"):
        draft_sd_table(Memory().runset(), "m")
