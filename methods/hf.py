"""Hugging Face `generate` baselines, timed as one opaque phase.

`hf_generate` is plain greedy `model.generate`, the reference that the Token Recycling paper's speedups
are measured against; `hf_pld` is `generate(prompt_lookup_num_tokens=N)`, the peer of our `pld` in its
HF setting. Steps are counted through a StoppingCriteria (a public hook, called once per target forward),
so MAT is measured for these too.
"""

from __future__ import annotations

from itertools import pairwise

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from methods.base import Generation, Method


class StepRecorder(StoppingCriteria):
    """Records the sequence length after every generation step; never stops anything."""

    def __init__(self):
        self.lengths: list[int] = []

    def __call__(self, input_ids, scores, **kwargs):
        self.lengths.append(input_ids.shape[1])
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class HFGenerate(Method):
    def generate_kwargs(self) -> dict:
        return {}

    def describe(self):
        return {"generate_kwargs": self.generate_kwargs()}

    @torch.inference_mode()
    def generate(self, engine, prompt_ids, max_new_tokens, timer):
        model = self.bundle.model
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=model.device)
        recorder = StepRecorder()
        timer.start()
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=self.bundle.eos_token_ids,
            pad_token_id=self.bundle.pad_token_id,
            stopping_criteria=StoppingCriteriaList([recorder]),
            **self.generate_kwargs(),
        )
        timer.lap("generate")
        output = out[0, len(prompt_ids) :].tolist()
        lengths = [len(prompt_ids)] + recorder.lengths
        accept = [b - a for a, b in pairwise(lengths)]
        return Generation(output, accept, timer.result())


class HFPromptLookup(HFGenerate):
    def generate_kwargs(self):
        kw = {"prompt_lookup_num_tokens": int(self.cfg.num_draft_tokens)}
        if self.cfg.get("max_ngram") is not None:
            kw["max_matching_ngram_size"] = int(self.cfg.max_ngram)
        return kw
