"""Sequoia's tree (Chen et al. 2024): the draft tree maximizing expected accepted tokens per unit time, from
a measured positional acceptance vector and the measured cost curves of this machine (hardware-aware).

acceptance[k] = probability that the k-th child drawn from the draft (without replacement; the draft's
top-k at temperature 0) is the one accepted by Sequoia's verification rule. Measured teacher-forced on
calibration text that no evaluation set contains (c4 rows 0-199 by default: Sequoia/DySpec evaluate rows
200-1999 only). With acceptance made non-increasing in k, a node's chance of lying on the accepted path is
the product of acceptance over its ranks, the best tree of n nodes is the n best nodes (static.py,
best-first over every depth, which is what Sequoia's dynamic program computes), and the size is chosen to
maximize E[tokens](n) / (T_target(n + 1) + depth * T_draft(1)) over the configured sizes.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from bench.cachefile import CorruptCache, atomic_write, load_or_build
from bench.core.sampling import stochastic_accept, target_probs
from bench.core.tree import tree_from_paths
from bench.errors import ConfigError
from bench.paths import PROJECT, project_path
from methods.shared.trees.static import best_tree, expected_mat


@torch.inference_mode()
def measure_acceptance(target, draft, token_rows, temperature: float, draft_temperature: float, width: int,
                       seed: int = 0) -> np.ndarray:
    """Fraction of positions at which rank k (0..width-1) was accepted; teacher-forced over token_rows."""
    gen = torch.Generator().manual_seed(seed)
    star = tree_from_paths([[k] for k in range(width)])
    hits, positions = np.zeros(width), 0
    for row in token_rows:
        ids = torch.tensor([row], device=target.device)
        lt = target(input_ids=ids).logits[0].float().cpu()
        ld = draft(input_ids=ids.to(draft.device)).logits[0].float().cpu()
        for t in range(len(row)):
            positions += 1
            if temperature == 0:
                ranks = ld[t].topk(width).indices
                match = (ranks == lt[t].argmax()).nonzero()
                if len(match):
                    hits[int(match[0])] += 1
                continue
            q = torch.softmax(ld[t] / draft_temperature, -1)
            p = target_probs(lt[t], temperature)
            kids = torch.multinomial(q, width, replacement=False, generator=gen)
            tokens = torch.cat([torch.zeros(1, dtype=torch.long), kids])
            path, _ = stochastic_accept(star, tokens, p.expand(width + 1, -1), q.expand(width + 1, -1),
                                        "sequoia", gen)
            if len(path) > 1:
                hits[path[1] - 1] += 1
    return hits / max(positions, 1)


def shape(acceptance: np.ndarray, size: int, max_depth: int) -> list[list[int]]:
    """The best tree of `size` nodes (rank paths) at any depth up to max_depth."""
    a = np.minimum.accumulate(np.clip(acceptance, 1e-6, 1.0))  # later draws never beat earlier ones
    p = np.tile(a, (max_depth, 1))
    best = None
    for depth in range(1, min(size, max_depth) + 1):
        try:
            paths = best_tree(p, size, depth)
        except ConfigError:
            continue
        value = expected_mat(p, paths)
        if best is None or value > best[0]:
            best = (value, paths)
    if best is None:
        raise ConfigError(f"sequoia: no tree of {size} nodes fits width {len(a)} and depth {max_depth}")
    return best[1]


def choose_size(acceptance, sizes, max_depth, target_ms, draft_ms: float) -> tuple[list[list[int]], dict]:
    """Hardware-aware: the size maximizing predicted tokens per ms (target_ms: callable n -> T_target(n))."""
    a = np.minimum.accumulate(np.clip(acceptance, 1e-6, 1.0))
    best = None
    for n in sizes:
        paths = shape(acceptance, int(n), max_depth)
        mat = expected_mat(np.tile(a, (max_depth, 1)), paths)
        depth = max(len(p) for p in paths)
        ms = float(target_ms(int(n) + 1)) + depth * draft_ms
        if best is None or mat / ms > best[0]:
            best = (mat / ms, paths, mat, ms)
    _, paths, mat, ms = best
    return paths, {"predicted_mat": mat, "predicted_step_ms": ms}


def acceptance_file(cache_dir, target_name, draft_name, temperature, draft_temperature, width, calib) -> Path:
    name = (f"{target_name}-{draft_name}-T{temperature:g}-Td{draft_temperature:g}-w{width}-"
            f"{calib.dataset}-{calib.limit}x{calib.tokens}")
    return project_path(cache_dir) / f"{name.replace('/', '_')}.json"


def calibration_rows(calib, bundle) -> list[list[int]]:
    """The first `limit` rows of the calibration set in file order (its `selection` is ignored: c4's first
    200 rows are exactly the ones Sequoia's selection never evaluates), raw text, first `tokens` tokens."""
    from omegaconf import OmegaConf

    from data.loaders import load_items

    ds = OmegaConf.load(PROJECT / "conf" / "dataset" / f"{calib.dataset}.yaml")
    ds.pop("selection", None)
    items = load_items(ds, str(project_path(calib.data_mirror)), str(project_path(calib.data_cache)))[: int(calib.limit)]
    return [bundle.tokenizer(it["turns"][0]).input_ids[: int(calib.tokens)] for it in items]


def read_acceptance(path: Path) -> np.ndarray:
    """A cached acceptance vector; CorruptCache (or the JSON error) unless it is a non-empty vector in [0, 1]."""
    acc = np.asarray(json.loads(path.read_text())["acceptance"], dtype=float)
    if acc.ndim != 1 or not len(acc) or not ((acc >= 0) & (acc <= 1)).all():
        raise CorruptCache(f"acceptance of shape {acc.shape} is not a vector of probabilities")
    return acc


def load_or_measure_acceptance(bundle, draft, draft_name: str, temperature: float, draft_temperature: float,
                               width: int, calib) -> np.ndarray:
    """Cached per (target, draft, temperatures, width, calibration set); measured if absent or corrupt, by one
    process while the others that want it wait (bench.cachefile)."""

    def build(path: Path) -> np.ndarray:
        rows = calibration_rows(calib, bundle)
        acc = measure_acceptance(bundle.model, draft, rows, temperature, draft_temperature, width)
        atomic_write(path, json.dumps({"acceptance": acc.tolist(), "rows": len(rows)}, indent=2))
        return acc

    path = acceptance_file(calib.cache_dir, bundle.name, draft_name, temperature, draft_temperature, width, calib)
    return load_or_build(path, read_acceptance, build, "Sequoia acceptance vector")


def draft_cost_ms(draft, draft_name: str, bundle, cache_dir) -> float:
    """T_draft(1) in ms, measured like the target's curve (bench.models.forward_cost), cached per machine."""
    from bench.models import forward_cost

    pseudo = SimpleNamespace(model=draft, device=bundle.device, dtype=bundle.dtype, vocab_size=bundle.vocab_size,
                             name=draft_name)
    curve = forward_cost.load_or_measure(pseudo, project_path(cache_dir), sizes=(1, 2, 4, 8))
    return float(forward_cost.cost_at(curve, 1))
