"""Copy a finished run (already on disk) to Weights & Biases. Disk stays the source of truth."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from bench.run.store import read_run


def log_run(cfg, run_dir: Path) -> None:
    import wandb

    run = read_run(run_dir)  # the store is the one reader of a run's files
    records = run.records  # read before W&B starts: an unreadable run opens no W&B run
    # A sweep's jobs share one group (experiment + model), and each swept value is a top-level config key
    # (swept/<key>), so a W&B panel can plot MAT or tokens/s against e.g. swept/tree.size.
    experiment = run.experiment
    group = cfg.logger.group or (
        f"{experiment}-{cfg.model.name}" if experiment else f"{cfg.dataset.name}-{cfg.model.name}"
    )
    config = OmegaConf.to_container(cfg, resolve=True)
    config.update({f"swept/{k}": _number(v) for k, v in run.overrides.items()})
    config["method_settings"] = run.settings
    logged = wandb.init(
        project=cfg.logger.project,
        entity=cfg.logger.entity,
        mode=cfg.logger.mode,
        group=group,
        name=run.run_id,
        dir=str(run_dir.parent.parent),
        config=config,
        reinit="finish_previous",
    )
    try:
        m = run.summary
        logged.summary.update({
            "mat": m["mat"],
            "tokens_per_s": m["tokens_per_s"]["mean_of_questions"],
            "tokens_per_s_total": m["tokens_per_s"]["total"],
            "overhead_share": m["overhead_share"],
            "lossless_equal": m["lossless"]["equal"],
            "lossless_checked": m["lossless"]["checked"],
            # the grades (bench.run.grading); absent from summaries written before grading
            **{f"lossless_{k}": m["lossless"][k] for k in ("identical", "near_tie", "mismatch", "passed")
               if k in m["lossless"]},
            **{f"speedup_{k}": v["value"] for k, v in run.speedup.items()},
            **{f"phase_share/{k}": v for k, v in m["phase_share"].items()},
        })
        cols = ["question_id", "group", "turn", "new_tokens", "wall_time", "steps"]
        table = wandb.Table(columns=cols + ["mat"])
        for r in records:
            table.add_data(*[r[c] for c in cols], r["new_tokens"] / max(r["steps"], 1))
        logged.log({"records": table})
    finally:
        logged.finish()  # every multirun job closes its own W&B run
        # finish() can return before wandb-core's writer has flushed the .wandb file (seen under load);
        # teardown waits for it, so the offline copy is complete on disk when a job returns.
        wandb.teardown()


def _number(value: str):
    """Sweep values arrive as strings; W&B plots numbers only as numbers."""
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value
