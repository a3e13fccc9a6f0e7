"""bench.perf.step_costs: each method's step costs outside the target forward (the data the step model prices a
step's rest with), here in the engine's graph mode (`--graphs`), where the forward phases are replays on CUDA."""

from __future__ import annotations

import json

import pytest

from bench.perf import step_costs


@pytest.mark.model
def test_graph_mode_step_costs_keep_the_widths_and_refuse_what_graph_mode_cannot_run(tmp_path, capsys):
    out = tmp_path / "g.json"
    assert step_costs.main(["--graphs", "--methods", "ar,pld,propd", "--max-new", "8", "--out", str(out)]) == 0
    got, _ = json.loads(out.read_text()), capsys.readouterr()
    assert got["graphs"] and len(got["prompt_tokens"]) == got["prompts"] == 1
    assert "brings its own" in got["refused"]["propd"]  # ProPD's pruning changes the width inside the forward
    ar, pld = got["methods"]["ar"], got["methods"]["pld"]
    assert set(ar["widths"]) == {"1"} and "step_graph" in ar["phases"]  # AR's whole step is one graph
    assert {"target_forward", "verify", "draft"} <= set(pld["phases"]) and sum(pld["widths"].values()) == pld["steps"]
    assert step_costs.main(["--graphs", "--temperature", "0.6", "--out", str(tmp_path / "t.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --graphs decodes greedily only") and not (tmp_path / "t.json").exists()
