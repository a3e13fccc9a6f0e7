"""The summary's speedup claim (bench/report/claims.py) is decided on the same speedup the tables print: per-question
rates at batch 1, aggregate tokens/s at batch > 1."""

from __future__ import annotations

from bench.report.claims import speedup_claim
from tests.fixtures.runs import Memory, write
from tests.test_metrics import batched_records


def test_batch_claim_uses_aggregate_speedup():
    mine = batched_records()  # two batches of two rows
    # AR: the same rows, each batch taking twice as long while every row's own latency stays: the aggregate rate
    # halves, the mean of per-row rates does not
    base = [{**r, "batch": {**r["batch"], "wall_time": 2 * r["batch"]["wall_time"]}} for r in mine]
    common = {"model": "m", "dataset": "d", "max_new_tokens": 8, "machine": "cpu", "batch_size": 2, "temperature": 0}
    runs = Memory()
    write(runs, base, {**common, "run_id": "ar", "method": "ar", "created": "2026-01-01T00:00:00"})
    write(runs, mine, {**common, "run_id": "p", "method": "propd", "created": "2026-01-01T00:01:00"})
    claim = speedup_claim(("propd",), runs.runset().runs)
    assert claim == "propd faster than AR: holds in 1 of 1 (2.00 [2.00, 2.00])", claim
