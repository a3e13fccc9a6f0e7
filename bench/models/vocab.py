"""A draft that scores only part of the vocabulary: the V' tokens its target writes most often.

A small draft's decode step on a CPU is dominated by its LM head (576 x 49,152 on SmolLM2-135M, as many
weights as eight decoder layers). `TrimmedDraft` keeps the draft model as it is (a plain transformers
checkpoint: hf_assisted and any other caller can still use it whole) and, at call time, projects the final
hidden states with only the rows of the lm_head that belong to `vocab_ids`. The logits it returns are full
width, -inf outside V': every caller (greedy argmax, softmax for sampling, the verifier's q) sees a draft
distribution that is exactly zero outside V', so the stochastic rules' residual max(p - q, 0) still covers
every token the target may write, and greedy verification stays lossless whatever the draft proposes.

The ranking (`vocab.json` in a trained draft's folder) lists token ids most frequent first in the target's
own outputs; V' is a prefix of it, so one trained draft can be scored at every smaller V'.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from bench.core.forward import cache_kw
from bench.errors import HarnessError

VOCAB_FILE = "vocab.json"


def rank_tokens(token_lists, vocab_size: int, always: tuple[int, ...] = ()) -> list[int]:
    """Every token id of the vocabulary, most frequent first in `token_lists` (ties and unseen ids by id);
    `always` (e.g. EOS) first of all, so that any V' keeps them."""
    counts = Counter()
    for tokens in token_lists:
        counts.update(int(t) for t in tokens)
    seen = sorted(counts, key=lambda t: (-counts[t], t))
    first = [int(t) for t in always]
    head = first + [t for t in seen if t not in set(first)]
    taken = set(head)
    return head + [t for t in range(vocab_size) if t not in taken]


def coverage(ranking: list[int], tokens: torch.Tensor, sizes) -> dict[int, float]:
    """Share of `tokens` (e.g. the target's held-out outputs) inside the first V' ids of the ranking, per V'."""
    if tokens.numel() == 0:
        raise HarnessError("coverage needs at least one token")
    rank = torch.full((len(ranking),), len(ranking), dtype=torch.long)
    rank[torch.tensor(ranking)] = torch.arange(len(ranking))
    r = rank[tokens.long()]
    return {int(v): float((r < int(v)).float().mean()) for v in sizes}


def write_ranking(folder: Path, ranking: list[int], counted_tokens: int) -> None:
    (Path(folder) / VOCAB_FILE).write_text(json.dumps({"counted_tokens": counted_tokens, "ids": ranking}) + "\n")


def read_ranking(folder: Path) -> list[int] | None:
    path = Path(folder) / VOCAB_FILE
    return json.loads(path.read_text())["ids"] if path.is_file() else None


@dataclass
class DraftOutput:
    logits: torch.Tensor
    past_key_values: object = None


class TrimmedDraft(nn.Module):
    """`model` (a causal LM) whose logits are computed for `vocab_ids` only and are -inf elsewhere.

    Called like the model (input_ids, position_ids, attention_mask, past_key_values, use_cache); returns an
    object with `.logits` (full vocabulary width) and `.past_key_values`. `config`, `device`, `dtype` and
    `generation_config` are the model's, so proposers and cost timers treat it as the model."""

    def __init__(self, model, vocab_ids):
        super().__init__()
        self.model = model
        ids = torch.as_tensor(list(vocab_ids), dtype=torch.long, device=model.device)
        full = model.get_output_embeddings().weight.shape[0]
        if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= full or ids.unique().numel() != ids.numel():
            raise HarnessError(f"a trimmed vocabulary needs distinct token ids in 0..{full - 1}")
        self.register_buffer("vocab_ids", ids, persistent=False)
        # A copy of the kept rows: one small contiguous matmul per step instead of the full head.
        self.head = nn.Parameter(model.get_output_embeddings().weight.detach()[ids].clone(), requires_grad=False)
        self.vocab_size = full

    @property
    def config(self):
        return self.model.config

    @property
    def generation_config(self):
        return self.model.generation_config

    @property
    def device(self):
        return self.model.device

    @property
    def dtype(self):
        return self.model.dtype

    @property
    def name_or_path(self):
        return getattr(self.model, "name_or_path", None) or self.model.config.name_or_path

    def trimmed_logits(self, **kwargs) -> tuple[torch.Tensor, object]:
        """([..., V'] logits in the order of vocab_ids, cache) for a forward with the model's arguments."""
        kwargs.pop("logits_to_keep", None)
        base = getattr(self.model, self.model.base_model_prefix)
        if "past_key_values" in kwargs:  # called like the model (our proposers' name); passed on by base's own name
            kwargs.update(cache_kw(base, kwargs.pop("past_key_values")))
        out = base(**kwargs)
        return out.last_hidden_state @ self.head.T, out.past_key_values

    def forward(self, **kwargs) -> DraftOutput:
        small, cache = self.trimmed_logits(**kwargs)
        logits = small.new_full((*small.shape[:-1], self.vocab_size), float("-inf"))
        logits[..., self.vocab_ids] = small
        return DraftOutput(logits, cache)


def trim(model, ranking: list[int] | None, size: int | None):
    """The model itself (size None or >= the vocabulary), else a TrimmedDraft on the first `size` ids."""
    full = model.get_output_embeddings().weight.shape[0]
    if size is None or int(size) >= full:
        return model
    if ranking is None:
        raise HarnessError(f"a draft vocabulary of {size} tokens needs the draft's token ranking ({VOCAB_FILE})")
    if int(size) < 1:
        raise HarnessError(f"draft vocabulary size must be positive, not {size}")
    return TrimmedDraft(model, ranking[: int(size)])


def fit_vocabulary(draft, vocab_size: int, target_tokenizer, draft_tokenizer, what: str):
    """The draft scoring the target's `vocab_size` tokens. A draft whose vocabulary contains the target's (the same
    tokenizer for the first `vocab_size` ids, then tokens of its own: CodeLlama-7B-Instruct's 16 infilling tokens
    beyond CodeLlama-34B-Instruct's 32000) loses its extra rows of the embeddings and lm_head: it could never propose
    a token the target does not have. Any other difference is refused (`what` names the pair in the error)."""
    size = draft.get_output_embeddings().weight.shape[0]
    if size == vocab_size:
        return draft
    if size < vocab_size or draft_tokenizer is None or target_tokenizer is None:  # no tokenizers: nothing to compare
        raise HarnessError(f"{what}: a draft must share the target's tokenizer")
    shared = min(vocab_size, len(target_tokenizer), len(draft_tokenizer))
    ids = list(range(shared))
    mine, theirs = draft_tokenizer.convert_ids_to_tokens(ids), target_tokenizer.convert_ids_to_tokens(ids)
    differ = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b), None)
    if differ is not None:
        raise HarnessError(f"{what}: token {differ} is {mine[differ]!r} in the draft's tokenizer and "
                           f"{theirs[differ]!r} in the target's: a draft must share the target's tokenizer")
    draft.resize_token_embeddings(vocab_size)  # keeps the first vocab_size rows (and re-ties a tied head)
    return draft
