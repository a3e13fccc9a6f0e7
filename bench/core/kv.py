"""KV-cache bookkeeping of the decode loop: after verification every row keeps its prefix plus its accepted path.

Layout: a DynamicCache of shape [B, H, L, D] per layer. Row b's valid entries are columns [0, prefix[b]);
columns from prefix[b] to the cache length L are stale (a shorter row's padding, or drafts it rejected) and
the attention mask hides them. A verification appends the padded draft trees at columns L..L+T-1; each row's
accepted slots are then moved right behind its own prefix, and the cache is cut to the longest row. Moving
only the accepted tokens costs O(tree depth) per row and step, where re-aligning every row (left padding
rebuilt each step) would copy the whole cache. Only full-attention layers (DynamicLayer) are handled;
sliding-window caches would need their own rule.

Storage: transformers' DynamicLayer appends by concatenation, copying each layer's whole cache every forward (a
copy that grows with the context). `new_cache` gives layers that write into a buffer preallocated for the run
(`capacity` positions, doubled if ever exceeded) and expose `keys`/`values` as views of it, so an append costs
only the new tokens and a crop is a shorter view.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """A DynamicLayer whose keys/values are views [B, H, :length, D] of buffers [B, H, capacity, D]. Everything
    that reads or crops a DynamicLayer works unchanged; in-place writes to the views (keep_accepted's scatter)
    land in the buffer. Replacing `keys`/`values` by a new tensor is not allowed: use batch_select_indices."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = int(capacity)
        self._k = self._v = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        b, h, _, d = key_states.shape
        self._k = key_states.new_empty(b, h, self.capacity, d)
        self._v = value_states.new_empty(b, h, self.capacity, value_states.shape[-1])
        self.keys, self.values = self._k[:, :, :0], self._v[:, :, :0]
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, t = self.keys.shape[-2], key_states.shape[-2]
        if n + t > self._k.shape[2]:
            self._grow(2 * (n + t))
        self._k[:, :, n : n + t] = key_states
        self._v[:, :, n : n + t] = value_states
        self.keys, self.values = self._k[:, :, : n + t], self._v[:, :, : n + t]
        return self.keys, self.values

    def _grow(self, capacity: int) -> None:
        n = self.keys.shape[-2]
        for name in ("_k", "_v"):
            old = getattr(self, name)
            new = old.new_empty(*old.shape[:2], capacity, old.shape[-1])
            new[:, :, :n] = old[:, :, :n]
            setattr(self, name, new)
        self.keys, self.values = self._k[:, :, :n], self._v[:, :, :n]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the batch rows `indices` (in order), buffers included."""
        if not self.is_initialized:
            return
        n = self.keys.shape[-2]
        self._k, self._v = self._k.index_select(0, indices), self._v.index_select(0, indices)
        self.keys, self.values = self._k[:, :, :n], self._v[:, :, :n]

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("a preallocated cache does not grow its batch")

    def reset(self) -> None:
        super().reset()
        self._k = self._v = None


def new_cache(config, capacity: int) -> DynamicCache:
    """A DynamicCache for `config` whose full-attention layers are PreallocatedLayers of `capacity` positions."""
    cache = DynamicCache(config=config)
    cache.layers = [PreallocatedLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def keep_accepted(cache, prefix: list[int], paths: list[torch.Tensor], start: int,
                  columns: list[torch.Tensor | None] | None = None, leading: list[bool] | None = None) -> list[int]:
    """Row b keeps columns [0, prefix[b]) and the tree slots paths[b] (ascending, root first) of the tree
    appended at column `start`, moved to prefix[b], prefix[b] + 1, ... Returns the rows' new prefix lengths.

    `columns` (per layer, from ForwardOutput.kv_columns): None where the layer appended every slot in order,
    else [B, T] the column (from `start`) of each slot; layers that cached only some slots (a pruned forward)
    are compacted with their own index map and cut to the same length as the others.
    `leading[b]`: paths[b] is the slots 0, 1, ..., as the caller knows without reading the tensor (None: read it).
    When every row's path leads and sits right at `start` (batch 1; always so for chains) nothing moves and a crop
    is enough. The index maps are built on the cache's device: no host read, no host-to-device copy."""
    width = max(len(p) for p in paths)
    lengths = [len(p) for p in paths]
    new_prefix = [k + n for k, n in zip(prefix, lengths)]
    if leading is None:
        leading = [bool(torch.equal(p.cpu(), torch.arange(len(p)))) for p in paths]
    in_place = all(leading) and all(k == start for k in prefix)
    plans: dict[tuple, tuple[torch.Tensor, torch.Tensor] | None] = {}  # per index map and device
    for i, layer in enumerate(cache.layers):
        cmap = None if columns is None else columns[i]
        key = (-1 if cmap is None else id(cmap), layer.keys.device)  # a model split over devices: per layer
        if key not in plans:
            plans[key] = None if cmap is None and in_place else move_plan(paths, prefix, width, start, cmap,
                                                                          layer.keys.device)
        if plans[key] is not None:
            src, to = plans[key]
            for name in ("keys", "values"):
                t = getattr(layer, name)
                b_, h, _, d = t.shape
                moved = t.gather(2, src.view(b_, 1, width, 1).expand(b_, h, width, d))  # read all, then write
                t.scatter_(2, to.view(b_, 1, width, 1).expand(b_, h, width, d), moved)
        layer.crop(max(new_prefix) - layer.get_seq_length())  # transformers 5: negative = drop that many
    return new_prefix


def move_plan(paths, prefix, width, start, cmap, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(src, dst) [B, width] columns: row b's path slots (through `cmap` when a layer cached only some) move to
    prefix[b], prefix[b] + 1, ...; a shorter row's padding copies a column onto itself."""
    dst = torch.stack([torch.arange(width, device=device) + k for k in prefix])
    src = []
    for b, path in enumerate(paths):
        path = path if path.device == device else path.to(device)  # only a model split over devices moves it
        slots = path if cmap is None else (cmap[b] if cmap.device == device else cmap[b].to(device))[path]
        src.append(torch.cat([slots + start, dst[b, len(path):]]))
    return torch.stack(src), dst


def keep_rows(cache, rows: list[int], prefix: list[int]) -> None:
    """Drop finished rows from the batch (keep `rows`, in order) and cut to the longest kept row."""
    index = torch.tensor(rows, dtype=torch.long)
    on: dict = {}  # the index on each layer's own device (a model split over devices)
    for layer in cache.layers:
        device = layer.keys.device
        if device not in on:
            on[device] = index.to(device)
        layer.batch_select_indices(on[device])
    cache.crop(max(prefix[r] for r in rows) - cache.get_seq_length())
