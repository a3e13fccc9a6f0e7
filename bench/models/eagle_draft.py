"""An EAGLE head driven as if it were a draft language model: `model.draft.source: eagle` (EAGLE-1's head,
bench.models.eagle) or `eagle3` (EAGLE-3's, bench.models.eagle3).

The draft-model methods (sd, specinfer, sequoia, dyspec, holistic; methods/shared/draft_proposer.py) feed their
draft input ids, positions, a tree attention mask and its own KV cache, and read logits whose row j predicts the
token after input j. EagleDraft gives the same contract over the head, so those methods draft with EAGLE unchanged
(Post-use & Pre-cut's appendix E.3, token cache + EAGLE, is then a setting).

Alignment (as methods/eagle/proposer.py): the cache column of input token t_j holds the head's entry for the pair
(f_{j-1}, t_j) at head position j-1; its output f^_j gives the logits of t_{j+1}. f_{j-1} is the feature of the
column's parent (the nearest earlier column the mask lets it see): the target's own feature when the parent is a
committed position the target has verified (the engine hands them over through observe_features), otherwise the
head's output at the parent's column (the root, the last committed token, and every drafted node). Column 0 (the
first prompt token) has no earlier feature: its entry is a placeholder no other column ever sees, so every cache
column still matches one input token, as a language model's does, and the methods' crop arithmetic holds.

An EAGLE-3 head reads the input states of its three target layers (`feature_layers`, which the draft-model
proposer asks the engine for), fused by its `fc` where an entry is fed the target's states; its logits cover its
draft vocabulary only, so they are widened to the target's, -inf outside it (as bench.models.vocab.TrimmedDraft's).

Everything per decoding row (the target's features, the head's outputs per column) lives in the row's cache
(EagleDraftCache), so batch rows that share the adapter stay independent.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import torch
from torch import nn
from transformers import DynamicCache

from bench.core.forward import aligned_mask
from bench.core.kv import cut
from bench.models.eagle3 import Eagle3Head


class EagleDraftCache(DynamicCache):
    """The head's KV cache of one row plus the features its entries are fed from."""

    def __init__(self, config):
        super().__init__(config=config)
        self.target: torch.Tensor | None = None  # [n, H] the target's features f_0..f_{n-1} (committed, verified)
        self.outputs: torch.Tensor | None = None  # [columns, H] the head's output f^ at each cache column
        self.committed = 0  # leading columns fed as a causal chunk: committed tokens, column == position

    def observe(self, features: torch.Tensor) -> None:
        """The target's features of the next committed positions, in order."""
        self.target = features if self.target is None else torch.cat([self.target, features.to(self.target)])

    def crop(self, max_length: int) -> None:
        super().crop(max_length)
        n = self.get_seq_length()
        self.committed = min(self.committed, n)
        if self.outputs is not None:
            self.outputs = self.outputs[:n]


class EagleDraft(nn.Module):
    """head: an EagleHead; target: its target model (only for calls without a cache: teacher-forced scoring)."""

    wants_features = True  # the draft-model proposer forwards the engine's features to the row's cache

    def __init__(self, head, target, name: str, device, dtype):
        super().__init__()
        self.head = head
        self.feature_layers = head.layers if isinstance(head, Eagle3Head) else None
        self.shared = {"target": target}  # not a submodule: the target's weights are not this module's
        self.config = copy.deepcopy(head.config)
        self.config.name_or_path = name
        self.name_or_path = name
        self._device, self._dtype = torch.device(device), dtype

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    def new_cache(self) -> EagleDraftCache:
        return EagleDraftCache(self.head.config)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, past_key_values=None, use_cache: bool = True,
                logits_to_keep: int = 0, **_) -> SimpleNamespace:
        """input_ids [1, n]; attention_mask [1, 1, n, cached + n] additive (None: a causal chunk of committed
        tokens, positions = columns). Without a cache: the whole sequence, teacher-forced on the target's own
        features (Sequoia's acceptance measurement). Returns .logits [1, kept, V]."""
        if past_key_values is None:
            return self.teacher_forced(input_ids, logits_to_keep)
        if input_ids.shape[0] != 1:
            raise ValueError("EagleDraft drafts one row per cache")
        cache, n = past_key_values, input_ids.shape[1]
        start = cache.get_seq_length()
        dev, dtype = self.device, self.dtype
        if position_ids is None:
            position_ids = torch.arange(start, start + n, device=dev)[None]
        if attention_mask is None:  # committed tokens, in order after the committed columns
            if start != cache.committed:
                raise RuntimeError("eagle draft: committed tokens fed after drafted ones (crop the cache first)")
            visible = torch.ones(n, start + n, dtype=torch.bool, device=dev).tril(start)
        else:
            visible = attention_mask[0, 0] == 0
        chunk = attention_mask is None
        parents = list(range(start - 1, start + n - 1)) if chunk else self.parents(visible, start)
        visible = visible.clone()
        visible[:, 0] = False  # column 0's entry is the placeholder (no feature before the first token) ...
        visible[torch.arange(n, device=dev), torch.arange(start, start + n, device=dev)] = True  # ... seen by itself
        known = 0 if cache.target is None else cache.target.shape[0]
        # Where each entry's feature comes from: ("target", position), ("output", column < start), ("row", i):
        # the output of another input of this call, which needs one more pass of the head per nesting level.
        sources, depth = [], [0] * n
        for i, p in enumerate(parents):
            if p < 0:
                sources.append(("zero", 0))
            elif (p < cache.committed or chunk) and p < known:
                sources.append(("target", p))
            elif p < start:
                sources.append(("output", p))
            elif chunk:
                raise RuntimeError(f"eagle draft: no target feature for position {p} (observe_features first)")
            else:
                sources.append(("row", p - start))
                depth[i] = depth[p - start] + 1
        mask = aligned_mask(tuple(visible.shape), 0.0, dtype, dev).masked_fill_(~visible, torch.finfo(dtype).min)
        pos = (position_ids.to(dev) - 1).clamp(min=0)  # the head's position is its feature's
        hidden = self.head.config.hidden_size
        out = torch.zeros(n, hidden, dtype=dtype, device=dev)
        for level in range(max(depth) + 1):
            feats = torch.stack([self.feature(cache, s, out) for s in sources])
            out = self.head(input_ids.to(dev), feats[None], pos, mask[None, None], cache)[0]
            if level < max(depth):
                cut(cache, start)  # again with the next level's in-call parents
        cache.outputs = out if cache.outputs is None else torch.cat([cache.outputs, out])
        if chunk:
            cache.committed = start + n
        kept = out[-logits_to_keep:] if logits_to_keep else out
        return SimpleNamespace(logits=self.logits(kept)[None])

    def logits(self, outputs: torch.Tensor) -> torch.Tensor:
        """The head's logits over the target's vocabulary (an EAGLE-3 draft vocabulary widened, -inf outside)."""
        logits = self.head.logits(outputs)
        if self.feature_layers is None or logits.shape[-1] == self.head.config.vocab_size:
            return logits
        full = logits.new_full((*logits.shape[:-1], self.head.config.vocab_size), float("-inf"))
        full[..., self.head.to_target(torch.arange(logits.shape[-1], device=logits.device))] = logits
        return full

    @staticmethod
    def parents(visible: torch.Tensor, start: int) -> list[int]:
        """Per input i, the nearest earlier column its row of `visible` [n, start + n] sees (-1: none): its parent,
        whose feature it is fed. Found on the device for all inputs, read in one go (a chunk's are known)."""
        n, width = visible.shape
        cols = torch.arange(width, device=visible.device)
        earlier = cols[None] < start + torch.arange(n, device=visible.device)[:, None]
        return torch.where(visible & earlier, cols, -1).amax(1).tolist()

    def feature(self, cache: EagleDraftCache, source: tuple[str, int], out: torch.Tensor) -> torch.Tensor:
        """An entry's input state of width H: an EAGLE-3 head fuses the target's layer states with its fc first."""
        kind, i = source
        if kind == "target":
            state = cache.target[i].to(out)
            return self.head.fc(state) if self.feature_layers is not None else state
        if kind == "output":
            return cache.outputs[i]
        if kind == "row":
            return out[i]
        return out.new_zeros(out.shape[-1])

    def teacher_forced(self, input_ids: torch.Tensor, logits_to_keep: int) -> SimpleNamespace:
        """Logits of a whole sequence given its true prefix: the target's features, then the cached path."""
        target = self.shared["target"]
        ids = input_ids.to(self.device)
        if self.feature_layers is None:
            features = target.get_decoder()(input_ids=ids).last_hidden_state[0]  # post-norm: the lm_head's input
        else:
            states = target.get_decoder()(input_ids=ids, output_hidden_states=True).hidden_states
            features = torch.cat([states[i][0] for i in self.feature_layers], -1)
        cache = self.new_cache()
        cache.observe(features[:-1])
        return self.forward(ids, past_key_values=cache, logits_to_keep=logits_to_keep)
