"""The graph mode's KV cache (bench.core.graph_engine): one buffer of fixed capacity for every layer, allocated once
per engine and reused by every prompt, never grown, so a captured forward's addresses stay valid.

Every forward attends over all `capacity` columns; the additive mask hides the columns past the cached prefix
(gpt-fast's and HF's static caches do the same). A forward writes its t new tokens' keys and values at the columns
`slots[:t]`, a device tensor the engine fills before each forward, and the cached length `length` is a device
tensor too: no forward of this cache needs a host value, which is what lets CUDA replay one.
After a verification the accepted path's columns move behind the prefix at a fixed width (a static tree's depth + 1)
in one gather and one copy over all layers; a chain's path is where it belongs already.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class SlotLayer(DynamicLayer):
    """One layer's keys and values: views [1, H, capacity, D] of the StaticKV buffer, written at its slots."""

    def __init__(self, store: StaticKV, index: int):
        super().__init__()
        self.store = store
        self.keys, self.values = store.buf[index, 0], store.buf[index, 1]
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        at = self.store.slots[: key_states.shape[-2]]
        self.keys.index_copy_(2, at, key_states)
        self.values.index_copy_(2, at, value_states)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        # Only a caller that leaves out position_ids asks (the engine never does): the length is on the device.
        raise NotImplementedError("a static KV cache keeps its length on the device (StaticKV.length)")

    def crop(self, max_length: int) -> None:
        raise NotImplementedError("a static KV cache is never cropped: the mask hides its stale columns")


class StaticKV:
    """buf [layers, 2, 1, H, capacity, D]; `cache` is the DynamicCache a model's forward takes."""

    def __init__(self, config, capacity: int, dtype: torch.dtype, device: torch.device):
        layers = DynamicCache(config=config).layers
        if any(type(layer) is not DynamicLayer for layer in layers):
            raise ValueError("graph mode handles full-attention layers only (this model has sliding-window ones)")
        heads = config.num_key_value_heads or config.num_attention_heads
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.capacity = int(capacity)
        self.buf = torch.zeros(len(layers), 2, 1, heads, self.capacity, dim, dtype=dtype, device=device)
        self.columns = torch.arange(self.capacity, device=device)  # constant: a forward's slots are cut from it
        self.slots = self.columns.clone()  # the columns the next forward writes (its first t)
        self.length = torch.zeros((), dtype=torch.long, device=device)  # cached positions
        self.cache = DynamicCache(config=config)
        self.cache.layers = [SlotLayer(self, i) for i in range(len(layers))]

    def write_prefix(self, n: int) -> None:
        """The next forward writes columns 0..n-1 (a prefill); the length is set after it."""
        self.slots[:n].copy_(self.columns[:n])

    def write_after_prefix(self, width: int) -> None:
        """The next forward writes columns length..length+width-1."""
        torch.add(self.columns[:width], self.length, out=self.slots[:width])

    def keep_path(self, path_slots: torch.Tensor, path_len: torch.Tensor) -> None:
        """After a verification written at `length`: the columns length + path_slots (root..best, padded with the
        root's slot 0 to a fixed width) move to length, length + 1, ...; the length grows by path_len. A padding
        entry copies the root onto a column past the new length, which the mask hides."""
        width = path_slots.shape[0]
        src = self.length + path_slots
        moved = self.buf.index_select(4, src)  # read all, then write
        self.buf.index_copy_(4, self.length + self.columns[:width], moved)
        self.length += path_len.reshape(())

    def grow_length(self, path_len: torch.Tensor) -> None:
        """A chain's accepted path sits at length already: only the length grows."""
        self.length += path_len.reshape(())

    def mask(self, bias: torch.Tensor, low: float) -> torch.Tensor:
        """[w, capacity] additive mask of a verification written at `length`: every slot sees the columns below
        `length`; columns length..length+w-1 follow `bias` [w, w] (the tree's, padding slots seeing themselves);
        the rest, stale, is hidden."""
        w = bias.shape[0]
        rel = self.columns - self.length
        window = bias.index_select(1, rel.clamp(0, w - 1))
        zero = torch.zeros((), dtype=bias.dtype, device=bias.device)
        return torch.where(rel < 0, zero, torch.where(rel < w, window, torch.full_like(zero, low)))

    def causal_mask(self, n: int, dtype: torch.dtype, low: float) -> torch.Tensor:
        """[n, capacity] additive mask of a prefill of n tokens at columns 0..n-1."""
        rows = self.columns[:n, None]
        zero = torch.zeros((), dtype=dtype, device=self.buf.device)
        return torch.where(self.columns[None] <= rows, zero, torch.full_like(zero, low))
