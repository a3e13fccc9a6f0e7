"""The proposer contract: what a method is and what the engine exchanges with it.

A method is a proposer that drafts a tree of tokens, or a whole-sequence generator (HF baselines).
Proposers own only their proposing state; the one decode loop (bench.core.engine) runs the target,
verifies with the one verifier (bench.core.verify or bench.core.sampling) and manages the KV cache.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from bench.core.settings import Rule, Setting, check_settings, declare
from bench.core.tree import Tree, chain

if TYPE_CHECKING:
    from bench.core.forward import TargetForward
    from bench.core.timing import Timer


class TargetBundle(Protocol):
    """What a method may use of the loaded model (bench.models.loading.ModelBundle is one)."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    vocab_size: int
    eos_token_ids: list[int]
    max_context: int

    def load_draft(self) -> torch.nn.Module: ...


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
    timer: Timer  # proposers may lap sub-phases (draft_forward, tree)
    # The row's committed tokens on the model's device, as the engine writes them each step: a `host_tokens`
    # proposer's draft model reads them there (its `propose` gets the host copy).
    seq: torch.Tensor | None = None


@dataclass
class Acceptance:
    """One verification's outcome for one row, its shapes with a leading dimension of 1; the greedy verifier's for
    several rows that share one tree at once (the engine's batch where its rows do), of B."""

    best: torch.Tensor  # [B] slot of the deepest accepted node (0 = only the root)
    path: torch.Tensor  # [B, N+1] bool, slots on the accepted path root..best
    accept_len: torch.Tensor  # [B] tokens this step = accepted drafts + bonus (before any EOS/limit cut)
    bonus: torch.Tensor  # [B] target's choice after the accepted path

    @classmethod
    def from_path(cls, tree: Tree, slots: list[int], bonus: int, device="cpu") -> Acceptance:
        """Batch-1 acceptance from a path of slots (root first), as the stochastic verifier returns it."""
        path = torch.zeros(1, tree.size + 1, dtype=torch.bool, device=device)
        path[0, slots] = True
        return cls(torch.tensor([slots[-1]], device=device), path, torch.tensor([len(slots)], device=device),
                   torch.tensor([bonus], device=device))

    def slots(self, row: int = 0) -> torch.Tensor:
        """Accepted slots of one row, root (slot 0) first, ascending."""
        return self.path[row].nonzero().flatten()


@dataclass
class Generation:
    """One prompt-turn's output and raw counters; reduced later by bench.metrics."""

    output_ids: list[int]
    accept_lengths: list[int]  # tokens committed per target forward (prefill's first token counts as 1)
    phase_times: dict[str, float] = field(default_factory=dict)  # of the whole batch when decoded in one
    # Timed seconds from the start until this row left its batch (its latency), and the number of rows still
    # decoding at each step (prefill first); None / [] for methods that do not decode through the engine.
    elapsed: float | None = None
    occupancy: list[int] = field(default_factory=list)
    # Per verification step: nodes drafted (root excluded), and of those the nodes the target's forward ran
    # through every layer (fewer when a forward drops slots, e.g. ProPD's early pruning).
    draft_nodes: list[int] = field(default_factory=list)
    verified_nodes: list[int] = field(default_factory=list)
    # The proposer's own per-step counters by name (Proposer.step_counters), e.g. draft calls per step.
    counters: dict[str, list] = field(default_factory=dict)


class Method:
    """Common base: `name`, the method config and the model bundle."""

    batchable = False  # True: `generate_batch` decodes several prompts together (run.batch_size > 1)
    # The method's config keys and what each takes (bench.core.settings), and rules on combinations. A class
    # declares only its own: a subclass's check also applies its bases' declarations.
    settings: Mapping[str, Setting] = declare({})
    requires: tuple[Rule, ...] = ()
    # Why the engine's graph mode (run.graphs=true, bench.core.graph_engine) cannot run this method; None: it can.
    graphs_refused: str | None = "it runs its own decode loop, not the engine's"

    def __init__(self, cfg, bundle: TargetBundle):
        self.check_settings(cfg)
        self.cfg = cfg
        self.bundle = bundle

    @classmethod
    def check_settings(cls, cfg) -> None:
        """ConfigError naming the method, key, value and what is allowed, for a setting this class and its bases
        do not accept; needs only the config, so a run checks it before the model loads."""
        settings, rules = {}, []
        for klass in reversed(cls.__mro__):
            settings.update(vars(klass).get("settings", {}))
            rules += vars(klass).get("requires", ())
        if cfg is None:  # built without a config (tests): nothing to check
            return
        check_settings(cfg.get("name") or cls.__name__, cfg, settings, rules)

    @classmethod
    def graphs_refusal(cls, cfg) -> str | None:
        """Why graph mode cannot run this method with config `cfg` (checked before the model loads); None: it can."""
        return cls.graphs_refused

    def describe(self) -> dict:
        """Settings worth recording in the run's summary (e.g. the tree name)."""
        return {}

    @property
    def max_draft_tokens(self) -> int:
        """The most draft nodes one step can hold: the runner checks that the context has room for them beside the
        output. A proposer with a static tree (a Tree as its `tree`) holds that tree; one whose trees vary overrides
        this with its most; 0: no draft (or a chain the runner's margin covers)."""
        tree = vars(self).get("tree")
        return tree.size if isinstance(tree, Tree) else 0

    def state_dict(self) -> dict:
        """What the method learned across prompt-turns (e.g. Token Recycling's matrix): saved with every
        checkpoint of a run, so a resumed run decodes as an uninterrupted one (where the method's own updates are
        deterministic: not Token Recycling's `parallel` scatter on CUDA). {}: stateless."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned."""

    def generate(self, engine, prompt_ids: list[int], max_new_tokens: int, timer: Timer) -> Generation:
        raise NotImplementedError

    def generate_batch(self, engine, prompts: list[list[int]], max_new_tokens: int, timer: Timer,
                       generators: list[torch.Generator]) -> list[Generation]:
        """Decode several prompts together (run.batch_size > 1); one generator per row at temperature > 0."""
        if len(prompts) == 1:
            return [self.generate(engine, prompts[0], max_new_tokens, timer)]
        raise NotImplementedError(f"method '{self.cfg.name}' does not decode batches")


class Proposer(Method):
    """Drafts for the shared engine. Override `propose`; `start` and `update` are optional hooks."""

    batchable = True  # the engine batches any proposer (one fork per row)
    graphs_refused = None
    wants_logits = False  # set True to receive the target logits of every tree slot in `update`
    wants_hidden = False  # set True to receive the target's final hidden state in `observe_hidden`
    wants_features = False  # set True to receive the final hidden states of newly committed context (`observe_features`)
    # With wants_features: the target decoder layers whose input states (the residual stream entering each layer,
    # pre-norm: HF's hidden_states[i]) observe_features receives instead, concatenated in this order [n, k * H]
    # (EAGLE-3's low, mid and high layers), from the same target forward. None: the final hidden state.
    feature_layers: tuple[int, ...] | None = None
    # True: `propose` gets the committed tokens and `update` the target's choices as host tensors (the engine brings
    # them back with its one read a step), for a proposer that works on the host (PLD, REST, Lookahead); False:
    # device tensors.
    host_tokens = False
    # True: `draft_from` drafts the static `tree` on the device and `update` is device-only at fixed shapes (no host
    # read, no shape that depends on values): graph mode captures the whole step (Token Recycling).
    static_step = False
    rule = "sequoia"  # stochastic verification rule at temperature > 0 (bench.core.sampling.RULES)
    # run.record_steps (set by the runner): proposers that support it keep each step's draft tokens, draft
    # probabilities and accepted flags in step_counters ("step_*" lists); off, no host copy is added for them.
    record_steps = False
    # The target forward this proposer's generations use (bench.core.forward; None = the engine's own). The
    # first row's decides for a batch.
    target_forward: TargetForward | None = None
    ctx: StepContext | None = None

    def bind(self, ctx: StepContext) -> None:
        """Called by the engine before `start` of every generation."""
        self.ctx = ctx

    def fork(self) -> Proposer:
        """The proposer of one more row of a batch. A shallow copy: what the method learns across prompts
        (Token Recycling's matrix) stays shared by every row, so each row's verification updates it; state
        that `start` rebinds (a draft model's KV cache) is per row. Override when `start` mutates in place."""
        return copy.copy(self)

    def start(self, prompt_ids: list[int]) -> None:
        """Called at the start of every prompt-turn (inside the timed region)."""

    def observe_hidden(self, hidden: torch.Tensor) -> None:
        """With `wants_hidden`: the target's final hidden state [H] at the last token whose KV is cached (the
        position whose logits gave the next tree's root), after the prefill and after every verification."""

    def observe_features(self, features: torch.Tensor) -> None:
        """With `wants_features`: the target's final hidden states [n, H] of the positions whose next token was
        just committed, in order: the prompt's after the prefill, the accepted path's slots (root first) after a
        verification; with `feature_layers`, those layers' input states there [n, k * H] instead. A feature-level
        draft (EAGLE) pairs features[i] with the token committed after it."""

    def step_counters(self) -> dict[str, list]:
        """Named per-verification counters of the generation just finished (e.g. draft-model calls per step),
        kept raw in the run's records and summed by bench.metrics. {} = none."""
        return {}

    def draft_from(self, root: torch.Tensor) -> torch.Tensor:
        """With `static_step`: the draft tokens [N] of `self.tree` (a static Tree) under `root` [1], computed on the
        device from the proposer's own state alone, with no host value, so graph mode (bench.core.graph_engine) can
        capture draft, verification and `update` as one CUDA graph a step."""
        raise NotImplementedError

    def propose(self, seq: torch.Tensor, length: int) -> Draft:
        """seq[:length] are the committed tokens (on the host with `host_tokens`, else on the model's device);
        seq[length - 1] is the root of the next tree."""
        raise NotImplementedError

    def propose_batch(self, proposers: list[Proposer], seqs: list[torch.Tensor], lengths: list[int]) -> list[Draft]:
        """Every row's draft for one step of a batch; the engine calls it on the first row's proposer with all the
        rows' (forks of it, in order), as `propose` would get them. Each row proposes alone here; a method whose
        draft is tensor work on the device overrides it to draft every row at once (Medusa's heads over [B, H]): a
        few kernel launches a step instead of a few a row."""
        return [p.propose(seq, n) for p, seq, n in zip(proposers, seqs, lengths, strict=True)]

    def update(self, inputs: torch.Tensor, logits: torch.Tensor | None, target: torch.Tensor,
               acceptance: Acceptance) -> None:
        """After verification: inputs [N+1] tree tokens, logits [N+1, V] (if wanted), target [N+1] argmax,
        acceptance: the accepted path and length (stateful methods, e.g. acceptance estimates, need it)."""

    def generate(self, engine, prompt_ids: list[int], max_new_tokens: int, timer: Timer) -> Generation:
        return engine.generate(self, prompt_ids, max_new_tokens, timer)

    def generate_batch(self, engine, prompts, max_new_tokens, timer, generators):
        rows = [self] + [self.fork() for _ in prompts[1:]]
        return engine.generate_batch(rows, prompts, max_new_tokens, timer, generators)


EMPTY = torch.empty(0, dtype=torch.long)


def drafts_rows_at_once(method: Method) -> bool:
    """Whether a method drafts a batch step's rows at once (its own `propose_batch`), not each row alone."""
    return isinstance(method, Proposer) and type(method).propose_batch is not Proposer.propose_batch


def wants_hidden(proposer: Proposer) -> bool:
    """Whether the proposer wants the target's final hidden state (features from chosen layers come without it)."""
    return proposer.wants_hidden or (proposer.wants_features and not proposer.feature_layers)


def layers_of(proposer: Proposer) -> dict:
    """The forward's `feature_layers` argument when the proposer wants chosen layers' input states, else no argument."""
    return {"feature_layers": tuple(proposer.feature_layers)} if proposer.wants_features and proposer.feature_layers else {}


def empty_draft() -> Draft:
    return Draft(chain(0), EMPTY)


class Replay:
    """Timing one prompt more than once (a warm-up, repeated passes) with a method that learns across prompts
    (`state_dict`: Token Recycling's matrix) lets it see that prompt's continuation before: on 3 HumanEval prompts x
    128 tokens (fp32, CPU) Token Recycling's MAT was 1.90 the first time and 2.60 the second. `start(method, key)`
    before each generation: the first of `key` (e.g. a prompt's index) records the method's state, each later one
    restores it, so every repeat decodes as the first did."""

    def __init__(self):
        self.states: dict = {}

    def start(self, method: Method, key) -> None:
        if key in self.states:
            method.load_state_dict(self.states[key])
        else:
            self.states[key] = copy.deepcopy(method.state_dict())
