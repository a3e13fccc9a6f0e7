"""logger=wandb copies a finished run to an offline W&B run (no network) and closes it."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from bench.run.wandb_log import log_run


def test_offline_runs_are_complete_on_return(tmp_path, monkeypatch):
    """Two jobs in one process, as a multirun: each offline copy is complete on disk when log_run returns."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = OmegaConf.create({
        "logger": {"project": "test", "entity": None, "mode": "offline", "group": None},
        "dataset": {"name": "humaneval"}, "model": {"name": "m"},
    })
    for run_id, size in (("r1", "40"), ("r2", "60")):
        run_dir = tmp_path / "runs" / run_id
        run_dir.mkdir(parents=True)
        record = {"question_id": 1, "group": "code", "turn": 0, "new_tokens": 8, "wall_time": 0.5, "steps": 4}
        (run_dir / "records.jsonl").write_text(json.dumps(record) + "\n")
        summary = {
            "run_id": run_id,
            "experiment": "tr_fig3a",
            "overrides": {"tree.size": size, "method": "token_recycling"},
            "speedup": {"vs_ar": {"value": 1.5, "baseline_run": "r0"}},
            "summary": {"mat": 2.0, "tokens_per_s": {"mean_of_questions": 16.0, "total": 16.0},
                        "overhead_share": 0.05, "lossless": {"equal": 1, "checked": 1},
                        "phase_share": {"target_forward": 0.9}},
        }
        (run_dir / "summary.json").write_text(json.dumps(summary))
        log_run(cfg, run_dir)
    offline = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(offline) == 2
    for run_dir in offline:
        # The offline log (protobuf) carries the config and group as JSON/plain strings; read at once,
        # with no waiting, because a finished job must have left a complete copy.
        log = next(run_dir.glob("*.wandb")).read_bytes()
        assert b"swept/tree.size" in log and b"tr_fig3a-m" in log


def test_a_failed_copy_is_one_warning_line_and_the_run_stands(tmp_path, monkeypatch, capsys):
    """No API key, no network: W&B is a copy, so the run (already on disk) is not lost to its failure."""
    from bench.run import __main__ as cli

    def refuse(cfg, path):
        raise RuntimeError("No API key configured.\nUse `wandb login`")

    monkeypatch.setattr("bench.run.wandb_log.log_run", refuse)
    cli.copy_to_wandb(OmegaConf.create({}), tmp_path)
    err = capsys.readouterr().err
    assert err == ("warning: not logged to W&B (RuntimeError: No API key configured.); the run is complete on "
                   "disk\n")
