"""The target forward: the one seam between the decode loop and the model.

The engine calls a `TargetForward` for the prefill and for every verification. The default runs the whole
model (`full_forward`). A method that changes the forward itself (e.g. ProPD's early-layer pruning of tree
branches, a layer-by-layer forward with a hook between layers) supplies another function with the same
signature; the loop, the verifiers and the KV compaction stay as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

import torch

from bench.core.tree import Tree


class ForwardOutput(NamedTuple):
    logits: torch.Tensor  # [B, T, V] (the kept positions only when logits_to_keep is set)
    hidden: torch.Tensor | None  # [B, T, H] final (normed) hidden states, when output_hidden


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
    """All layers, as transformers runs them; `trees` is not needed (the mask already encodes them)."""
    out = model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                past_key_values=cache, use_cache=True, logits_to_keep=logits_to_keep,
                output_hidden_states=output_hidden)
    # transformers' last hidden state is the final norm's output, the input of lm_head (checked in tests).
    return ForwardOutput(out.logits, out.hidden_states[-1] if output_hidden else None)
