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
only the new tokens and a crop is a shorter view. On one device all layers' buffers are one (KVStore): compaction
then moves every layer in two kernel launches.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class KVStore:
    """Every layer's keys and values in one buffer [layers, 2, B, H, capacity, D], so that keep_accepted moves the
    accepted entries of all layers in one gather and one scatter (one each per group of layers sharing an index
    map: a pruned forward's two): four kernel launches a layer otherwise, ~120 a compacting step of a 30-layer
    model, each of which a launch-bound GPU pays. Allocated by the first layer to
    initialise; a layer whose device, dtype or shape differs keeps buffers of its own."""

    def __init__(self, layers: int):
        self.layers = layers
        self.buf: torch.Tensor | None = None
        self.members: list[PreallocatedLayer] = []

    def join(self, layer: PreallocatedLayer, key_states: torch.Tensor, value_states: torch.Tensor) -> bool:
        """Give `layer` its slot (views of this buffer); False where it does not fit the buffer."""
        b, h, _, d = key_states.shape
        if self.buf is None and value_states.shape[-1] == d:
            self.buf = key_states.new_empty(self.layers, 2, b, h, layer.capacity, d)
        buf = self.buf
        if buf is None or (buf.dtype, buf.device, *buf.shape[2:4], buf.shape[-1]) != (
                key_states.dtype, key_states.device, b, h, d) or value_states.shape[-1] != d:
            return False
        if layer not in self.members:  # (a layer that was reset joins again in its own slot)
            self.members.append(layer)
        i = self.members.index(layer)
        layer.bind(buf[i, 0], buf[i, 1])
        return True

    def grow(self, capacity: int) -> None:
        """A longer buffer for every member, their entries copied."""
        old = self.buf
        self.buf = old.new_empty(*old.shape[:4], capacity, old.shape[-1])
        self.buf[..., : old.shape[4], :] = old
        for i, layer in enumerate(self.members):
            layer.bind(self.buf[i, 0], self.buf[i, 1])

    def whole(self, cache) -> bool:
        """Whether every layer of `cache` has its slot here: then one op can move them all."""
        return len(self.members) == len(cache.layers) == self.layers and all(
            getattr(layer, "store", None) is self for layer in cache.layers)


class PreallocatedLayer(DynamicLayer):
    """A DynamicLayer whose keys/values are views [:rows, H, :length, D] of buffers [B, H, capacity, D] (its own, or
    its slot of a KVStore). Everything that reads or crops a DynamicLayer works unchanged; in-place writes to the
    views (keep_accepted's scatter) land in the buffer. Replacing `keys`/`values` by a new tensor is not allowed:
    use batch_select_indices, which moves the kept rows to the front."""

    def __init__(self, capacity: int, store: KVStore | None = None):
        super().__init__()
        self.capacity = int(capacity)
        self.store = store
        self._k = self._v = None
        self.rows = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.rows = key_states.shape[0]
        self.keys = key_states[:, :, :0]  # the length bind keeps
        if self.store is None or not self.store.join(self, key_states, value_states):
            self.store = None
            b, h, _, d = key_states.shape
            self.bind(key_states.new_empty(b, h, self.capacity, d),
                      value_states.new_empty(b, h, self.capacity, value_states.shape[-1]))
        self.is_initialized = True

    def bind(self, k: torch.Tensor, v: torch.Tensor, length: int | None = None) -> None:
        """Point the views at buffers k, v [B, H, capacity, D] (the current length unless given)."""
        self._k, self._v = k, v
        self.capacity = k.shape[2]
        n = self.keys.shape[-2] if length is None else length
        self.keys, self.values = k[: self.rows, :, :n], v[: self.rows, :, :n]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, t = self.keys.shape[-2], key_states.shape[-2]
        if n + t > self.capacity:
            self._grow(2 * (n + t))
        self._k[: self.rows, :, n : n + t] = key_states
        self._v[: self.rows, :, n : n + t] = value_states
        self.bind(self._k, self._v, n + t)
        return self.keys, self.values

    def _grow(self, capacity: int) -> None:
        if self.store is not None:
            self.store.grow(capacity)
            return
        n = self.keys.shape[-2]
        k, v = (old.new_empty(*old.shape[:2], capacity, old.shape[-1]) for old in (self._k, self._v))
        k[:, :, :n], v[:, :, :n] = self._k[:, :, :n], self._v[:, :, :n]
        self.bind(k, v)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the batch rows `indices` (in order): moved to the front of the buffer, which keeps its size."""
        if not self.is_initialized:
            return
        n = self.keys.shape[-2]
        for buf in (self._k, self._v):
            buf[: len(indices), :, :n] = buf[indices, :, :n]  # the index reads a copy first
        self.rows = len(indices)
        self.bind(self._k, self._v)

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("a preallocated cache does not grow its batch")

    def reset(self) -> None:
        super().reset()
        self._k = self._v = None


def new_cache(config, capacity: int, shared: bool = True) -> DynamicCache:
    """A DynamicCache for `config` whose full-attention layers are PreallocatedLayers of `capacity` positions, in one
    KVStore when `shared` (a model on one device; a model split over devices keeps a buffer per layer)."""
    cache = DynamicCache(config=config)
    full = [type(layer) is DynamicLayer for layer in cache.layers]
    store = KVStore(sum(full)) if shared else None
    cache.layers = [PreallocatedLayer(capacity, store) if f else layer for f, layer in zip(full, cache.layers)]
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
    store = getattr(cache.layers[0], "store", None) if cache.layers else None
    whole = store is not None and store.whole(cache)  # every layer's slot in one buffer: a span of layers in one op
    plans: dict[tuple, tuple[torch.Tensor, torch.Tensor] | None] = {}  # per index map and device
    layers_of: dict[tuple, list[int]] = {}  # the layers each plan moves
    for i, layer in enumerate(cache.layers):
        cmap = None if columns is None else columns[i]
        device = store.buf.device if whole else layer.keys.device  # a model split over devices: per layer
        key = (-1 if cmap is None else id(cmap), device)
        if key not in plans:
            plans[key] = None if cmap is None and in_place else move_plan(paths, prefix, width, start, cmap, device)
        layers_of.setdefault(key, []).append(i)
    slot = {id(m): s for s, m in enumerate(store.members)} if whole else {}
    for key, layers in layers_of.items():
        if plans[key] is None:
            continue
        if whole:  # the layers sharing an index map (all of them, or a pruned forward's two groups): one op a span
            for lo, hi in spans(sorted(slot[id(cache.layers[i])] for i in layers)):
                move(store.buf[lo:hi, :, : len(paths)], *plans[key])
        else:
            for i in layers:
                for name in ("keys", "values"):
                    move(getattr(cache.layers[i], name), *plans[key])
    for layer in cache.layers:
        cut(layer, max(new_prefix))
    return new_prefix


def spans(slots: list[int]) -> list[tuple[int, int]]:
    """Sorted slots as [lo, hi) runs of consecutive ones."""
    out: list[list[int]] = []
    for s in slots:
        if out and out[-1][1] == s:
            out[-1][1] = s + 1
        else:
            out.append([s, s + 1])
    return [(lo, hi) for lo, hi in out]


def move(t: torch.Tensor, src: torch.Tensor, to: torch.Tensor) -> None:
    """t [..., B, H, T, D] (a layer's keys or values, or a span of the store's layers): along T, row b's columns
    src[b] are copied to to[b] ([B, width]), all read before any is written."""
    shape, size = [1] * t.dim(), list(t.shape)
    shape[-4], shape[-2] = src.shape
    size[-2] = src.shape[1]
    moved = t.gather(t.dim() - 2, src.view(shape).expand(size))
    t.scatter_(t.dim() - 2, to.view(shape).expand(size), moved)


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


def cut(cache, length: int) -> None:
    """Keep the first `length` positions of `cache` (a Cache or one of its layers); nothing when it holds no more.
    transformers' `crop(0)` keeps everything from 5.14 on but empties the cache before (the upstream rule), so crop
    is called only with what to drop, a negative count, which every version reads alike."""
    drop = cache.get_seq_length() - length
    if drop > 0:
        cache.crop(-drop)


def keep_rows(cache, rows: list[int], prefix: list[int]) -> None:
    """Drop finished rows from the batch (keep `rows`, in order) and cut to the longest kept row."""
    index = torch.tensor(rows, dtype=torch.long)
    on: dict = {}  # the index on each layer's own device (a model split over devices)
    for layer in cache.layers:
        device = layer.keys.device
        if device not in on:
            on[device] = index.to(device)
        layer.batch_select_indices(on[device])
    cut(cache, max(prefix[r] for r in rows))
