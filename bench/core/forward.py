"""The target forward: the one seam between the decode loop and the model.

The engine calls a `TargetForward` for the prefill and for every verification. The default runs the whole
model (`full_forward`). A proposer that changes the forward itself sets `Proposer.target_forward`; the loop, the
verifiers and the KV compaction stay as they are. `LayerwiseForward` is the one such forward the core offers: the
model's own modules called layer by layer (no patching), with a hook after layer `split`
that may drop tree slots (ProPD's early pruning): layers from `split` on run over the kept slots only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


class TargetForward(Protocol):
    def __call__(self, model: torch.nn.Module, input_ids: torch.Tensor, *, cache,
                 position_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 trees: Sequence[Tree] | None = None, logits_to_keep: int | torch.Tensor = 0,
                 output_hidden: bool = False) -> ForwardOutput:
        """Appends the inputs' KV to cache. `trees` are the draft trees being verified, one per batch row
        (None at prefill), for forwards that act on their branches; row b's tree fills the first
        trees[b].size + 1 columns of input_ids, the rest is padding that nothing attends to.
        `logits_to_keep`: 0 = all positions, n = the last n, a 1-D tensor = those positions."""
        ...


def full_forward(model, input_ids, *, cache, position_ids=None, attention_mask=None, trees=None,
                 logits_to_keep=0, output_hidden=False) -> ForwardOutput:
    """All layers, as transformers runs them; `trees` is not needed (the mask already encodes them).

    With output_hidden or positions to keep, the decoder and the lm_head run as two calls (what a CausalLM's forward
    does) so that only the final hidden state is kept: output_hidden_states would hold every layer's, a high prefill
    peak. Called apart, they bypass the top-level hook of a model split over devices (accelerate's device map), which
    would return outputs to the inputs' device: `on_inputs` does that here."""
    if not output_hidden and not isinstance(logits_to_keep, torch.Tensor):
        out = model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                    past_key_values=cache, use_cache=True, logits_to_keep=logits_to_keep)
        return ForwardOutput(out.logits, None)
    # The decoder's last hidden state is the final norm's output, the input of lm_head (checked in tests).
    hidden = model.get_decoder()(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                                 past_key_values=cache, use_cache=True).last_hidden_state
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


def tree_mask(trees: Sequence[Tree], cached: int, width: int, dtype, device) -> torch.Tensor:
    """The batch-1 mask the engine leaves out for chains (the model builds it then): prefix + the tree's bias."""
    tree = trees[0]
    bias = torch.full((width, width), torch.finfo(dtype).min, dtype=dtype, device=device)
    n = tree.size + 1
    bias[:n, :n] = tree.attention_bias(dtype, device)
    visible = torch.zeros(width, cached, dtype=dtype, device=device)
    return torch.cat([visible, bias], dim=1)[None, None]


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
                 logits_to_keep=0, output_hidden=False) -> ForwardOutput:
        if trees is None or isinstance(logits_to_keep, torch.Tensor) or logits_to_keep != 0:
            return full_forward(model, input_ids, cache=cache, position_ids=position_ids,
                                attention_mask=attention_mask, trees=trees, logits_to_keep=logits_to_keep,
                                output_hidden=output_hidden)
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
                          past_key_values=cache, use_cache=True)
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
        kv = [None] * self.split + [columns] * (len(layers) - self.split)
        return ForwardOutput(full_logits, hidden, keep, kv)
