"""Helpers shared by the recipes that train on a target's outputs (draft: bench/train/draft.py; Medusa and early
heads: bench/train/heads.py, early_heads.py): plain config dicts, row splits of a source."""

from __future__ import annotations

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
