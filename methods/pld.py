"""Prompt lookup decoding (Saxena 2023): draft the continuation of an earlier match of the last n-gram.

Two settings:
- original: n-gram sizes 3..1, 10 tokens, earliest match whose full continuation exists;
- hf: n-gram sizes 2..1, 10 tokens, earliest match with any non-empty (possibly partial) continuation,
  as transformers' PromptLookupCandidateGenerator, so our PLD can be compared token for token and
  step for step with `hf_pld`.
No match gives an empty draft (a plain AR step). The original code drafts a dummy token instead; that
only wastes a slot of the forward, so we do not copy it.
"""

from __future__ import annotations

import torch

from bench.core.proposer import Draft, Proposer, empty_draft
from bench.core.settings import FLAG, declare, integer
from bench.core.tree import chain


def find_candidates(seq: torch.Tensor, max_ngram: int, num_tokens: int, full_continuation: bool) -> torch.Tensor:
    """Continuation after the earliest occurrence of the trailing n-gram, trying the largest n first."""
    length = len(seq)
    for n in range(min(max_ngram, length - 1), 0, -1):
        windows = seq.unfold(0, n, 1)  # [length - n + 1, n]
        hits = (windows == seq[length - n :]).all(-1).nonzero().flatten()
        for start in (hits + n).tolist():
            end = start + num_tokens
            if full_continuation:  # original: whole continuation available, not the trailing n-gram itself
                if end <= length and start < length - n:
                    return seq[start:end]
            elif start < length:  # HF: any non-empty continuation, truncated at the end
                return seq[start : min(end, length)]
    return seq[:0]


class PromptLookup(Proposer):
    host_tokens = True  # searched on the host
    settings = declare({"max_ngram": integer(1), "num_draft_tokens": integer(1), "full_continuation": FLAG})

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.max_ngram = int(cfg.max_ngram)
        self.num_tokens = int(cfg.num_draft_tokens)
        self.full = bool(cfg.full_continuation)

    @property
    def max_draft_tokens(self) -> int:
        return self.num_tokens

    def describe(self):
        return {"max_ngram": self.max_ngram, "num_draft_tokens": self.num_tokens, "full_continuation": self.full}

    def propose(self, seq, length):
        cand = find_candidates(seq[:length], self.max_ngram, self.num_tokens, self.full)
        if len(cand) == 0:
            return empty_draft()
        return Draft(chain(len(cand)), cand)
