"""`make draft-sweep`: drafts of several depths, each scored at several vocabulary sizes V' and training times,
and the configuration with the best predicted speedup.

    python scripts/draft_sweep.py [model=smollm2-135m] [--force] [model.draft.sweep.max_minutes=3 ...]

The sweep is the model config's `draft.sweep` block: `layers` (depths, each trained for `max_minutes` with the
rest of `draft.train`, as draft `<id>-L<n>` beside the default draft; the self-distillation data is shared and
cached). V' and training time need no extra training: each report scores the draft on every prefix V' of its token
ranking and records held-out agreement every `eval_every_minutes`. Every configuration's agreement alpha (chat) and
cost c (decode step relative to the target, measured side by side) give a predicted speedup for chains at the best
draft length and for 64-node trees (bench/train/draft_choice.py), with this machine's verification cost T(n) / T(1)
and with a flat one (a GPU at small n). Writes results/drafts/<model>-draft-sweep.{md,csv,json}; the md names the
best configuration for each and says why. A built depth whose recipe matches is reused unless --force.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf, open_dict

from bench.cachefile import atomic_write
from bench.cli import run_script
from bench.errors import HarnessError
from bench.models.loading import drafts_dir
from bench.paths import project_path
from bench.run.compose import compose_config, split_flags, usage_of
from bench.run.runner import get_bundle
from bench.train import draft_choice
from bench.train.draft import build_or_reuse, summary_line
from bench.train.recipes import check_recipes, plain
from data.loaders import DataError


def sweep_rows(report: dict) -> list[dict]:
    """One row per (V', training time) of one draft report: agreement, cost and predicted speedups."""
    rows = []
    for entry in report["predicted"].values():
        rows.append({"layers": report["layers"], "vocab": entry["vocab"], "minutes": report["train_seconds"] / 60,
                     "agreement": entry["agreement"], "cost_ratio": entry["cost_ratio"],
                     **{f"{k}_cpu": entry["this_machine"][k] for k in ("chain_speedup", "chain_k", "tree_speedup")},
                     **{f"{k}_flat": entry["gpu_like"][k] for k in ("chain_speedup", "chain_k", "tree_speedup")}})
    trained = str(report["vocab"]) if str(report["vocab"]) in report["predicted"] else "full"
    cost = report["predicted"][trained]["cost_ratio"]
    chat = report["sources"][0]
    for point in report.get("agreement_during_training", []):
        alpha = point["agreement"][chat]
        cpu = draft_choice.chain_speedup(alpha, cost, verify=verify_from(report))
        flat = draft_choice.chain_speedup(alpha, cost)
        rows.append({"layers": report["layers"], "vocab": report["vocab"], "minutes": point["minutes"],
                     "agreement": alpha, "cost_ratio": cost, "chain_speedup_cpu": cpu[0], "chain_k_cpu": cpu[1],
                     "tree_speedup_cpu": draft_choice.tree_speedup(point["hits"], cost, verify=verify_from(report))[0],
                     "chain_speedup_flat": flat[0], "chain_k_flat": flat[1],
                     "tree_speedup_flat": draft_choice.tree_speedup(point["hits"], cost)[0]})
    return rows


def verify_from(report: dict):
    return draft_choice.verify_curve(report["verify_ratio"])


def choose(table: pd.DataFrame) -> list[str]:
    """Sentences naming the best configuration per criterion (the highest predicted speedup)."""
    lines = []
    for col, what in (("chain_speedup_cpu", "chains, this machine's verification cost"),
                      ("tree_speedup_cpu", "64-node trees, this machine's verification cost"),
                      ("chain_speedup_flat", "chains, flat verification cost (a GPU at small widths)"),
                      ("tree_speedup_flat", "64-node trees, flat verification cost")):
        best = table.loc[table[col].idxmax()]
        lines.append(f"- {what}: {int(best.layers)} layers, V' = {int(best.vocab)}, {best.minutes:.1f} min of "
                     f"training: agreement {best.agreement:.1%} at cost {best.cost_ratio:.2f}x, predicted "
                     f"{best[col]:.2f}x AR.")
    return lines


def main(argv: list[str]) -> int:
    try:
        overrides, flags = split_flags(argv, ("--force",), usage_of(__doc__))
        cfg = check_recipes(compose_config(overrides), "draft")
        if cfg.model.get("draft") is None or cfg.model.draft.get("sweep") is None:
            raise HarnessError(f"model '{cfg.model.name}' has no draft.sweep block")
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        sweep, reports = plain(cfg.model.draft.sweep), []
        for layers in sweep["layers"]:
            model_cfg = OmegaConf.create(OmegaConf.to_container(cfg.model, resolve=True))
            with open_dict(model_cfg):
                model_cfg.draft.id = f"{cfg.model.draft.id}-L{layers}"
                model_cfg.draft.name = model_cfg.draft.id
                model_cfg.draft.train.layers = int(layers)
                model_cfg.draft.train.max_minutes = float(sweep["max_minutes"])
            out = drafts_dir(project_path(cfg.paths.model_cache)) / str(model_cfg.draft.id)
            # train_draft.py's build_or_reuse_draft, not imported: `python scripts/<x>.py` has no `scripts` package
            mirror, cache = str(project_path(cfg.paths.data_mirror)), str(project_path(cfg.paths.data_cache))
            report, _ = build_or_reuse(model_cfg, out, lambda: get_bundle(cfg.model, cfg.paths.model_cache), mirror,
                                       cache, "--force" in flags)
            print(summary_line(report))
            reports.append(report)
        table = pd.DataFrame([row for r in reports for row in sweep_rows(r)]).round(4)
        intro = ("Predicted speedup over AR from measured held-out agreement on the target's chat outputs and "
                 "measured decode cost (scripts/draft_sweep.py; formulas in bench/train/draft_choice.py). Rows "
                 "at the trained V' and earlier minutes come from the agreement checkpoints during training.")
        lines = [f"# Draft sweep for {cfg.model.name}", "", intro, "",
                 table.to_markdown(index=False), "", "Best predicted:", *choose(table), ""]
        out_dir = project_path(cfg.paths.results) / "drafts"
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = out_dir / f"{cfg.model.name}-draft-sweep"
        atomic_write(Path(f"{stem}.csv"), table.to_csv(index=False))
        atomic_write(Path(f"{stem}.json"), json.dumps(table.to_dict(orient="records"), indent=1) + "\n")
        atomic_write(Path(f"{stem}.md"), "\n".join(lines))
        print("\n".join(choose(table)))
    except (HarnessError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"-> {stem}.md")
    return 0


if __name__ == "__main__":
    run_script(main)
