"""Static draft trees built from measured acceptance statistics (Medusa/Sequoia-style greedy construction).

Model: the draft at depth d with candidate rank r is accepted, given its parent was, with probability
p[d, r], independently along a path (Medusa's assumption). A node's chance of lying on the accepted path
is the product of p along its path, and the expected tokens per step is 1 + the sum of those products.
Because the products shrink along a path, the n most likely nodes form a prefix-closed set, so best-first
expansion from the root yields the tree of n nodes with the highest expected acceptance. For a required
depth D the most likely depth-D path is placed first and the rest filled best-first: the best tree of that
size among those that reach depth D.

p is measured per model, once, by running Token Recycling with a calibration tree (every rank at every
depth below the rank-0 spine) on a calibration set disjoint from the evaluation sets: a step above the
method (`make tree-stats MODEL=<name>`, scripts/calibrate_tree.py, methods/token_recycling/calibration.py)
that writes the counts to `stats_file`. Building a tree only reads them; missing, it is a one-line error.

p depends on the tree that trains the adjacency matrix, not only on the tree that drafts: every tree input's
row is rewritten each step, so a 64-node tree refreshes 65 rows a step and a 6-node tree 7, and the small
tree's matrix knows fewer tokens. Measured (smollm2-135m, 10 HumanEval prompts x 128 tokens): p[0, 0] is
0.37 when the matrix learns from the 64-node calibration tree and 0.23 when it learns from a 6-node tree's
nodes only, and that 6-node tree's predicted MAT 1.64 vs 1.48 (measured 1.46). So the calibration runs twice
(TreeStats): the matrix trained by every calibration node (`tree`) and by the root and accepted path only
(`path`, the rows every tree writes); a tree of n nodes uses p interpolated linearly in n between the two,
p_path at n = 0 to p_tree at n = the calibration tree's size (and beyond). Linear fits the one midpoint
measured: the matrix trained by 32 of the 64 nodes gave that 6-node tree 1.56, the interpolation 1.56.
"""

from __future__ import annotations

import heapq
import json
import math
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from bench.cachefile import CorruptCache, atomic_write, load_or_fail, lock
from bench.core.tree import Tree, tree_from_paths
from bench.errors import ConfigError
from bench.paths import PROJECT, project_path


class AcceptanceStats:
    """trials[d, r]: times the rank-r draft at depth d+1 had an accepted parent; hits[d, r]: it was accepted."""

    def __init__(self, depth: int, topk: int):
        self.trials = np.zeros((depth, topk), dtype=np.int64)
        self.hits = np.zeros((depth, topk), dtype=np.int64)

    def observe(self, tree: Tree, inputs: torch.Tensor, target: torch.Tensor) -> None:
        """Count, for one verified tree, which nodes would lie on a correct path (not only the chosen one)."""
        parents = tree.parents.to(inputs.device)
        ok = torch.zeros(tree.size + 1, dtype=torch.bool, device=inputs.device)
        ok[0] = True
        for a, b in tree.level_slices:  # parents precede children, so one pass per level suffices
            ok[a:b] = ok[parents[a:b]] & (inputs[a:b] == target[parents[a:b]])
        d = (tree.depth[1:] - 1).numpy()
        r = tree.choice[1:].numpy()
        np.add.at(self.trials, (d, r), ok[parents[1:]].cpu().numpy())
        np.add.at(self.hits, (d, r), ok[1:].cpu().numpy())

    def probs(self, prior_weight: float = 2.0) -> np.ndarray:
        """p[d, r], shrunk toward the previous depth's estimate where a depth has few trials (deep levels)."""
        p = np.zeros(self.trials.shape)
        for d in range(len(p)):
            prior = p[d - 1] if d else (self.hits.sum(0) + 1) / (self.trials.sum(0) + 2)
            p[d] = (self.hits[d] + prior_weight * prior) / (self.trials[d] + prior_weight)
        return p

    def to_json(self) -> dict:
        return {"trials": self.trials.tolist(), "hits": self.hits.tolist()}

    @classmethod
    def from_json(cls, data: dict) -> AcceptanceStats:
        trials = np.asarray(data["trials"], dtype=np.int64)
        stats = cls(*trials.shape)
        stats.trials, stats.hits = trials, np.asarray(data["hits"], dtype=np.int64)
        return stats


class TreeStats:
    """One calibration's counts twice, with the adjacency matrix trained two ways (see the module doc):
    `tree`, by every node of the calibration tree (what a tree of that size trains), and `path`, by the root
    and the accepted path only (the rows any tree writes: the limit of a tree of few nodes)."""

    def __init__(self, tree: AcceptanceStats, path: AcceptanceStats):
        if tree.trials.shape != path.trials.shape:
            raise ValueError(f"tree-trained {tree.trials.shape} and path-trained {path.trials.shape} counts differ")
        self.tree, self.path = tree, path

    @property
    def calibration_size(self) -> int:
        """Nodes of the calibration tree the `tree` counts were trained by (spine_paths: depth * topk)."""
        depth, topk = self.tree.trials.shape
        return depth * topk

    def probs(self, size: int) -> np.ndarray:
        """p[d, r] for a tree of `size` nodes: linear in size from p_path (0 nodes) to p_tree (the calibration
        tree's size, and larger trees: no extrapolation past what was measured)."""
        w = min(max(size, 0) / self.calibration_size, 1.0)
        return (1.0 - w) * self.path.probs() + w * self.tree.probs()

    def to_json(self) -> dict:
        return {**self.tree.to_json(), "path_trained": self.path.to_json()}

    @classmethod
    def from_json(cls, data: dict) -> TreeStats:
        return cls(AcceptanceStats.from_json(data), AcceptanceStats.from_json(data["path_trained"]))


def spine_paths(depth: int, topk: int) -> list[list[int]]:
    """Calibration tree: every rank at every depth below the rank-0 chain (depth * topk nodes)."""
    return [[0] * j + [r] for j in range(depth) for r in range(topk)]


def best_tree(p: np.ndarray, size: int, depth: int) -> list[list[int]]:
    """The `size` nodes with the highest path probability, reaching exactly `depth` (see module doc)."""
    max_depth, topk = p.shape
    if not 1 <= depth <= size:
        raise ConfigError(f"a tree of {size} nodes cannot have depth {depth}")
    if depth > max_depth:
        raise ConfigError(f"depth {depth} exceeds the calibrated depth {max_depth}")
    if size > sum(topk ** (d + 1) for d in range(depth)):
        raise ConfigError(f"{size} nodes do not fit in a depth-{depth} tree of {topk} children per node")
    spine = [int(np.argmax(p[d])) for d in range(depth)]
    chosen: dict[tuple, float] = {}
    logp = 0.0
    for d, r in enumerate(spine):
        logp += math.log(max(p[d, r], 1e-12))
        chosen[tuple(spine[: d + 1])] = logp
    frontier: list[tuple[float, tuple]] = []

    def push_children(path: tuple, logp: float) -> None:
        d = len(path)
        if d < depth:
            for r in range(topk):
                child = (*path, r)
                if child not in chosen:
                    heapq.heappush(frontier, (-(logp + math.log(max(p[d, r], 1e-12))), child))

    push_children((), 0.0)
    for path, lp in list(chosen.items()):
        push_children(path, lp)
    while len(chosen) < size:
        neg, path = heapq.heappop(frontier)
        if path in chosen:
            continue
        chosen[path] = -neg
        push_children(path, -neg)
    return [list(path) for path in sorted(chosen, key=lambda q: (len(q), q))]


def expected_mat(p: np.ndarray, paths) -> float:
    """Predicted tokens per step: 1 (bonus) + the sum over nodes of the product of p along the path."""
    return 1.0 + sum(math.prod(p[d, r] for d, r in enumerate(path)) for path in paths)


# ---- per-rank acceptance statistics on disk (written by methods/token_recycling/calibration.py) ----

CALIBRATION_KEYS = ("dataset", "skip", "limit", "max_new_tokens", "depth", "topk")  # what stats_file is keyed on


def stats_file(calib, bundle) -> Path:
    """Where a model's statistics for a `tree.calibration` block live (per model, dtype and calibration)."""
    dtype = str(bundle.dtype).replace("torch.", "")
    skip = f"-from{calib.skip}" if calib.get("skip") else ""
    name = (f"{bundle.name}-{dtype}-{calib.dataset}{skip}-{calib.limit}x{calib.max_new_tokens}"
            f"-d{calib.depth}k{calib.topk}")
    return project_path(calib.cache_dir) / f"{name}.json"


def save_stats(stats: TreeStats, calib, path: Path) -> None:
    """Atomically, under the file's lock: the counts and the calibration config they were measured with."""
    with lock(path):
        atomic_write(path, json.dumps({**stats.to_json(), "calibration": OmegaConf.to_container(calib, resolve=True)}))


def read_stats(path: Path) -> TreeStats:
    """Saved statistics; CorruptCache (or the JSON error) unless both sets are counts with hits <= trials.
    A file without the path-trained counts (calibrated before they were recorded) is stale: `make tree-stats`
    remeasures it."""
    data = json.loads(path.read_text())
    if "path_trained" not in data:
        raise CorruptCache("no path-trained counts (calibrated before they were recorded)")
    for counts in (data, data["path_trained"]):
        t, h = np.asarray(counts["trials"]), np.asarray(counts["hits"])
        if t.ndim != 2 or not t.size or h.shape != t.shape or (h > t).any() or (h < 0).any():
            raise CorruptCache(f"trials {t.shape} and hits {h.shape} are not counts of one calibration")
    try:
        return TreeStats.from_json(data)
    except ValueError as err:  # the two sets differ in shape
        raise CorruptCache(str(err)) from None


def load_stats(calib, bundle) -> TreeStats:
    """The cached statistics; missing or corrupt, a one-line error naming the command that writes them."""
    path = stats_file(calib, bundle)
    shown = path.relative_to(PROJECT) if path.is_relative_to(PROJECT) else path
    # The file is keyed on the calibration's settings: name the ones this run changed, so the command writes it.
    default = OmegaConf.load(PROJECT / "conf" / "tree" / "built.yaml").calibration
    changed = " ".join(f"tree.calibration.{k}={calib.get(k)}" for k in CALIBRATION_KEYS
                       if calib.get(k, default.get(k)) != default.get(k))
    dtype = str(bundle.dtype).replace("torch.", "")
    changed += f" model.dtype={dtype}" if dtype != "float32" else ""  # the file is per dtype too (stats_file)
    changed = changed.strip()
    args = f' ARGS="{changed}"' if changed else ""
    command = f"`make tree-stats MODEL={bundle.name}{args}`"
    cache = project_path(calib.cache_dir)  # by default <paths.results>/cache/tree_stats
    if cache.parts[-2:] == ("cache", "tree_stats") and cache.parents[1] != PROJECT / "results":
        # make's target writes under results/: name this run's results folder instead
        command = f"`python scripts/calibrate_tree.py model={bundle.name} paths.results={cache.parents[1]} {changed}`"
    if not path.is_file():
        raise ConfigError(
            f"no tree statistics for model '{bundle.name}' ({shown}): run {command} "
            f"(or `python scripts/calibrate_tree.py model={bundle.name} {changed}`)"
        )
    return load_or_fail(path, read_stats, f"the tree statistics {shown}", command)


# ---- tree config group -> Tree ----

def resolve_tree(tree_cfg, bundle, topk: int) -> tuple[Tree, dict]:
    """A `tree` config (template paths | built: size, depth | auto) as a Tree plus what to record about it."""
    kind = tree_cfg.get("kind", "template")
    if kind == "template":
        tree = tree_from_paths([list(p) for p in tree_cfg.paths])
        return tree, {"tree_source": "template", "tree_config": tree_cfg.get("name")}
    if kind not in ("built", "auto"):
        raise ConfigError(f"tree kind must be template, built or auto, got {kind!r}")
    if tree_cfg.calibration.topk != topk:
        raise ConfigError(f"tree calibration topk {tree_cfg.calibration.topk} != method topk {topk}")
    stats = load_stats(tree_cfg.calibration, bundle)
    if kind == "built":
        p = stats.probs(int(tree_cfg.size))  # p as a tree of this size trains the matrix
        paths = best_tree(p, int(tree_cfg.size), int(tree_cfg.depth))
        info = {"tree_source": "built", "predicted_mat": expected_mat(p, paths)}
    else:
        from bench.models import forward_cost

        curve = forward_cost.load_or_measure(bundle, project_path(tree_cfg.forward_cost_dir))
        paths, info = auto_tree(stats, curve, tree_cfg.sizes, tree_cfg.max_depth)
    return tree_from_paths(paths), {**info, "tree_config": tree_cfg.get("name"), "tree_paths": paths}


def auto_tree(stats: TreeStats | np.ndarray, curve: dict, sizes, max_depth: int) -> tuple[list[list[int]], dict]:
    """The (size, depth) maximizing predicted tokens per second, MAT(n) / T(n + 1), over the grid. Each size n
    is built and scored with p as a tree of n nodes trains the matrix (TreeStats.probs(n)); a bare p[d, r]
    array is used for every size."""
    from bench.models.forward_cost import cost_at

    t1 = float(cost_at(curve, 1))
    best = None
    for n in sizes:
        p = stats.probs(int(n)) if isinstance(stats, TreeStats) else stats
        for d in range(1, min(int(n), max_depth, len(p)) + 1):
            try:
                paths = best_tree(p, int(n), d)
            except ConfigError:
                continue  # n nodes do not fit at this shallow depth
            mat = expected_mat(p, paths)
            speed = mat / float(cost_at(curve, int(n) + 1))
            if best is None or speed > best[0]:
                best = (speed, paths, mat)
    if best is None:
        raise ConfigError("tree=auto: no size in the grid fits")
    speed, paths, mat = best
    return paths, {
        "tree_source": "auto",
        "predicted_mat": mat,
        "predicted_speedup_vs_ar": speed * t1,
        "forward_cost_machine": curve["machine"],
        "forward_cost_ms": dict(zip(map(str, curve["sizes"]), curve["ms"])),
    }
