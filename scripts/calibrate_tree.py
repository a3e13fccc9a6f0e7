"""`make tree-stats`: measure a model's per-rank acceptance, which `tree=built` and `tree=auto` build trees from.

    python scripts/calibrate_tree.py [model=smollm2-135m] [--force] [tree.calibration.limit=20 ...]

Runs Token Recycling with the calibration tree over the prompts of the `tree.calibration` block
(conf/tree/built.yaml; methods/token_recycling/calibration.py), twice: the matrix trained by every tree node,
then by the accepted path only (trees of other sizes interpolate between the two,
methods/shared/trees/static.py), and writes the counts atomically to
results/cache/tree_stats/<model>-<dtype>-<dataset>-<limit>x<tokens>-d<depth>k<topk>.json. Other Hydra
overrides (tree=auto, tree.calibration.*, model.*, paths.*) are passed on: give the ones a run uses, so that
the file is the one the run reads. A file already there is kept unless --force (or it lacks the path-trained
counts: calibrated before they were recorded, it is remeasured). Prints one line: where the
file is. A missing dataset or model is one `error:` line and a non-zero exit.
"""

from __future__ import annotations

import sys

from bench.cli import run_script
from bench.errors import ConfigError, HarnessError
from bench.run.compose import compose_config, split_flags
from bench.run.runner import get_bundle
from bench.train.recipes import check_recipes
from data.loaders import DataError
from methods.token_recycling.calibration import write_tree_stats

USAGE = __doc__.strip().splitlines()[2].strip()


def with_calibrated_tree(overrides: list[str]) -> list[str]:
    """`tree=built` unless the overrides choose a tree (the default tree, a template, has no calibration)."""
    return overrides if any(o.startswith("tree=") for o in overrides) else ["tree=built", *overrides]


def tree_stats(cfg, force: bool) -> str:
    """Calibrate (or keep) the statistics of the composed config's tree and model; the line to print."""
    calib = cfg.tree.get("calibration")
    if calib is None:
        raise ConfigError(f"tree={cfg.tree.get('name')} is not built from statistics: nothing to calibrate")
    bundle = get_bundle(cfg.model, cfg.paths.model_cache)
    path, measured = write_tree_stats(calib, bundle, force)
    state = "calibrated" if measured else "up to date"
    return f"tree statistics for {bundle.name}: {state} -> {path}"


def main(argv: list[str]) -> int:
    try:
        overrides, flags = split_flags(argv, ("--force",), USAGE)
        cfg = check_recipes(compose_config(with_calibrated_tree(overrides)), "tree.calibration")
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        line = tree_stats(cfg, force="--force" in flags)
    except (HarnessError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(line)
    return 0


if __name__ == "__main__":
    run_script(main)
