"""bench.core.kv on a real transformers DynamicCache and on the engine's preallocated one: accepted paths move
behind each row's own prefix, whichever storage the layers use."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from bench.core.forward import cache_kw
from bench.core.kv import KVStore, PreallocatedLayer, keep_accepted, keep_rows, new_cache
from bench.core.tree import tree_from_paths
from tests.conftest import tiny_llama

PREFIX, SLOTS = 5, 6  # cached prompt positions, then tree slots (root + 5 drafts)


@pytest.fixture(params=["dynamic", "preallocated", "shared"], autouse=True)
def storage(request, monkeypatch):
    """Every test here runs on transformers' DynamicLayers, on PreallocatedLayers with buffers of their own and on
    PreallocatedLayers in one KVStore (capacity 4: they grow)."""
    if request.param != "dynamic":
        shared = request.param == "shared"
        monkeypatch.setattr(DynamicCache, "__init__", lambda self, *a, **kw: preallocated_init(self, shared, *a, **kw))
    return request.param


def preallocated_init(self, shared, *args, **kwargs):
    original_init(self, *args, **kwargs)
    n = sum(type(layer).__name__ == "DynamicLayer" for layer in self.layers) or 2
    store = KVStore(n) if shared else None
    if not self.layers:
        self.layers = [PreallocatedLayer(4, store) for _ in range(2)]
    self.layers = [PreallocatedLayer(4, store) if type(layer).__name__ == "DynamicLayer" else layer
                   for layer in self.layers]


original_init = DynamicCache.__init__


def filled_cache(n_layers=2):
    """Position p of layer l holds the value 100 * l + p in every head and channel (values: negated)."""
    cache = DynamicCache()
    pos = torch.arange(PREFIX + SLOTS, dtype=torch.float32)
    for layer in range(n_layers):
        k = (100 * layer + pos).view(1, 1, -1, 1).expand(1, 2, -1, 4).clone()
        cache.update(k, -k, layer)
    return cache


def positions(cache, layer):
    keys, values = cache.layers[layer].keys, cache.layers[layer].values
    assert keys.shape[:2] == (1, 2) and keys.shape[-1] == 4
    assert torch.equal(values, -keys)
    return (keys[0, 0, :, 0] - 100 * layer).long().tolist()


def test_leading_path_crops():
    cache = filled_cache()
    keep_accepted(cache, [PREFIX], [torch.tensor([0, 1, 2])], PREFIX)
    assert cache.get_seq_length() == PREFIX + 3
    for layer in range(2):
        assert positions(cache, layer) == list(range(PREFIX + 3))


def test_root_only_path():
    cache = filled_cache()
    keep_accepted(cache, [PREFIX], [torch.tensor([0])], PREFIX)
    assert [positions(cache, lay) for lay in range(2)] == [list(range(PREFIX + 1))] * 2


def test_whole_tree_kept():
    cache = filled_cache()
    keep_accepted(cache, [PREFIX], [torch.arange(SLOTS)], PREFIX)
    assert positions(cache, 1) == list(range(PREFIX + SLOTS))


@pytest.mark.parametrize("kept", [SLOTS, 3, 1])
def test_a_step_that_drops_nothing_keeps_the_cache_under_the_older_crop_rule(crop_before_5_14, kept):
    """AR's step and a wholly accepted tree drop nothing: calling crop(0) then emptied the cache before 5.14."""
    cache = filled_cache()
    keep_accepted(cache, [PREFIX], [torch.arange(kept)], PREFIX)
    keep_rows(cache, [0], [PREFIX + kept])
    assert [positions(cache, lay) for lay in range(2)] == [list(range(PREFIX + kept))] * 2


def test_non_contiguous_path_gathers():
    cache = filled_cache()
    keep_accepted(cache, [PREFIX], [torch.tensor([0, 2, 5])], PREFIX)
    assert cache.get_seq_length() == PREFIX + 3
    for layer in range(2):
        assert positions(cache, layer) == [0, 1, 2, 3, 4, PREFIX, PREFIX + 2, PREFIX + 5]


@torch.inference_mode()
def test_tree_forward_then_compaction_matches_linear_sequence():
    """Cache after a tree forward + gather equals the cache of prompt + accepted path run linearly."""
    model = tiny_llama()
    prompt = torch.tensor([[3, 14, 15, 9, 26]])
    tree = tree_from_paths([[0], [1], [0, 0], [1, 0], [1, 1]])  # accepted path: root, slot 2, slot 5
    tree_tokens = torch.tensor([[35, 8, 9, 7, 9, 3]])
    path = torch.tensor([0, 2, 5])

    cache = DynamicCache(config=model.config)
    model(input_ids=prompt[:, :-1], **cache_kw(model, cache), use_cache=True)
    prefix = prompt.shape[1] - 1
    tree_tokens[0, 0] = prompt[0, -1]
    mask = torch.cat([torch.zeros(tree.size + 1, prefix), tree.attention_bias(torch.float32, "cpu")], 1)
    model(
        input_ids=tree_tokens,
        position_ids=(prefix + tree.depth)[None],
        attention_mask=mask[None, None],
        **cache_kw(model, cache),
        use_cache=True,
    )
    assert cache.get_seq_length() == prefix + tree.size + 1
    keep_accepted(cache, [prefix], [path], prefix)

    linear = torch.cat([prompt[:, :-1], tree_tokens[:, path]], 1)
    ref = DynamicCache(config=model.config)
    model(input_ids=linear, **cache_kw(model, ref), use_cache=True)
    assert cache.get_seq_length() == ref.get_seq_length() == prefix + 3
    for mine, theirs in zip(cache.layers, ref.layers):
        torch.testing.assert_close(mine.keys, theirs.keys, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(mine.values, theirs.values, rtol=1e-5, atol=1e-5)

    # A further forward on the compacted cache gives the no-cache logits of the full sequence.
    nxt = torch.tensor([[42]])
    out = model(input_ids=nxt, **cache_kw(model, cache), use_cache=True).logits[0, -1]
    full = model(input_ids=torch.cat([linear, nxt], 1), use_cache=False).logits[0, -1]
    torch.testing.assert_close(out, full, rtol=1e-5, atol=1e-5)
    assert cache.get_seq_length() == prefix + 4


def batch_cache(prefixes, width, n_layers=2):
    """Rows with valid prefixes of different lengths, stale columns up to the longest, then a tree of `width`
    slots; column c of row b holds 1000 * b + c (values: negated)."""
    cache = DynamicCache()
    cols = max(prefixes) + width
    for layer in range(n_layers):
        k = torch.stack([1000 * b + torch.arange(cols, dtype=torch.float32) for b in range(len(prefixes))])
        k = k.view(len(prefixes), 1, cols, 1).expand(-1, 2, -1, 4).clone()
        cache.update(k, -k, layer)
    return cache


def row_columns(cache, row, n):
    keys = cache.layers[1].keys
    assert torch.equal(cache.layers[1].values, -keys)
    return (keys[row, 0, :n, 0] - 1000 * row).long().tolist()


def test_rows_keep_their_own_prefix_and_path():
    prefixes, start = [3, 7, 5], 7
    cache = batch_cache(prefixes, 6)
    paths = [torch.tensor([0, 2, 5]), torch.tensor([0]), torch.tensor([0, 1, 3, 4])]
    new = keep_accepted(cache, prefixes, paths, start)
    assert new == [6, 8, 9] and cache.get_seq_length() == 9
    assert row_columns(cache, 0, 6) == [0, 1, 2, 7, 9, 12]
    assert row_columns(cache, 1, 8) == list(range(7)) + [7]
    assert row_columns(cache, 2, 9) == [0, 1, 2, 3, 4, 7, 8, 10, 11]


def test_finished_rows_leave_the_batch():
    prefixes = [3, 9, 5]
    cache = batch_cache(prefixes, 0)
    keep_rows(cache, [0, 2], prefixes)
    assert cache.layers[0].keys.shape[0] == 2 and cache.get_seq_length() == 5
    assert row_columns(cache, 1, 5) == [1000 * 2 - 1000 + c for c in range(5)]  # old row 2, now row 1


def test_preallocated_layer_appends_in_place_and_grows():
    layer = PreallocatedLayer(8)
    k = torch.arange(3, dtype=torch.float32).view(1, 1, 3, 1).expand(2, 2, 3, 4).contiguous()
    layer.update(k, -k)
    buffer = layer.keys.data_ptr()
    layer.update(k + 3, -k - 3)
    assert layer.keys.data_ptr() == buffer and layer.get_seq_length() == 6  # written into the buffer, no copy
    layer.crop(-2)
    assert layer.get_seq_length() == 4 and layer.keys.data_ptr() == buffer
    layer.update(k + 4, -k - 4)
    layer.update(k + 7, -k - 7)  # 10 > capacity 8: the buffer doubles, the contents move once
    assert layer.get_seq_length() == 10 and layer.keys.data_ptr() != buffer
    assert layer.keys[1, 1, :, 0].tolist() == list(range(10)) and torch.equal(layer.values, -layer.keys)
    layer.batch_select_indices(torch.tensor([1]))
    assert layer.keys.shape == (1, 2, 10, 4)
    layer.update(k[:1] + 10, -k[:1] - 10)
    assert layer.keys[0, 0, :, 0].tolist() == list(range(13))


@torch.inference_mode()
def test_new_cache_gives_the_model_the_same_outputs():
    model = tiny_llama()
    ids = torch.tensor([[3, 14, 15, 9, 26, 5, 35]])
    outs = []
    for cache in (DynamicCache(config=model.config), new_cache(model.config, 4)):
        model(input_ids=ids[:, :4], **cache_kw(model, cache), use_cache=True)
        outs.append(model(input_ids=ids[:, 4:], **cache_kw(model, cache), use_cache=True).logits)
    assert all(isinstance(layer, PreallocatedLayer) for layer in cache.layers)
    assert torch.equal(outs[0], outs[1])


def test_one_store_moves_every_layer_at_once(storage, monkeypatch):
    """In one KVStore keep_accepted moves all layers with one gather and one scatter (on the store's buffer), and
    leaves what per-layer moves leave (the other storages run the same tests)."""
    if storage != "shared":
        pytest.skip("the store's own path")
    cache = filled_cache()
    store = cache.layers[0].store
    assert store.whole(cache) and store.buf.shape[:2] == (2, 2) and store.buf.shape[4] >= PREFIX + SLOTS  # grown
    calls = []
    gather = torch.Tensor.gather
    monkeypatch.setattr(torch.Tensor, "gather", lambda t, *a, **kw: calls.append(t.dim()) or gather(t, *a, **kw))
    keep_accepted(cache, [PREFIX], [torch.tensor([0, 2, 5])], PREFIX)
    assert calls == [6]  # one gather over [layers, 2, B, H, capacity, D]
    for layer in range(2):
        assert positions(cache, layer) == [*range(PREFIX), PREFIX, PREFIX + 2, PREFIX + 5]


def test_a_pruned_forwards_layers_move_by_their_own_index_map(storage, monkeypatch):
    """A pruned forward (ProPD): layers 0-1 cached every slot, layers 2-3 only slots 0, 2 and 5, in columns 0-2
    (their index map). The path 0, 2, 5 lands behind the prefix in every layer; in one KVStore each group of layers
    moves with one gather (two in all), where per-layer storages take one a layer and tensor."""
    cache = DynamicCache()
    if storage != "dynamic":  # four layers (the fixture's caches hold two)
        store = KVStore(4) if storage == "shared" else None
        cache.layers = [PreallocatedLayer(4, store) for _ in range(4)]
    pos = torch.arange(PREFIX + SLOTS, dtype=torch.float32)
    kept = [0, 2, 5]
    for layer in range(4):
        p = pos if layer < 2 else torch.cat([pos[:PREFIX], PREFIX + torch.tensor(kept, dtype=torch.float32)])
        k = (100 * layer + p).view(1, 1, -1, 1).expand(1, 2, -1, 4).clone()
        cache.update(k, -k, layer)
    cmap = torch.zeros(1, SLOTS, dtype=torch.long)
    cmap[0, kept] = torch.arange(len(kept))
    calls = []
    gather = torch.Tensor.gather
    monkeypatch.setattr(torch.Tensor, "gather", lambda t, *a, **kw: calls.append(t.dim()) or gather(t, *a, **kw))
    assert keep_accepted(cache, [PREFIX], [torch.tensor(kept)], PREFIX, [None, None, cmap, cmap], [False]) == [
        PREFIX + 3]
    for layer in range(4):
        assert positions(cache, layer) == [*range(PREFIX), PREFIX, PREFIX + 2, PREFIX + 5]
    assert calls == ([6, 6] if storage == "shared" else [4] * 8)
