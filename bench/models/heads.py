"""Medusa-1 heads (Cai et al. 2024): extra next-next-token heads on the target's final hidden state.

Head i (0-based) reads the final (normed) hidden state at position t and predicts token t+2+i; the target's
own lm_head predicts t+1. Each head is a residual SiLU block `x + SiLU(W x + b)` (W zero-initialised, so an
untrained head equals the lm_head) followed by a vocabulary projection: the target's frozen lm_head shared by
all heads (the legacy Medusa variant; cheap on CPU) or a per-head copy (the released checkpoints).
"""

from __future__ import annotations

import torch
from torch import nn


class ResBlock(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.linear(x))


class MedusaHeads(nn.Module):
    """`forward(hidden [..., H]) -> logits [num_heads, ..., V]`."""

    def __init__(self, hidden: int, vocab: int, num_heads: int, lm_head: nn.Linear | None = None,
                 num_layers: int = 1):
        super().__init__()
        self.num_heads = num_heads
        self.blocks = nn.ModuleList(nn.Sequential(*[ResBlock(hidden) for _ in range(num_layers)])
                                    for _ in range(num_heads))
        self.shared = lm_head is not None
        if self.shared:
            # Shared and frozen: kept out of this module's parameters and state dict (it is the target's).
            self.__dict__["lm_head"] = lm_head
            self.proj = None
        else:
            self.proj = nn.ModuleList(nn.Linear(hidden, vocab, bias=False) for _ in range(num_heads))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.shared:
            return torch.stack([self.lm_head(block(hidden)) for block in self.blocks])
        return torch.stack([proj(block(hidden)) for block, proj in zip(self.blocks, self.proj)])
