"""Prompt sets (data.loaders) and text corpora (data.corpus) for the benchmarks; see data/README.md."""

from data.loaders import DataError, load_items, resolve_items

__all__ = ["DataError", "load_items", "resolve_items"]
