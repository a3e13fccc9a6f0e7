"""The target forward: the one seam between the decode loop and the model.

The engine calls a `TargetForward` for the prefill and for every verification. The default runs the whole
model (`full_forward`). A method that changes the forward itself (e.g. ProPD's early-layer pruning of tree
branches, a layer-by-layer forward with a hook between layers) supplies another function with the same
signature; the loop, the verifiers and the KV compaction stay as they are.
"""

from __future__ import annotations

from typing import Protocol

import torch

from bench.core.tree import Tree


class TargetForward(Protocol):
    def __call__(self, model: torch.nn.Module, input_ids: torch.Tensor, *, cache,
                 position_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 tree: Tree | None = None, logits_to_keep: int = 0) -> torch.Tensor:
        """Logits [B, T, V] (the last `logits_to_keep` positions when > 0); appends the inputs' KV to cache.
        `tree` is the draft tree being verified (None at prefill), for forwards that act on its branches."""
        ...


def full_forward(model, input_ids, *, cache, position_ids=None, attention_mask=None, tree=None,
                 logits_to_keep=0) -> torch.Tensor:
    """All layers, as transformers runs them; `tree` is not needed (the mask already encodes it)."""
    out = model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                past_key_values=cache, use_cache=True, logits_to_keep=logits_to_keep)
    return out.logits
