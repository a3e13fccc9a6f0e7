"""KV-cache compaction after verification: keep the prefix plus the accepted path, drop the rest."""

from __future__ import annotations

import torch


def keep_accepted(cache, prefix_len: int, path_slots: torch.Tensor) -> None:
    """Keep the first `prefix_len` positions and the tree slots `path_slots` (ascending) after them.

    When the accepted path is the leading run of slots (always so for chains) a crop is enough;
    otherwise the path's entries are gathered with index_select on every layer's keys and values.
    Only full-attention layers (DynamicLayer) can be gathered like this; sliding-window caches would need
    their own rule. Batch 1 today: a batch would pass one index row per sequence and pad the shorter rows.
    """
    n = len(path_slots)
    if bool((path_slots == torch.arange(n, device=path_slots.device)).all()):
        cache.crop(prefix_len + n - cache.get_seq_length())  # transformers 5: negative = drop that many
        return
    device = cache.layers[0].keys.device
    keep = torch.cat([torch.arange(prefix_len, device=device), prefix_len + path_slots.to(device)])
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(2, keep)
        layer.values = layer.values.index_select(2, keep)
