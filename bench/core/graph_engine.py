"""The engine's graph mode (`run.graphs=true`): the same decode loop over static shapes, so that on CUDA each
verification's target forward is one replayed CUDA graph instead of ~1000 kernel launches from Python.

What changes against the eager engine (bench.core.engine), batch 1 and temperature 0 only:
- the KV cache is one StaticKV of fixed capacity per engine (bench.core.static_kv), reused by every prompt; its
  length lives on the device;
- a verification's width n (root + draft) is padded to a bucket: a static tree's own width, else the next power of
  two; padding slots see only themselves and are never accepted; the mask spans the whole static cache;
- per bucket, the inputs (ids, positions, mask, the KV columns to write) are static buffers filled on the device, and
  on CUDA the forward over them is captured once in a torch.cuda.CUDAGraph (the eager forward, recorded: no
  compiler needed) and replayed; the prefill stays eager;
- acceptance and the KV compaction run on the device at a fixed width; the host reads each step's outcome once
  (the eager engine's `_commit`).
On a CPU the same static-shape code runs eagerly (nothing to capture), which is how the suite checks it.
What it cannot run is refused in one line (GraphModeRefused): a batch, T > 0, a target split over devices, a
proposer that brings its own target forward (ProPD's pruning changes the width inside the forward).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.core.engine import Engine, Row
from bench.core.forward import ForwardOutput, TargetForward, full_forward
from bench.core.proposer import Draft, Proposer
from bench.core.static_kv import StaticKV
from bench.core.timing import Timer
from bench.core.tree import Tree


class GraphModeRefused(ValueError):
    """A setting graph mode cannot run; its message is the one line the user sees."""


def bucket_width(n: int, static: int | None = None) -> int:
    """The verification width a draft of n slots (root included) runs at: a static tree's own width when it is
    that tree's, else the next power of two."""
    if static is not None and n == static:
        return n
    return 1 << (n - 1).bit_length()


@dataclass
class Bucket:
    """One verification width's static inputs and, once captured, its graph and the output it writes."""

    ids: torch.Tensor  # [1, w]
    positions: torch.Tensor  # [1, w]
    mask: torch.Tensor  # [1, 1, w, capacity]
    graph: torch.cuda.CUDAGraph | None = None
    out: ForwardOutput | None = None


class GraphEngine(Engine):
    def __init__(self, model, eos_token_ids: list[int], max_context: int, capacity: int, temperature: float = 0.0,
                 device: torch.device | None = None, capture: bool | None = None):
        if temperature != 0:
            raise GraphModeRefused(f"run.graphs=true decodes greedily only (the stochastic verifier walks the tree "
                                   f"on the host); got run.temperature={temperature}")
        if getattr(model, "hf_device_map", None):
            raise GraphModeRefused("run.graphs=true needs the target on one device (a graph cannot span a device "
                                   "map); set model.device_map=null")
        super().__init__(model, eos_token_ids, max_context, 0.0, full_forward, device)
        capacity = -(-min(int(capacity), max_context) // 8) * 8  # rows 8-aligned: sdpa takes the mask as it is
        self.kv = StaticKV(model.config, capacity, self.dtype, self.device)
        self.capture = self.device.type == "cuda" if capture is None else bool(capture)
        self.buckets: dict[tuple, Bucket] = {}
        self.pool = None  # one CUDA memory pool shared by every bucket's graph
        self.low = torch.finfo(self.dtype).min
        self._bias_of: tuple[Tree | None, int, torch.Tensor | None, torch.Tensor | None] = (None, 0, None, None)

    def generate_batch(self, proposers: list[Proposer], prompts: list[list[int]], max_new_tokens: int, timer: Timer,
                       generators: list[torch.Generator]):
        if len(prompts) != 1:
            raise GraphModeRefused(f"run.graphs=true decodes one sequence at a time; got a batch of {len(prompts)}")
        if proposers[0].target_forward is not None:
            raise GraphModeRefused(f"run.graphs=true runs the whole target forward; method "
                                   f"'{type(proposers[0]).__name__}' brings its own (its width changes inside it)")
        room = len(prompts[0]) + max_new_tokens + max(proposers[0].max_draft_tokens, 16)
        if room > self.kv.capacity:
            raise GraphModeRefused(f"graph mode's static KV cache holds {self.kv.capacity} positions "
                                   f"(run.graph_capacity); a prompt of {len(prompts[0])} tokens with {max_new_tokens} "
                                   f"new and its draft needs {room}")
        return super().generate_batch(proposers, prompts, max_new_tokens, timer, generators)

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

    def _step(self, rows: list[Row], drafts: list[Draft], cache, max_new_tokens: int, timer: Timer,
              forward: TargetForward) -> list[Row]:
        (row,), (draft,) = rows, drafts
        tree = draft.tree
        n = tree.size + 1
        static = getattr(row.proposer, "tree", None)
        width = bucket_width(n, static.size + 1 if isinstance(static, Tree) else None)
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
        timer.lap("verify")
        self._commit(rows, drafts, steps, max_new_tokens)  # the step's one read
        step = steps[0]
        if not row.done:
            if tree.is_chain or step.leading:
                self.kv.grow_length(step.acc.accept_len)
            else:
                self.kv.keep_path(tree.on(self.device).path_slots.index_select(0, step.acc.best[:1])[0],
                                  step.acc.accept_len)
        self._feed_back(rows, steps, out, hidden)
        return [] if row.done else rows

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

    def fill(self, bucket: Bucket, root: torch.Tensor, tokens: torch.Tensor, tree: Tree) -> None:
        """The bucket's inputs for a verification of `tree` (root [1], draft tokens [N]) written after the cached
        prefix, on the device from the cached length (no host value)."""
        n, width = tree.size + 1, bucket.ids.shape[1]
        bias, depth = self.padded(tree, width)
        bucket.ids[0, :1] = root
        bucket.ids[0, 1:n] = tokens  # a proposer that drafts on the host pays its copy here
        bucket.ids[0, n:] = 0
        torch.add(depth, self.kv.length, out=bucket.positions[0])
        bucket.mask[0, 0] = self.kv.mask(bias, self.low)
        self.kv.write_after_prefix(width)

    def forward_bucket(self, bucket: Bucket, hidden: bool, layers: dict) -> ForwardOutput:
        def run() -> ForwardOutput:
            return full_forward(self.model, bucket.ids, cache=self.kv.cache, position_ids=bucket.positions,
                                attention_mask=bucket.mask, output_hidden=hidden, **layers)

        if not self.capture:
            return run()
        if bucket.graph is None:
            bucket.graph, bucket.out = self._captured(run)
        bucket.graph.replay()
        return bucket.out

    def _captured(self, run) -> tuple[torch.cuda.CUDAGraph, ForwardOutput]:
        """`run` recorded as a CUDA graph: a warm-up on a side stream (lazy allocations, cuBLAS handles), then the
        capture. The warm-ups write this step's keys at this step's columns, as the replay that follows does."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                run()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = run()
        self.pool = graph.pool()
        return graph, out
