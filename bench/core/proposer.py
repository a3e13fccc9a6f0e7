"""What a method is: a proposer that drafts a tree of tokens, or a whole-sequence generator (HF baselines).

Proposers own only their proposing state; the one decode loop (bench.engine) runs the target,
verifies with the one verifier (bench.verify) and manages the KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from bench.core.tree import Tree, chain


@dataclass
class Draft:
    tree: Tree
    tokens: torch.Tensor  # [N] draft tokens for tree slots 1..N (the root is the engine's)
    # [N+1] bool or None: slots that may be accepted. False marks input-only slots whose logits the
    # proposer wants but which are never committed (e.g. Lookahead's Jacobi window). None = all.
    candidates: torch.Tensor | None = None
    # [N+1, V] float or None: at temperature > 0, the draft distribution each slot's children were sampled
    # from (draft-model methods). None: the drafts are deterministic candidates (PLD, Token Recycling, ...).
    probs: torch.Tensor | None = None


@dataclass
class StepContext:
    """What the engine lends a proposer for one generation: sampling settings and the phase timer."""

    temperature: float  # the target's; 0 = greedy
    generator: torch.Generator  # shared with the engine's verifier, reseeded per prompt-turn
    timer: object  # bench.timing.PhaseTimer: proposers may lap sub-phases (draft_forward, tree)


@dataclass
class Generation:
    """One prompt-turn's output and raw counters; reduced later by bench.metrics."""

    output_ids: list[int]
    accept_lengths: list[int]  # tokens committed per target forward (prefill's first token counts as 1)
    phase_times: dict[str, float] = field(default_factory=dict)


class Method:
    """Common base: `name`, the method config and the model bundle."""

    def __init__(self, cfg, bundle):
        self.cfg = cfg
        self.bundle = bundle

    def describe(self) -> dict:
        """Settings worth recording in the run's summary (e.g. the tree name)."""
        return {}

    def generate(self, engine, prompt_ids: list[int], max_new_tokens: int, timer) -> Generation:
        raise NotImplementedError


class Proposer(Method):
    """Drafts for the shared engine. Override `propose`; `start` and `update` are optional hooks."""

    wants_logits = False  # set True to receive the target logits of every tree slot in `update`
    rule = "sequoia"  # stochastic verification rule at temperature > 0 (bench.sampling.RULES)
    ctx: StepContext | None = None

    def bind(self, ctx: StepContext) -> None:
        """Called by the engine before `start` of every generation."""
        self.ctx = ctx

    def start(self, prompt_ids: list[int]) -> None:
        """Called at the start of every prompt-turn (inside the timed region)."""

    def propose(self, seq: torch.Tensor, length: int) -> Draft:
        """seq[:length] are the committed tokens; seq[length - 1] is the root of the next tree."""
        raise NotImplementedError

    def update(self, inputs: torch.Tensor, logits: torch.Tensor | None, target: torch.Tensor) -> None:
        """After verification: inputs [N+1] tree tokens, logits [N+1, V] (if wanted), target [N+1] argmax."""

    def generate(self, engine, prompt_ids, max_new_tokens, timer) -> Generation:
        return engine.generate(self, prompt_ids, max_new_tokens, timer)


EMPTY = torch.empty(0, dtype=torch.long)


def empty_draft() -> Draft:
    return Draft(chain(0), EMPTY)
