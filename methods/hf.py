"""Hugging Face `generate` baselines, timed as one opaque phase.

`hf_generate` is plain greedy `model.generate`, the reference that the Token Recycling paper's speedups
are measured against; `hf_pld` is `generate(prompt_lookup_num_tokens=N)`, the peer of our `pld` in its
HF setting; `hf_assisted` is `generate(assistant_model=draft)`, transformers' speculative decoding with the
model's draft (`model.draft`), the peer baseline of the draft-model methods. Steps are counted through a
StoppingCriteria (a public hook, called after every target forward), so MAT is measured for these too.

In assisted generation (transformers 5.x `_assisted_decoding`) the stopping criteria run once per loop
iteration after the target's forward, once the accepted tokens and the bonus token are appended; the
assistant's own `generate` calls get their own criteria, not ours. Up to 5.17 (the GPU images' version) they
also run on each iteration's candidates, before the target's forward: so the assisted baselines count the
target's forwards (a forward pre-hook) and record only a call that follows one, and one recorded length is one
target forward on every version. The first forward also prefills the prompt, so its step may commit several
tokens (the engine's methods count the prefill as a one-token step instead): either way MAT = tokens per target
forward.

At temperature > 0 (`engine.temperature`) the HF baselines sample with do_sample=True, that temperature,
top_k=0 and top_p=1.0 (HF's default top_k=50 would truncate the distribution). HF's sampling draws from the
global torch RNG, which is seeded per prompt-turn from the engine's generator (reseeded by the runner).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from itertools import pairwise

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from bench.core.proposer import Generation, Method
from bench.core.settings import choice, declare, integer, number
from bench.errors import HarnessError
from bench.models.vocab import TrimmedDraft


class StepRecorder(StoppingCriteria):
    """Records the sequence length after every generation step; never stops anything. With `forwards` (the
    target's forwards so far), a call with no target forward since the previous call is not a step: transformers
    <= 5.17 checks an assisted step's candidates before verifying them (counted as steps, they halved the MAT)."""

    def __init__(self, forwards: Callable[[], int] | None = None):
        self.lengths: list[int] = []
        self.forwards = forwards
        self.seen = forwards() if forwards else 0  # the forwards at the previous call

    def __call__(self, input_ids, scores, **kwargs):
        now = self.forwards() if self.forwards else self.seen + 1
        if now > self.seen:
            self.lengths.append(input_ids.shape[1])
        self.seen = now
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


@contextmanager
def counted_forwards(model):
    """Yields a function returning how many times `model`'s forward has been called inside the block."""
    count = [0]

    def tick(*_):
        count[0] += 1

    handle = model.register_forward_pre_hook(tick)
    try:
        yield lambda: count[0]
    finally:
        handle.remove()


def sampling_kwargs(engine) -> dict:
    """generate() sampling settings for the engine's temperature (0 = greedy)."""
    temperature = float(getattr(engine, "temperature", 0.0) or 0.0)
    if temperature == 0:
        return {"do_sample": False}
    generator = getattr(engine, "generator", None)
    if generator is not None:
        torch.manual_seed(int(torch.randint(2**62, (1,), generator=generator, device=generator.device)))
    return {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}


class HFGenerate(Method):
    batchable = True
    checks_candidates = False  # transformers may call the stopping criteria on draft candidates (assisted)

    def generate_kwargs(self) -> dict:
        return {}

    def describe(self):
        return {"generate_kwargs": self.generate_kwargs()}

    @torch.inference_mode()
    def generate(self, engine, prompt_ids, max_new_tokens, timer):
        model = self.bundle.model
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=model.device)
        sampling = sampling_kwargs(engine)
        # (no hook on plain generate: its forward may be compiled, and it checks no candidates)
        with counted_forwards(model) if self.checks_candidates else nullcontext() as forwards:
            recorder = StepRecorder(forwards)
            timer.start()
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                eos_token_id=self.bundle.eos_token_ids,
                pad_token_id=self.bundle.pad_token_id,
                stopping_criteria=StoppingCriteriaList([recorder]),
                **sampling,
                **self.generate_kwargs(),
            )
            timer.lap("generate")
        output = out[0, len(prompt_ids) :].tolist()
        lengths = [len(prompt_ids)] + recorder.lengths
        accept = [b - a for a, b in pairwise(lengths)]
        return Generation(output, accept, timer.result())


    @torch.inference_mode()
    def generate_batch(self, engine, prompts, max_new_tokens, timer, generators):
        """Plain greedy/sampled `generate` over a left-padded batch (the outside reference at batch B; HF's
        assisted and prompt-lookup generation refuse batches). Every row gets one token per forward; a
        finished row is padded by HF and still computed, and its latency is the batch's."""
        if self.generate_kwargs() or len(prompts) == 1:
            return super().generate_batch(engine, prompts, max_new_tokens, timer, generators)
        model, width = self.bundle.model, max(len(p) for p in prompts)
        pad = self.bundle.pad_token_id
        ids = torch.full((len(prompts), width), pad, dtype=torch.long, device=model.device)
        mask = torch.zeros_like(ids)
        for b, p in enumerate(prompts):
            ids[b, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[b, width - len(p) :] = 1
        timer.start()
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                             eos_token_id=self.bundle.eos_token_ids, pad_token_id=pad, **sampling_kwargs(engine))
        timer.lap("generate")
        phases, eos = timer.result(), set(self.bundle.eos_token_ids)
        gens = []
        for row in out[:, width:].tolist():
            stop = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
            gens.append(Generation(row[:stop], [1] * stop, phases, sum(phases.values())))
        return gens


class HFPromptLookup(HFGenerate):
    batchable = False  # transformers raises for prompt lookup at batch > 1
    checks_candidates = True
    settings = declare({"num_draft_tokens": integer(1), "max_ngram": integer(1, optional=True)})

    def generate_kwargs(self):
        kw = {"prompt_lookup_num_tokens": int(self.cfg.num_draft_tokens)}
        if self.cfg.get("max_ngram") is not None:
            kw["max_matching_ngram_size"] = int(self.cfg.max_ngram)
        return kw


# Assisted-generation settings transformers reads from the *assistant's* generation_config (passing them to
# the target's generate() does not reach the candidate generator).
ASSISTANT_KEYS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


def assistant_defaults() -> dict:
    """transformers' defaults for ASSISTANT_KEYS (5.x: 20, "constant", 0.4); {} if it does not expose them."""
    from transformers import GenerationConfig

    get = getattr(GenerationConfig, "_get_default_generation_params", None)
    defaults = get() if callable(get) else {}
    return {k: defaults[k] for k in ASSISTANT_KEYS if k in defaults}


class HFAssisted(HFGenerate):
    """`generate(assistant_model=draft)`. Config keys num_assistant_tokens, num_assistant_tokens_schedule,
    assistant_confidence_threshold: null = transformers' defaults. They are set on the draft's
    generation_config, where assisted generation reads them; with schedule "heuristic" transformers writes
    the adapted draft length back there, so it carries over to the next prompt (upstream behaviour)."""

    batchable = False  # transformers raises for assisted generation at batch > 1
    checks_candidates = True
    settings = declare({
        "num_assistant_tokens": integer(1, optional=True),
        "num_assistant_tokens_schedule": choice("constant", "heuristic", "heuristic_transient", optional=True),
        "assistant_confidence_threshold": number(0, 1, optional=True),
    })

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        draft = bundle.load_draft()
        if getattr(draft, "wants_features", False):
            raise HarnessError("hf_assisted needs a draft language model; model.draft.source=eagle drafts only for "
                               "the engine's draft-model methods (sd, specinfer, sequoia, dyspec, holistic)")
        # transformers' assistant must be a whole model: a trimmed draft (bench.models.vocab) is used untrimmed.
        self.draft = draft.model if isinstance(draft, TrimmedDraft) else draft
        self.draft_vocab = "trimmed draft used whole" if draft is not self.draft else "whole"
        self.configured = {k: cfg.get(k) for k in ASSISTANT_KEYS}
        for key, value in self.configured.items():
            setattr(self.draft.generation_config, key, value)  # None: transformers fills in its default

    def generate_kwargs(self):
        return {"assistant_model": self.draft}

    def generate(self, engine, prompt_ids, max_new_tokens, timer):
        """As HFGenerate, and the draft length transformers' schedule had in effect when the prompt-turn started and
        when it ended (counters of one value each: "heuristic" adapts it, +2 after a fully accepted draft and -1
        otherwise, and carries it to the next call; "constant" keeps it)."""
        start = self.in_effect()["num_assistant_tokens"]
        gen = super().generate(engine, prompt_ids, max_new_tokens, timer)
        gen.counters = {"assistant_tokens_start": [start], "assistant_tokens_end": [self.in_effect()["num_assistant_tokens"]]}
        return gen

    def in_effect(self) -> dict:
        """The assistant settings transformers uses now: the draft's generation_config, defaults filled in."""
        gen = self.draft.generation_config
        defaults = assistant_defaults()
        return {k: getattr(gen, k) if getattr(gen, k, None) is not None else defaults.get(k) for k in ASSISTANT_KEYS}

    def describe(self):
        import transformers
        from transformers.utils import is_sklearn_available

        effect = self.in_effect()
        return {
            "generate_kwargs": {"assistant_model": "model.draft"},
            "draft": getattr(self.draft.config, "name_or_path", None) or str(self.bundle.draft_cfg.id),
            "draft_layers": self.draft.config.num_hidden_layers,
            "draft_vocab": self.draft_vocab,
            "configured": self.configured,
            **effect,
            # Without scikit-learn transformers keeps the confidence threshold fixed; with it, the threshold is
            # re-tuned during each generate() call from an ROC curve of the draft's confidences.
            "confidence_threshold_adapts": bool(effect["assistant_confidence_threshold"]) and is_sklearn_available(),
            "transformers": transformers.__version__,
        }
