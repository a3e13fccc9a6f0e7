"""The target forward: the one seam between the decode loop and the model.

The engine calls a `TargetForward` for the prefill and for every verification. The default runs the whole
model (`full_forward`). A proposer that changes the forward itself sets `Proposer.target_forward`; the loop, the
verifiers and the KV compaction stay as they are. `LayerwiseForward` is the one such forward the core offers: the
model's own modules called layer by layer (no patching), with a hook after layer `split`
that may drop tree slots (ProPD's early pruning): layers from `split` on run over the kept slots only.

Both hand over, on request (`feature_layers`), the input states of chosen decoder layers (EAGLE-3's fused
features) from the same forward: forward pre-hooks on those layers (torch's public hook API), registered for that
one forward and removed after (`layer_inputs`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from inspect import signature
from typing import NamedTuple, Protocol

import torch

from bench.core.tree import Tree


class ForwardOutput(NamedTuple):
    logits: torch.Tensor  # [B, T, V] (the kept positions only when logits_to_keep is set)
    hidden: torch.Tensor | None  # [B, T, H] final (normed) hidden states, when output_hidden
    # [B, T] bool: slots whose logits and KV the forward computed in every layer (None = all). A dropped slot is
    # never accepted: the engine removes it from the verifier's candidates.
    kept: torch.Tensor | None = None
    # Per layer: None if the layer's cache appended every input slot in order, else [B, T] long, the column
    # (counted from the cache length before the forward) where row b's slot s was appended, for kept slots.
    kv_columns: Sequence[torch.Tensor | None] | None = None
    # [B, T, len(feature_layers) * H]: the input states of the decoder layers `feature_layers` named (the residual
    # stream before each layer, pre-norm: HF's hidden_states[i]), concatenated in that order; None unless asked.
    layer_states: torch.Tensor | None = None


class TargetForward(Protocol):
    def __call__(self, model: torch.nn.Module, input_ids: torch.Tensor, *, cache,
                 position_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 trees: Sequence[Tree] | None = None, logits_to_keep: int | torch.Tensor = 0,
                 output_hidden: bool = False, feature_layers: Sequence[int] | None = None) -> ForwardOutput:
        """Appends the inputs' KV to cache. `trees` are the draft trees being verified, one per batch row
        (None at prefill), for forwards that act on their branches; row b's tree fills the first
        trees[b].size + 1 columns of input_ids, the rest is padding that nothing attends to.
        `logits_to_keep`: 0 = all positions, n = the last n, a 1-D tensor = those positions.
        `feature_layers`: decoder layers whose input states come back as `layer_states` (the engine passes it
        only when a proposer asks, so a forward that cannot hand them over need not accept it)."""
        ...


def cache_kw(module: torch.nn.Module, cache) -> dict:
    """{name: cache}, the KV-cache argument of `module`'s forward by the name it takes: transformers 5.24 renamed
    `past_key_values` to `cache` (the old name warns at every call and goes in 5.40), the GPU images' 5.17 knows only
    the old name, and our own modules (EAGLE heads, drafts) keep it."""
    cls = type(module)
    if cls not in CACHE_NAMES:  # (a dict, not functools.cache: torch.compile traces a lookup without a warning)
        CACHE_NAMES[cls] = "cache" if "cache" in signature(cls.forward).parameters else "past_key_values"
    return {CACHE_NAMES[cls]: cache}


CACHE_NAMES: dict[type, str] = {}


@contextmanager
def layer_inputs(model, layers: Sequence[int] | None) -> Iterator[dict[int, torch.Tensor]]:
    """{layer: its input hidden state [B, T, H]} for the decoder layers `layers`, filled while the block runs a
    forward: one forward pre-hook per layer, removed on leaving. Nothing is registered for None. The states are the
    tensors the layers receive, not copies (a decoder layer adds its residual out of place), and stay on the layer's
    device (`layer_states` moves them)."""
    states: dict[int, torch.Tensor] = {}
    if not layers:
        yield states
        return
    decoder = model.get_decoder().layers
    if not all(0 <= i < len(decoder) for i in layers):
        raise ValueError(f"feature layers {tuple(layers)}: the model has decoder layers 0..{len(decoder) - 1}")

    def hook(i):
        def keep(module, args, kwargs):
            states[i] = args[0] if args else kwargs["hidden_states"]
        return keep

    handles = [decoder[i].register_forward_pre_hook(hook(i), with_kwargs=True) for i in sorted(set(layers))]
    try:
        yield states
    finally:
        for handle in handles:
            handle.remove()


def layer_states(states: dict[int, torch.Tensor], layers: Sequence[int], input_ids: torch.Tensor) -> torch.Tensor:
    """The captured states of `layers`, in that order, concatenated on the inputs' device [B, T, len(layers) * H]."""
    missing = [i for i in layers if i not in states]
    if missing:
        raise RuntimeError(f"the target forward ran no decoder layer {missing} (its input states were asked for)")
    return torch.cat([on_inputs(states[i], input_ids) for i in layers], dim=-1)


def handing_over(model, input_ids, feature_layers: Sequence[int] | None,
                 run: Callable[[dict[int, torch.Tensor]], ForwardOutput]) -> ForwardOutput:
    """run(states) under `layer_inputs`' hooks, its output with the `feature_layers`' states when asked for."""
    with layer_inputs(model, feature_layers) as states:
        out = run(states)
    return out._replace(layer_states=layer_states(states, feature_layers, input_ids)) if feature_layers else out


def full_forward(model, input_ids, *, cache, position_ids=None, attention_mask=None, trees=None,
                 logits_to_keep=0, output_hidden=False, feature_layers=None) -> ForwardOutput:
    """All layers, as transformers runs them; `trees` is not needed (the mask already encodes them). With
    `feature_layers`, the same forward under `layer_inputs`' hooks."""
    return handing_over(model, input_ids, feature_layers, lambda _: model_forward(
        model, input_ids, cache=cache, position_ids=position_ids, attention_mask=attention_mask,
        logits_to_keep=logits_to_keep, output_hidden=output_hidden))


def model_forward(model, input_ids, *, cache, position_ids, attention_mask, logits_to_keep,
                  output_hidden) -> ForwardOutput:
    """The model's forward, returning logits (and the final hidden state when output_hidden).

    With output_hidden or positions to keep, the decoder and the lm_head run as two calls (what a CausalLM's forward
    does) so that only the final hidden state is kept: output_hidden_states would hold every layer's, a high prefill
    peak. Called apart, they bypass the top-level hook of a model split over devices (accelerate's device map), which
    would return outputs to the inputs' device: `on_inputs` does that here."""
    if not output_hidden and not isinstance(logits_to_keep, torch.Tensor):
        out = model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                    **cache_kw(model, cache), use_cache=True, logits_to_keep=logits_to_keep)
        return ForwardOutput(out.logits, None)
    # The decoder's last hidden state is the final norm's output, the input of lm_head (checked in tests).
    decoder = model.get_decoder()
    hidden = decoder(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                     **cache_kw(decoder, cache), use_cache=True).last_hidden_state
    if isinstance(logits_to_keep, torch.Tensor):
        kept = hidden[:, logits_to_keep.to(hidden.device)]  # on the last device of a split model
    else:
        kept = hidden[:, -logits_to_keep:] if logits_to_keep else hidden
    logits = model.get_output_embeddings()(kept)
    return ForwardOutput(on_inputs(logits, input_ids), on_inputs(hidden, input_ids) if output_hidden else None)


def on_inputs(t: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """t on the device of the forward's inputs (a no-op unless the model is split over devices)."""
    return t.to(input_ids.device)


# keep(hidden [B, T, H] after `split` layers, input_ids [B, T], trees) -> [B, T] bool slots to keep. It must keep
# slot 0 and every kept slot's ancestors (a kept node attends to them in the later layers).
SlotFilter = Callable[[torch.Tensor, torch.Tensor, Sequence[Tree]], torch.Tensor]


def kept_order(keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(select [B, T'], columns [B, T]) for keep [B, T]: row b runs its kept slots in slot order, padded to the
    most kept of any row with its dropped slots (they see only their own ancestors, all dropped, and nothing kept
    sees them, so they change nothing); columns[b, select[b, j]] = j."""
    b, t = keep.shape
    width = int(keep.sum(1).max())
    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)  # kept slots first, each group in slot order
    select = order[:, :width]
    columns = torch.empty_like(order)
    columns.scatter_(1, order, torch.arange(t, device=keep.device).expand(b, t).contiguous())
    return select, columns


# CUDA's memory-efficient sdpa (the kernel a 4D mask gets) copies a mask whose row stride is not a multiple of 8
# into a padded one, in every layer: two more kernel launches a layer where the forward is launch-bound.
MASK_ALIGN = 8


def aligned_mask(shape: tuple[int, ...], fill: float, dtype, device) -> torch.Tensor:
    """A new `shape` tensor filled with `fill`, its rows views into rows padded to a multiple of MASK_ALIGN, so that
    sdpa uses it as it is."""
    *outer, cols = shape
    return torch.full((*outer, -(-cols // MASK_ALIGN) * MASK_ALIGN), fill, dtype=dtype, device=device)[..., :cols]


def tree_mask(trees: Sequence[Tree], cached: int, width: int, dtype, device) -> torch.Tensor:
    """The batch-1 mask [1, 1, width, cached + width]: every slot sees the prefix, the tree's nodes their ancestors
    (its bias); slots past the tree (width > its size) see nothing else."""
    tree = trees[0]
    n = tree.size + 1
    mask = aligned_mask((1, 1, width, cached + width), 0.0, dtype, device)
    mask[0, 0, :n, cached : cached + n] = tree.attention_bias(dtype, device)
    if width > n:
        mask[0, 0, :, cached + n :] = torch.finfo(dtype).min
        mask[0, 0, n:, cached : cached + n] = torch.finfo(dtype).min
    return mask


class LayerwiseForward:
    """A TargetForward that runs the decoder layers one by one and lets `keep` drop tree slots after layer
    `split` (1-based count of layers run over every slot). The prefill and forwards without trees are full ones.

    Layers below `split` cache every slot; layers from `split` on cache only the kept slots (padded per row as
    in `kept_order`), which `kv_columns` tells the engine's KV compaction. Their mask is the full tree's mask
    subsampled (ProPD's optimisation: no new mask is built), their rotary embeddings are the full ones gathered.
    Logits and hidden states come back at full width, zero at dropped slots (which `kept` marks)."""

    def __init__(self, split: int, keep: SlotFilter):
        self.split = int(split)
        self.keep = keep

    def __call__(self, model, input_ids, *, cache, position_ids=None, attention_mask=None, trees=None,
                 logits_to_keep=0, output_hidden=False, feature_layers=None) -> ForwardOutput:
        if trees is None or isinstance(logits_to_keep, torch.Tensor) or logits_to_keep != 0:
            return full_forward(model, input_ids, cache=cache, position_ids=position_ids,
                                attention_mask=attention_mask, trees=trees, logits_to_keep=logits_to_keep,
                                output_hidden=output_hidden, feature_layers=feature_layers)
        return handing_over(model, input_ids, feature_layers, lambda states: self.pruned(
            model, input_ids, cache, position_ids, attention_mask, trees, output_hidden, states))

    def pruned(self, model, input_ids, cache, position_ids, attention_mask, trees, output_hidden,
               states: dict[int, torch.Tensor]) -> ForwardOutput:
        """The layer-by-layer forward over the trees. `states`: the layer inputs `layer_inputs` captured, widened
        here for the layers from `split` on (which ran over the kept slots only) to full width, zero at dropped
        slots, as the logits are (a dropped slot is never accepted, so its state is never handed to a proposer)."""
        base = model.get_decoder()
        layers = base.layers[: model.config.num_hidden_layers]
        if not 1 <= self.split < len(layers):
            raise ValueError(f"split after layer {self.split}: the model has {len(layers)} layers")
        b, t = input_ids.shape
        cached = cache.get_seq_length()
        if position_ids is None:
            position_ids = (torch.arange(t, device=input_ids.device) + cached).expand(b, t)
        h = base.embed_tokens(input_ids)
        if attention_mask is None:
            attention_mask = tree_mask(trees, cached, t, h.dtype, h.device)
        cos, sin = base.rotary_emb(h, position_ids=position_ids)

        def run(layers_, h, mask, cos, sin, pos):
            for layer in layers_:
                h = layer(h, attention_mask=mask, position_embeddings=(cos, sin), position_ids=pos,
                          **cache_kw(layer, cache), use_cache=True)
            return h

        h = run(layers[: self.split], h, attention_mask, cos, sin, position_ids)
        keep = self.keep(h, input_ids, trees)
        select, columns = kept_order(keep)
        width = select.shape[1]
        rows = torch.arange(b, device=h.device)[:, None]

        def pick(t):  # t's kept slots; t may sit on another device than h when the model is split over devices
            return t[rows.to(t.device), select.to(t.device)]

        h, pos, cos, sin = pick(h), pick(position_ids), pick(cos), pick(sin)
        select = select.to(attention_mask.device)
        cols = torch.cat([torch.arange(cached, device=select.device).expand(b, cached), cached + select], dim=1)
        mask = attention_mask[rows.to(select.device), :, select].transpose(1, 2)  # [B, 1, T', S]
        mask = mask.gather(3, cols[:, None, None, :].expand(b, 1, width, cached + width))
        h = base.norm(run(layers[self.split :], h, mask, cos, sin, pos))
        logits = on_inputs(model.get_output_embeddings()(h), input_ids)
        rows, select = rows.to(input_ids.device), select.to(input_ids.device)
        full_logits = logits.new_zeros(b, t, logits.shape[-1])
        full_logits[rows, select] = logits
        hidden = None
        if output_hidden:
            h = on_inputs(h, input_ids)
            hidden = h.new_zeros(b, t, h.shape[-1])
            hidden[rows, select] = h
        for i, state in states.items():
            if i >= self.split:
                wide = state.new_zeros(b, t, state.shape[-1])
                wide[rows.to(wide.device), select.to(wide.device)] = state
                states[i] = wide
        kv = [None] * self.split + [columns] * (len(layers) - self.split)
        return ForwardOutput(full_logits, hidden, keep, kv)
