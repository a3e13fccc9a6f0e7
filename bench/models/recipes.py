"""Helpers shared by the recipes that train on a target's outputs (draft: bench/models/draft_training.py; Medusa
and early heads: bench/models/heads_training.py): plain config dicts, row splits of a source, the learning rate
schedule."""

from __future__ import annotations

import math

from omegaconf import OmegaConf


def plain(cfg) -> dict:
    return OmegaConf.to_container(OmegaConf.create(cfg), resolve=True) if not isinstance(cfg, dict) else cfg


def row_split(src: dict, index: int) -> str | None:
    """'train', 'heldout' or None (unused) for row `index` of a source."""
    held = src.get("heldout_rows")
    if held and held[0] <= index < held[1]:
        return "heldout"
    every = src.get("heldout_every")
    train = src.get("train_rows")
    in_train = train is None or train[0] <= index < train[1]
    if in_train and every and index % int(every) == 0:
        return "heldout"
    return "train" if in_train else None


def rows_needed(src: dict) -> int | None:
    stops = [r[1] for r in (src.get("train_rows"), src.get("heldout_rows")) if r]
    if src.get("train_rows") is None:
        return None
    return max(stops)


def lr_at(step: int, progress: float, base: float, warmup: int, floor: float = 0.1) -> float:
    """Linear warm-up over `warmup` steps, then cosine from base to floor*base over the budget (progress 0..1)."""
    if step < warmup:
        return base * (step + 1) / warmup
    return base * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))
