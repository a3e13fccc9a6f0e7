"""The engine's graph mode (`run.graphs=true`): the same decode loop over static shapes, so that on CUDA each
verification's target forward is one replayed CUDA graph instead of ~1250 kernel launches from Python (an AR step
of the embedded model in the H100's profile, evidence/gpu_check/).

What changes against the eager engine (bench.core.engine), batch 1 and temperature 0 only:
- the KV cache is one StaticKV of fixed capacity per engine (bench.core.static_kv), reused by every prompt; its
  length lives on the device;
- a verification's width n (root + draft) is padded to a bucket: the next power of two, or the widest the proposer
  can draft where that is narrower (a static tree's own width); padding slots see only themselves and are never
  accepted; the mask spans the whole static cache;
- per bucket, the inputs (ids, positions, mask, the KV columns to write) are static buffers filled on the device, and
  on CUDA the forward over them is captured once in a torch.cuda.CUDAGraph (every width the proposer can reach, at
  its first generation) and replayed; the prefill stays eager.
  What is captured is the eager forward (no compiler needed: ~1250 kernels a step for the embedded model), or with
  `run.graph_compile=<torch.compile mode>` the forward compiled by inductor first (fused kernels, fewer of them;
  compiled once per model for the first width, then once with the width dynamic for all others);
- acceptance and the KV compaction run on the device at a fixed width; the host reads each step's outcome once
  (the eager engine's `_commit`);
- a proposer whose draft and update are device-only at fixed shapes (`Proposer.static_step`: Token Recycling, and
  Medusa and BPD, whose heads draft from the target's hidden state) has its whole step captured as one graph
  (`StepGraph`): draft, forward, acceptance, commit, compaction and update, and for the heads the hidden state of the
  deepest accepted slot written into a static buffer that the next step's draft reads.
On a CPU the same static-shape code runs eagerly (nothing to capture), which is how the suite checks it.
What it cannot run is refused in one line (GraphModeRefused): a batch, T > 0, a target split over devices, a
proposer that brings its own target forward (ProPD's pruning changes the width inside the forward), and with
`run.graph_compile` a proposer that reads chosen layers' input states (EAGLE-3: forward hooks, registered inside the
forward, which a whole-graph trace cannot register).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch.cuda import CUDAGraph

from bench.core.capture import EagerReplay, recorded
from bench.core.engine import Engine, Row
from bench.core.forward import ForwardOutput, TargetForward, cache_kw, full_forward
from bench.core.proposer import Draft, Proposer, layers_of, wants_hidden
from bench.core.static_kv import StaticKV
from bench.core.timing import Timer
from bench.core.tree import Tree, chain
from bench.core.verify import greedy_accept

# A static cache sized to a run (run.graph_capacity=auto) leaves room past its longest prompt and output for the widest
# bucket, whatever the method's draft: AR and the methods over it on one dataset get the same cache.
DRAFT_ROOM = 128


def sized_capacity(tokens: int) -> int:
    """The static cache's positions for a run whose longest prompt and output take `tokens`: plus DRAFT_ROOM, rounded
    up to 64. Every forward attends over the whole cache, so it is sized to the run as transformers' static cache
    (its prompt + max_new_tokens) and gpt-fast's (max_seq_length) are, not to a fixed maximum."""
    return -(-(tokens + DRAFT_ROOM) // 64) * 64


class GraphModeRefused(ValueError):
    """A setting graph mode cannot run; its message is the one line the user sees."""


def bucket_width(n: int, widest: int | None = None) -> int:
    """The verification width a draft of n slots (root included) runs at: the next power of two, or `widest` (the
    most slots the proposer's step can verify: its max_draft_tokens + 1) where that is narrower and holds n. So a
    static tree runs at its own width, a 64-node draft tree (65 slots) at 65, not 128, PLD's 9-11 at 11, and no
    proposer has more buckets than the powers of two would give it."""
    power = 1 << (n - 1).bit_length()
    return widest if widest is not None and n <= widest < power else power


@dataclass
class Bucket:
    """One verification width's static inputs and, once captured, its graph and the output it writes."""

    ids: torch.Tensor  # [1, w]
    positions: torch.Tensor  # [1, w]
    mask: torch.Tensor  # [1, 1, w, capacity]
    graph: CUDAGraph | EagerReplay | None = None
    out: ForwardOutput | None = None


@dataclass
class StepGraph:
    """One proposer's whole step (draft, forward, verification, commit, KV compaction, update) over static buffers:
    `root` [1] and `remaining` [] in, `stats` [4 + D + 1] out (tokens committed, hit EOS, path length, best slot,
    the committed tokens padded)."""

    bucket: Bucket
    root: torch.Tensor
    remaining: torch.Tensor
    stats: torch.Tensor
    padded: tuple[torch.Tensor, torch.Tensor]  # the tree's mask bias and depths: the graph reads them
    graph: CUDAGraph | EagerReplay | None = None
    hidden: torch.Tensor | None = None  # [H] for a proposer that wants_hidden: what its draft reads, rewritten by the step


class GraphEngine(Engine):
    def __init__(self, model, eos_token_ids: list[int], max_context: int, capacity: int, temperature: float = 0.0,
                 device: torch.device | None = None, capture: bool | None = None, compile_with: dict | None = None):
        if temperature != 0:
            raise GraphModeRefused(f"run.graphs=true decodes greedily only (its step captures greedy acceptance; a "
                                   f"tree with draft distributions is walked on the host); got run.temperature="
                                   f"{temperature}")
        if getattr(model, "hf_device_map", None):
            raise GraphModeRefused("run.graphs=true needs the target on one device (a graph cannot span a device "
                                   "map); set model.device_map=null")
        super().__init__(model, eos_token_ids, max_context, 0.0, full_forward, device)
        capacity = -(-min(int(capacity), max_context) // 8) * 8  # rows 8-aligned: sdpa takes the mask as it is
        self.kv = StaticKV(model.config, capacity, self.dtype, self.device)
        self.capture = self.device.type == "cuda" if capture is None else bool(capture)
        self.buckets: dict[tuple, Bucket] = {}
        self.pool = None  # one CUDA memory pool shared by every bucket's graph
        self.captures = 0  # graphs recorded so far (a capture waits for the device: a timed or counted run has none)
        self.low = torch.finfo(self.dtype).min
        self._bias_of: tuple[Tree | None, int, torch.Tensor | None, torch.Tensor | None] = (None, 0, None, None)
        self.steps: dict[int, tuple[Proposer, StepGraph]] = {}  # per proposer: its whole-step graph
        # the bucket forward that is captured: eager, or compiled (torch.compile's kwargs: mode, or a backend)
        self.compiled = torch.compile(self.forward_eager, fullgraph=True, **compile_with) if compile_with else None
        # the cache argument's name looked up now: a trace that fills CACHE_NAMES guards on it, and the next call,
        # finding it filled, compiles again (capture_buckets traces before any eager forward has looked it up)
        cache_kw(model, None)

    def target(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, hidden: bool = False,
               layers: dict | None = None) -> ForwardOutput:
        """The bucket forward a graph captures: the compiled one, or the eager one. (A method, not an attribute bound
        to this engine: that was a reference cycle, and an engine that nothing uses was freed only by a collection.)"""
        return (self.compiled or self.forward_eager)(ids, positions, mask, hidden, layers)

    def forward_eager(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, hidden: bool = False,
                      layers: dict | None = None) -> ForwardOutput:
        """The target's forward over a bucket's inputs, writing their keys and values into the static cache."""
        return full_forward(self.model, ids, cache=self.kv.cache, position_ids=positions, attention_mask=mask,
                            output_hidden=hidden, **(layers or {}))

    def generate_batch(self, proposers: list[Proposer], prompts: list[list[int]], max_new_tokens: int, timer: Timer,
                       generators: list[torch.Generator]):
        if len(prompts) != 1:
            raise GraphModeRefused(f"run.graphs=true decodes one sequence at a time; got a batch of {len(prompts)}")
        if why := self.refusal(proposers[0]):
            raise GraphModeRefused(why)
        room = len(prompts[0]) + max_new_tokens + max(proposers[0].max_draft_tokens, 16)
        if room > self.kv.capacity:
            raise GraphModeRefused(f"graph mode's static KV cache holds {self.kv.capacity} positions "
                                   f"(run.graph_capacity); a prompt of {len(prompts[0])} tokens with {max_new_tokens} "
                                   f"new and its draft needs {room}")
        if self.capture and not self.whole(proposers[0]):
            self.capture_buckets(proposers[0])
        return super().generate_batch(proposers, prompts, max_new_tokens, timer, generators)

    @torch.inference_mode()  # (as the decode loop that replays them)
    def capture_buckets(self, proposer: Proposer) -> None:
        """Every verification width `proposer` can reach (its max_draft_tokens + 1 slots at most) captured now, at its
        first generation (a run's warm-up), as vLLM captures its sizes before serving: a capture synchronizes the
        device (and a compiled forward may compile for it), which a bucket first met in a timed prompt would add to
        that prompt's time. Each is recorded over a chain's inputs at column 0, before the prompt's prefill, which
        overwrites those columns or leaves them past its length, where the mask hides them."""
        widest = proposer.max_draft_tokens + 1
        hidden, layers = wants_hidden(proposer), layers_of(proposer)
        buckets = [self.bucket(w, hidden, layers) for w in sorted({bucket_width(n, widest) for n in range(1, widest + 1)})]
        missing = [b for b in buckets if b.graph is None]
        if not missing:  # (every generation after its first: nothing sent to the device)
            return
        self.kv.length.zero_()
        root = torch.zeros(1, dtype=torch.long, device=self.device)
        for bucket in missing:
            self.fill(bucket, root, root.new_zeros(bucket.ids.shape[1] - 1), chain(bucket.ids.shape[1] - 1))
            self.capture_bucket(bucket, hidden, layers)

    def refusal(self, proposer: Proposer) -> str | None:
        """Why this engine cannot run `proposer` (None: it can), which a config check cannot know before the
        method's parts load: a forward of its own, or with a compiled forward, chosen layers' input states."""
        name = type(proposer).__name__
        if proposer.target_forward is not None:
            return (f"run.graphs=true runs the whole target forward; method '{name}' brings its own (its width "
                    f"changes inside it)")
        if self.compiled and proposer.wants_features and proposer.feature_layers:
            return (f"run.graph_compile cannot run method '{name}': it reads the input states of the target's layers "
                    f"{list(proposer.feature_layers)} through forward hooks, which torch.compile's whole-graph trace "
                    f"cannot register; set run.graph_compile=null")
        return None

    def new_cache(self, positions: int):
        self.kv.length.zero_()  # the same buffer for every prompt: the mask hides what the last one left
        return self.kv.cache

    def _prefill_forward(self, rows: list[Row], cache, forward: TargetForward, hidden: bool, layers: dict):
        (row,) = rows
        n = row.n_prompt
        self.kv.write_prefix(n)
        mask = self.kv.causal_mask(n, self.dtype, self.low)[None, None]
        out = forward(self.model, row.seq[None, :n], cache=cache, position_ids=self.kv.columns[None, :n],
                      attention_mask=mask, logits_to_keep=1, output_hidden=hidden, **layers)
        self.kv.length.fill_(n)
        return out, out.logits[:, -1], [n - 1]

    def whole(self, proposer: Proposer) -> bool:
        """Whether the proposer's whole step is one graph: a static-step proposer that wants at most the final
        hidden state (the step writes it into its static buffer)."""
        return proposer.static_step and not proposer.wants_features

    def _hand_over(self, row: Row, out, b: int, last, positions, hidden: bool) -> None:
        """A whole-step proposer's hidden state after the prefill goes into its step graph's static buffer, the
        address the graph reads (after each step the graph itself writes it); others as the eager engine."""
        if hidden and self.whole(row.proposer):
            step = self.step_graph(row.proposer)
            step.hidden.copy_(out.hidden[b, last])
            row.proposer.observe_hidden(step.hidden)
            return
        super()._hand_over(row, out, b, last, positions, hidden)

    def _propose(self, rows: list[Row]) -> list[Draft | None]:
        return [None] if self.whole(rows[0].proposer) else super()._propose(rows)

    def _step(self, rows: list[Row], drafts: list[Draft], cache, max_new_tokens: int, timer: Timer,
              forward: TargetForward) -> list[Row]:
        if drafts[0] is None:
            return self._whole_step(rows[0], max_new_tokens, timer)
        (row,), (draft,) = rows, drafts
        tree = draft.tree
        n = tree.size + 1
        width = bucket_width(n, row.proposer.max_draft_tokens + 1)
        if row.prefix + width > self.kv.capacity:
            raise GraphModeRefused(f"graph mode's static KV cache of {self.kv.capacity} positions is full "
                                   f"(run.graph_capacity)")
        hidden = self._wants_hidden(rows)
        layers = self._layers(rows)
        bucket = self.bucket(width, hidden, layers)
        self.fill(bucket, row.seq[row.length - 1 : row.length], draft.tokens, tree)
        timer.lap("preprocess")
        out = self.forward_bucket(bucket, hidden, layers)
        timer.lap("target_forward")
        steps = self._verify(rows, drafts, bucket.ids, out, timer)
        self._commit(rows, drafts, steps, max_new_tokens)  # the step's one read
        # verify ends at the read (the eager engine's ends before the commit): on CUDA the acceptance and the commit's
        # launches queue behind the replay until the read, and the step model prices this phase as hidden behind it
        timer.lap("verify")
        step = steps[0]
        if not row.done:
            if tree.is_chain or step.leading:
                self.kv.grow_length(step.acc.accept_len)
            else:
                self.kv.keep_path(tree.on(self.device).path_slots.index_select(0, step.acc.best[:1])[0],
                                  step.acc.accept_len)
        self._feed_back(rows, steps, out, hidden)
        return [] if row.done else rows

    def _whole_step(self, row: Row, max_new_tokens: int, timer: Timer) -> list[Row]:
        """The proposer's step graph replayed (run eagerly on a CPU), then its one read: what the host's bookkeeping
        needs (the eager engine's `_commit`, from the stats the graph wrote)."""
        tree = row.proposer.tree
        if row.prefix + tree.size + 1 > self.kv.capacity:
            raise GraphModeRefused(f"graph mode's static KV cache of {self.kv.capacity} positions is full "
                                   f"(run.graph_capacity)")
        step = self.step_graph(row.proposer)
        step.root.copy_(row.seq[row.length - 1 : row.length])
        step.remaining.fill_(row.n_prompt + max_new_tokens - row.length)
        timer.lap("preprocess")
        if step.graph is not None:
            step.graph.replay()
        else:
            self.step_body(row.proposer, step)
        timer.lap("step_graph")
        n_new, hit_eos, _, _, *values = step.stats.tolist()  # the step's one read
        row.seq[row.length : row.length + n_new] = step.stats[4 : 4 + n_new]
        row.host[row.length : row.length + n_new] = torch.tensor(values[:n_new])
        row.length += n_new
        row.accept_lengths.append(n_new)
        row.draft_nodes.append(tree.size)
        row.verified_nodes.append(tree.size)
        row.done = bool(hit_eos) or row.length - row.n_prompt >= max_new_tokens
        return [] if row.done else [row]

    def step_graph(self, proposer: Proposer) -> StepGraph:
        if id(proposer) not in self.steps:
            tree = proposer.tree
            width = tree.size + 1
            mask = torch.full((1, 1, width, self.kv.capacity), self.low, dtype=self.dtype, device=self.device)
            long = {"dtype": torch.long, "device": self.device}
            bias, depth = self.padded(tree, width)
            step = StepGraph(Bucket(torch.zeros(1, width, **long), torch.zeros(1, width, **long), mask),
                             torch.zeros(1, **long), torch.zeros((), **long), torch.zeros(5 + tree.max_depth, **long),
                             (bias.clone(), depth.clone()))
            if proposer.wants_hidden:  # the draft reads this buffer from now on: the capture records its address
                step.hidden = torch.zeros(self.model.config.hidden_size, dtype=self.dtype, device=self.device)
                proposer.observe_hidden(step.hidden)
            if self.capture:  # its warm-ups run real steps: they leave the state as the replay would find it
                saved = (self.kv.length.clone(), self.kv.buf.clone(), copy.deepcopy(proposer.state_dict()),
                         None if step.hidden is None else step.hidden.clone())
                step.graph = self._captured(lambda: self.step_body(proposer, step), lambda: self._restore(
                    proposer, step, *saved))[0]
            self.steps[id(proposer)] = (proposer, step)  # (the proposer kept: its id stays its own)
        return self.steps[id(proposer)][1]

    def _restore(self, proposer: Proposer, step: StepGraph, length, buf, state, hidden) -> None:
        self.kv.length.copy_(length)
        self.kv.buf.copy_(buf)
        proposer.load_state_dict(state)
        if hidden is not None:
            step.hidden.copy_(hidden)

    def step_body(self, proposer: Proposer, step: StepGraph) -> None:
        """One whole step on the device at fixed shapes: what the eager engine's step does, with the commit's limits
        from device tensors (`remaining`) and every outcome written to `stats`."""
        tree, bucket = proposer.tree, step.bucket
        self.fill(bucket, step.root, proposer.draft_from(step.root), tree, step.padded)
        # `layers` as forward_bucket passes it: a compiled target guards on its type, and None here recompiled it
        out = self.target(bucket.ids, bucket.positions, bucket.mask, step.hidden is not None, {})
        logits = out.logits[0]
        ids = bucket.ids[0]
        target = logits.argmax(-1)
        acc = greedy_accept(tree, ids[None], target[None])
        slots = tree.on(self.device).path_slots.index_select(0, acc.best)[0]
        new = torch.cat([ids[slots[1:]], ids[:1]])  # accepted drafts, then room for the bonus
        new.scatter_(0, acc.accept_len - 1, acc.bonus)
        limit = torch.minimum(acc.accept_len, step.remaining)
        at = torch.arange(len(new), device=self.device)
        # (a comparison, not torch.isin: with many EOS ids isin sorts, which a capture cannot hold)
        eos = torch.where((new[:, None] == self.eos).any(-1) & (at < limit), at, len(new)).min()[None]
        step.stats.copy_(torch.cat([torch.minimum(limit, eos + 1), eos < limit, acc.accept_len, acc.best, new]))
        self.kv.keep_path(slots, acc.accept_len)  # a leading path moves onto itself
        proposer.update(ids, logits, target, acc)
        if step.hidden is not None:  # the deepest accepted slot's: the next step drafts from it
            step.hidden.copy_(out.hidden[0].index_select(0, acc.best[:1])[0])

    def bucket(self, width: int, hidden: bool, layers: dict) -> Bucket:
        key = (width, hidden, tuple(layers.get("feature_layers", ())))
        if key not in self.buckets:
            mask = torch.full((1, 1, width, self.kv.capacity), self.low, dtype=self.dtype, device=self.device)
            self.buckets[key] = Bucket(torch.zeros(1, width, dtype=torch.long, device=self.device),
                                       torch.zeros(1, width, dtype=torch.long, device=self.device), mask)
        return self.buckets[key]

    def padded(self, tree: Tree, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(bias [w, w], depth [w]) of `tree` padded to `width`: padding slots see themselves, at the root's depth.
        The last tree's are kept: a static tree's are built once."""
        last, w, bias, depth = self._bias_of
        if last is not tree or w != width:
            n = tree.size + 1
            bias = torch.full((width, width), self.low, dtype=self.dtype, device=self.device)
            bias[:n, :n] = tree.attention_bias(self.dtype, self.device)
            bias.diagonal()[n:] = 0
            depth = torch.zeros(width, dtype=torch.long, device=self.device)
            depth[:n] = tree.on(self.device).depth
            self._bias_of = (tree, width, bias, depth)
        return bias, depth

    def fill(self, bucket: Bucket, root: torch.Tensor, tokens: torch.Tensor, tree: Tree, padded=None) -> None:
        """The bucket's inputs for a verification of `tree` (root [1], draft tokens [N]) written after the cached
        prefix, on the device from the cached length (no host value). `padded`: the tree's (bias, depth) at the
        bucket's width, when the caller holds them (a graph that reads them must keep them alive)."""
        n, width = tree.size + 1, bucket.ids.shape[1]
        bias, depth = padded or self.padded(tree, width)
        bucket.ids[0, :1] = root
        bucket.ids[0, 1:n] = tokens  # a proposer that drafts on the host pays its copy here
        bucket.ids[0, n:] = 0
        torch.add(depth, self.kv.length, out=bucket.positions[0])
        bucket.mask[0, 0] = self.kv.mask(bias, self.low)
        self.kv.write_after_prefix(width)

    def forward_bucket(self, bucket: Bucket, hidden: bool, layers: dict) -> ForwardOutput:
        if not self.capture:
            return self.target(bucket.ids, bucket.positions, bucket.mask, hidden, layers)
        if bucket.graph is None:  # a width capture_buckets did not foresee (or a caller without a generation)
            self.capture_bucket(bucket, hidden, layers)
        bucket.graph.replay()
        return bucket.out

    def capture_bucket(self, bucket: Bucket, hidden: bool, layers: dict) -> None:
        """The target forward over `bucket`'s static inputs recorded (their current values: a real step's or
        capture_buckets' chain), its graph and static outputs kept on the bucket."""
        bucket.graph, bucket.out = self._captured(
            lambda: self.target(bucket.ids, bucket.positions, bucket.mask, hidden, layers))

    def _captured(self, run, reset=lambda: None) -> tuple[CUDAGraph | EagerReplay, ForwardOutput]:
        """`run` recorded (bench.core.capture.recorded) into the graphs' one memory pool."""
        graph, out, self.pool = recorded(run, self.device, self.pool, reset)
        self.captures += 1
        return graph, out
