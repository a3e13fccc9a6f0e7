"""Per-rank acceptance statistics for built trees (methods/shared/trees/static.py), measured with Token
Recycling.

A step above the method: `make tree-stats MODEL=<name>` (scripts/calibrate_tree.py) runs it once per model,
dtype and `tree.calibration` block and writes the counts to `methods.shared.trees.static.stats_file`;
`tree=built` and `tree=auto` only read them. Token Recycling runs as evaluated (hot matrix, parallel update)
with the calibration tree (every rank at every depth below the rank-0 spine) on a calibration set disjoint
from the evaluation sets, and every verified tree is counted: which nodes would lie on a correct path.

It runs twice over the same prompts, each from a zero matrix (methods.shared.trees.static.TreeStats): once
with the matrix trained by every calibration node, as evaluated, and once trained by the root and accepted
path only. Both passes draft and count the whole calibration tree; only what the matrix learns from differs,
because a tree's acceptance depends on how many rows it refreshes a step (its size), and trees smaller than
the calibration tree refresh fewer (the module doc of methods/shared/trees/static.py has the numbers). Twice
the forwards of one pass.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from bench.cachefile import load_or_build, lock
from bench.core.engine import Engine
from bench.core.timing import PhaseTimer
from bench.models.chat import prompt_ids
from bench.paths import PROJECT, project_path
from data.loaders import load_items
from methods.shared.trees.static import (
    AcceptanceStats,
    TreeStats,
    read_stats,
    save_stats,
    spine_paths,
    stats_file,
)
from methods.token_recycling.proposer import TokenRecycling

TRAIN = ("tree", "path")  # what the matrix learns from: every tree input, or the root and accepted path only


class Calibrating(TokenRecycling):
    """Token Recycling that adds every verified tree to `stats` before its matrix update: the usual one
    (train="tree"), or only the rows of the root and the accepted drafts (train="path")."""

    def __init__(self, cfg, bundle, stats: AcceptanceStats, train: str = "tree"):
        super().__init__(cfg, bundle)
        if train not in TRAIN:
            raise ValueError(f"train must be one of {TRAIN}, got {train!r}")
        self.stats, self.train = stats, train

    def update(self, inputs, logits, target, acceptance):
        self.stats.observe(self.tree, inputs, target)
        if self.train == "tree":
            super().update(inputs, logits, target, acceptance)
            return
        keep = acceptance.path[0].to(inputs.device)  # [N+1] bool: root .. deepest accepted node
        self.adj[inputs[keep]] = logits[keep].topk(self.k, dim=-1).indices


def calibrate(calib, bundle) -> TreeStats:
    """Run Token Recycling (hot matrix, as evaluated) with the spine tree over the calibration prompts, once per
    way of training the matrix (TRAIN), each pass from a zero matrix."""
    from tqdm import tqdm

    ds = OmegaConf.load(PROJECT / "conf" / "dataset" / f"{calib.dataset}.yaml")
    items = load_items(ds, str(project_path(calib.data_mirror)), str(project_path(calib.data_cache)))
    items = items[calib.get("skip", 0) :]  # e.g. the demo calibrates on HumanEval past the tasks it evaluates
    method_cfg = OmegaConf.create({
        "name": "token_recycling", "topk": calib.topk, "update_strategy": "parallel", "start": "hot",
        "tree": {"name": "calibration", "paths": spine_paths(calib.depth, calib.topk)},
    })
    engine = Engine(bundle.model, bundle.eos_token_ids, bundle.max_context)
    timer = PhaseTimer(bundle.device, sync=False)
    picked = items[:: max(len(items) // calib.limit, 1)][: calib.limit]  # spread over the set's sources
    counts = {}
    for train in TRAIN:
        counts[train] = AcceptanceStats(calib.depth, calib.topk)
        proposer = Calibrating(method_cfg, bundle, counts[train], train)
        desc = f"calibrating trees on {calib.dataset} (matrix trained by the {train})"
        for item in tqdm(picked, desc=desc, unit="q"):
            ids = prompt_ids(bundle.tokenizer, calib.chat_template, [], item["turns"][0])
            ids = ids[-(bundle.max_context - calib.max_new_tokens - proposer.tree.size - 1):]
            engine.generate(proposer, ids, calib.max_new_tokens, timer)
    return TreeStats(counts["tree"], counts["path"])


def write_tree_stats(calib, bundle, force: bool = False) -> tuple[Path, bool]:
    """(stats file, whether it was measured now): calibrate and save, unless a sound file exists and not force.
    Under the file's lock, so two `make tree-stats` calibrate once; a corrupt file is reported and remeasured."""
    path = stats_file(calib, bundle)
    measured = []

    def build(p: Path) -> None:
        save_stats(calibrate(calib, bundle), calib, p)
        measured.append(p)

    if force:
        with lock(path):
            build(path)
    else:
        load_or_build(path, read_stats, build, "tree statistics")
    return path, bool(measured)
