"""The one decode loop shared by all proposer methods, for one sequence or a batch of them.

Per step: each row's proposer drafts a tree rooted at the row's last committed token; one target forward runs
over every row's root + draft, padded to the largest tree, with tree attention (a 4D additive mask; position
ids = the row's prefix length + depth); at temperature 0 the verifier keeps the longest path matching the
target's greedy choices, above 0 the stochastic verifier (bench.core.sampling) walks the tree with the
proposer's rule and the row's own generator and samples the bonus token; each row's KV is compacted to its
prefix + accepted path (bench.core.kv); the accepted drafts plus the bonus token are committed. A row stops at
EOS or max_new_tokens, never past it, and leaves the batch for the following steps. The prefill's first token
counts as one step of one token, so sum(accept_lengths) equals the new tokens of every method (AR's MAT is 1.00).

Padding: prompts are right-padded for the prefill (a 2D mask); afterwards row b's cache holds its valid
prefix in columns [0, prefix_b) and stale columns up to the cache length, hidden by the mask (see
bench.core.kv for why this beats re-aligning the batch every step). At batch 1 there is no padding and the
forward is the plain one: no mask without a draft, prefix + tree bias otherwise (a chain's too: see _mask).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.nn.functional import pad

from bench.core.forward import TargetForward, aligned_mask, full_forward, tree_mask
from bench.core.kv import keep_accepted, keep_rows, new_cache
from bench.core.proposer import Acceptance, Draft, Generation, Proposer, StepContext, layers_of, wants_hidden
from bench.core.sampling import sample, stochastic_verify, target_probs
from bench.core.timing import Timer
from bench.core.tree import Tree
from bench.core.verify import greedy_accept


def one_tree(drafts: list[Draft]) -> bool:
    """Whether every row drafts the same tree (the object: a static tree's forks share it, `chain(n)` is cached)."""
    return len({id(d.tree) for d in drafts}) == 1


@dataclass
class Group:
    """Rows verified together on the device: all of a batch's rows where they share one tree at T = 0 (AR, a static
    tree: one argmax, one acceptance and one commit for the batch, not one a row), else each row alone."""

    rows: list[int]  # consecutive row indices
    tree: Tree
    tokens: torch.Tensor  # [G, N+1] the tree's inputs (slot 0 = root)
    target: torch.Tensor  # [G, N+1] the target's argmax at each slot
    acc: Acceptance  # [G] each
    verified: torch.Tensor  # [G] nodes the forward ran through every layer (root excluded)


@dataclass
class RowStep:
    """One row's verification within a step: its group's, viewed at the row (`_verify`), then what `_commit` reads
    back (the accepted path's slots, its best slot) for the cache compaction and the proposer's update."""

    group: Group
    acc: Acceptance
    logits: torch.Tensor  # [N+1, V] the target's logits at the row's tree slots
    tokens: torch.Tensor  # [N+1] the tree's inputs (slot 0 = root)
    target: torch.Tensor  # [N+1] the target's argmax at each slot
    slots: torch.Tensor | None = None  # root..best slot, padded
    new: torch.Tensor | None = None  # accepted drafts + bonus, padded
    path: torch.Tensor | None = None  # the accepted path's slots, root first
    best: int = 0
    leading: bool = True  # the path is slots 0..best


@dataclass
class Row:
    """One sequence of the batch: its committed tokens seq[:length] (and their host copy, host[:length], filled by
    the step's one read); the KV cache holds seq[:length - 1]."""

    proposer: Proposer
    seq: torch.Tensor
    host: torch.Tensor
    n_prompt: int
    length: int
    generator: torch.Generator
    accept_lengths: list[int] = field(default_factory=list)
    draft_nodes: list[int] = field(default_factory=list)  # per verification: nodes drafted (root excluded)
    verified_nodes: list[int] = field(default_factory=list)  # of which the forward ran through every layer
    done: bool = False
    elapsed: float | None = None
    targets: list[int] = field(default_factory=list)  # the last step's target choices, read for a host proposer

    @property
    def prefix(self) -> int:
        return self.length - 1


class Engine:
    def __init__(self, model, eos_token_ids: list[int], max_context: int, temperature: float = 0.0,
                 forward: TargetForward = full_forward, device: torch.device | None = None):
        self.model = model
        self.forward = forward  # the seam: every target forward of the loop goes through it
        # Where inputs go: the model's device, or for a model split over devices the first one (ModelBundle.device)
        self.device = torch.device(device) if device is not None else model.device
        self.eos_ids = frozenset(eos_token_ids)  # the host's copy: reading the device's would wait
        self.eos = torch.tensor(sorted(self.eos_ids), dtype=torch.long, device=self.device)
        self.max_context = max_context
        self.dtype = model.dtype
        if temperature < 0:
            raise ValueError("temperature must be >= 0")
        self.temperature = float(temperature)
        # Batch-1 sampling's generator (target and proposer), reseeded by the runner per prompt-turn so an output does
        # not depend on which prompts ran before it; a batch passes one generator per row instead.
        self.generator = torch.Generator(device=self.device)

    def reseed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def _pick(self, logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """The next token from one row of logits: argmax at temperature 0, else a sample."""
        if self.temperature == 0:
            return logits.argmax()
        return torch.tensor(sample(target_probs(logits, self.temperature), generator), device=self.device)

    def generate(self, proposer: Proposer, prompt_ids: list[int], max_new_tokens: int, timer: Timer) -> Generation:
        return self.generate_batch([proposer], [prompt_ids], max_new_tokens, timer, [self.generator])[0]

    @torch.inference_mode()
    def generate_batch(self, proposers: list[Proposer], prompts: list[list[int]], max_new_tokens: int,
                       timer: Timer, generators: list[torch.Generator]) -> list[Generation]:
        """Decode prompts[b] with proposers[b] (distinct objects: see Proposer.fork) and generators[b]."""
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        longest = max(len(p) for p in prompts)
        if longest + 1 > self.max_context:
            raise RuntimeError(f"prompt of {longest} tokens exceeds the model context ({self.max_context} tokens)")
        forward = proposers[0].target_forward or self.forward  # one forward for the whole batch
        timer.start()  # the buffers and cache are the run's cost too (HF generate's wall time counts its own)
        rows = []
        for proposer, prompt, gen in zip(proposers, prompts, generators, strict=True):
            host = torch.zeros(len(prompt) + max_new_tokens, dtype=torch.long)
            host[: len(prompt)] = torch.tensor(prompt, dtype=torch.long)
            rows.append(Row(proposer, host.to(self.device), host, len(prompt), len(prompt), gen))
        cache = self.new_cache(longest + max_new_tokens + 64)  # + room for one draft tree
        occupancy: list[int] = []
        timer.lap("preprocess")
        for row, prompt in zip(rows, prompts):
            row.proposer.bind(StepContext(self.temperature, row.generator, timer, row.seq))
            row.proposer.start(prompt)
        timer.lap("draft")
        self._prefill(rows, cache, max_new_tokens, timer, forward)
        occupancy.append(len(rows))
        self._finish_rows(rows, timer)
        timer.lap("update")

        alive = [r for r in rows if not r.done]
        while alive:
            drafts = self._propose(alive)
            timer.lap("draft")
            alive = self._step(alive, drafts, cache, max_new_tokens, timer, forward)
            occupancy.append(len(drafts))
            self._finish_rows(rows, timer)
            timer.lap("update")

        phases = timer.result()
        return [Generation(r.host[r.n_prompt : r.length].tolist(), r.accept_lengths, phases, r.elapsed, occupancy,
                           r.draft_nodes, r.verified_nodes, r.proposer.step_counters()) for r in rows]

    def _propose(self, rows: list[Row]) -> list[Draft | None]:
        """Each row's draft for the next step (None: the step drafts itself, graph mode's whole-step graph)."""
        first = rows[0].proposer  # the rows are forks of one proposer: the first drafts for all
        seqs = [r.host if first.host_tokens else r.seq for r in rows]
        if len(rows) == 1:
            return [first.propose(seqs[0], rows[0].length)]
        return first.propose_batch([r.proposer for r in rows], seqs, [r.length for r in rows])

    def new_cache(self, positions: int):
        """A cache for one generation; one buffer for all layers unless the model is split over devices."""
        return new_cache(self.model.config, positions, shared=not getattr(self.model, "hf_device_map", None))

    def _finish_rows(self, rows: list[Row], timer: Timer) -> None:
        """Stamp the latency of rows that finished this step (timed time so far)."""
        finished = [r for r in rows if r.done and r.elapsed is None]
        if finished:
            elapsed = sum(timer.result().values())
            for r in finished:
                r.elapsed = elapsed

    def _wants_hidden(self, rows: list[Row]) -> bool:
        return any(wants_hidden(r.proposer) for r in rows)

    def _layers(self, rows: list[Row]) -> dict:
        return layers_of(rows[0].proposer)  # (rows are forks of one proposer: the first row's decides)

    def _hand_over(self, row: Row, out, b: int, last, positions, hidden: bool) -> None:
        """The target's states a row's proposer wants: the final hidden state at `last` (observe_hidden), and at
        `positions` its features (observe_features): the chosen layers' states, or else the final hidden state."""
        if hidden:
            row.proposer.observe_hidden(out.hidden[b, last])
        if row.proposer.wants_features:
            features = out.layer_states if row.proposer.feature_layers else out.hidden
            if features is None:
                raise RuntimeError(f"the target forward handed over no layer states {row.proposer.feature_layers}")
            row.proposer.observe_features(features[b, positions])

    def _prefill(self, rows: list[Row], cache, max_new_tokens: int, timer: Timer, forward: TargetForward) -> None:
        hidden = self._wants_hidden(rows)
        out, logits, at = self._prefill_forward(rows, cache, forward, hidden, self._layers(rows))
        roots = torch.stack([self._pick(logits[b], r.generator) for b, r in enumerate(rows)])
        values = roots.tolist()  # the prefill's one read: before its lap, so that unsynced (a lease's timed passes)
        timer.lap("prefill")  # the prefill's device time is its own, not the first decode step's
        for b, (r, root, value) in enumerate(zip(rows, roots, values)):
            r.seq[r.length], r.host[r.length] = root, value
            r.length += 1
            r.accept_lengths.append(1)
            r.done = value in self.eos_ids or max_new_tokens <= 1
            if not r.done:
                self._hand_over(r, out, b, at[b], slice(0, r.n_prompt), hidden)

    def _prefill_forward(self, rows: list[Row], cache, forward: TargetForward, hidden: bool, layers: dict):
        """The prompts' forward: (its output, the logits [B, V] at each row's last prompt token, those positions)."""
        lengths = [r.n_prompt for r in rows]
        if len(rows) == 1:
            out = forward(self.model, rows[0].seq[None, : lengths[0]], cache=cache, logits_to_keep=1,
                               output_hidden=hidden, **layers)
            logits, at = out.logits[:, -1], [lengths[0] - 1]
        else:  # right padding: every row's tokens start at column 0, so positions are the default ones
            ids = torch.zeros(len(rows), max(lengths), dtype=torch.long, device=self.device)
            mask = torch.zeros_like(ids)
            for b, r in enumerate(rows):
                ids[b, : r.n_prompt] = r.seq[: r.n_prompt]
                mask[b, : r.n_prompt] = 1
            last = sorted({n - 1 for n in lengths})  # logits only where some row's prompt ends
            keep = torch.tensor(last, device=self.device)
            out = forward(self.model, ids, cache=cache, attention_mask=mask, logits_to_keep=keep,
                               output_hidden=hidden, **layers)
            logits = torch.stack([out.logits[b, last.index(n - 1)] for b, n in enumerate(lengths)])
            at = [n - 1 for n in lengths]
        return out, logits, at

    def _mask(self, rows: list[Row], drafts: list[Draft], width: int, cached: int) -> torch.Tensor | None:
        """[B, 1, width, cached + width] additive mask: each row sees its own prefix and its tree's ancestors;
        padding slots see only themselves. None at batch 1 without a draft (one query sees the whole cache).

        A drafted chain at batch 1 gets one too, though the model's causal mask would do: transformers' is a bool
        mask whose rows are not MASK_ALIGN-aligned, which CUDA's memory-efficient sdpa converts and pads in every
        layer (~63 more launches a PLD step on the H100, docs/cost_model.md); this one is two (a fill, a cached
        chain's bias copied)."""
        if len(rows) == 1:
            tree = drafts[0].tree
            if tree.size == 0:
                return None
            return tree_mask([tree], rows[0].prefix, tree.size + 1, self.dtype, self.device)
        low = torch.finfo(self.dtype).min
        mask = aligned_mask((len(rows), 1, width, cached + width), low, self.dtype, self.device)
        # padding slots see themselves (masked_fill_: an index_put_ here waited for the device once a step on CUDA)
        mask[..., cached:].masked_fill_(torch.eye(width, dtype=torch.bool, device=self.device), 0.0)
        for b, (r, d) in enumerate(zip(rows, drafts)):
            n = d.tree.size + 1
            mask[b, 0, :n, : r.prefix] = 0.0
            mask[b, 0, :n, cached : cached + n] = d.tree.attention_bias(self.dtype, self.device)
        return mask

    def _step(self, rows: list[Row], drafts: list[Draft], cache, max_new_tokens: int, timer: Timer,
              forward: TargetForward) -> list[Row]:
        """One verification of every row; returns the rows still decoding (the cache keeps only those)."""
        cached = cache.get_seq_length()
        before = [r.prefix for r in rows]
        inputs, positions, mask = self._inputs(rows, drafts, cached)
        timer.lap("preprocess")
        hidden = self._wants_hidden(rows)
        out = forward(self.model, inputs, cache=cache, position_ids=positions, attention_mask=mask,
                      trees=[d.tree for d in drafts], output_hidden=hidden, **self._layers(rows))
        timer.lap("target_forward")
        steps = self._verify(rows, drafts, inputs, out, timer)
        timer.lap("verify")
        self._commit(rows, drafts, steps, max_new_tokens)
        alive = [b for b, r in enumerate(rows) if not r.done]
        if alive:  # compact: each row's cache keeps its prefix and accepted path; finished rows leave
            prefixes = keep_accepted(cache, before, [s.path for s in steps], cached, out.kv_columns,
                                     [s.leading for s in steps])
            if len(alive) < len(rows):
                keep_rows(cache, alive, prefixes)
        self._feed_back(rows, steps, out, hidden)
        return [rows[b] for b in alive]

    def _inputs(self, rows: list[Row], drafts: list[Draft], cached: int):
        """The forward's inputs: each row's root + draft tokens and their positions (prefix length + depth), padded
        to the largest tree, and the tree mask."""
        width = max(d.tree.size for d in drafts) + 1
        for r, d in zip(rows, drafts):
            if r.prefix + d.tree.size + 1 > self.max_context:
                raise RuntimeError(f"sequence would exceed the model context ({self.max_context} tokens)")
        if len(rows) > 1 and one_tree(drafts):
            return self._shared_inputs(rows, drafts, cached)
        inputs = torch.zeros(len(rows), width, dtype=torch.long, device=self.device)
        positions = torch.empty(len(rows), width, dtype=torch.long, device=self.device)
        for b, (r, d) in enumerate(zip(rows, drafts)):
            n = d.tree.size + 1
            inputs[b, 0] = r.seq[r.length - 1]
            inputs[b, 1:n] = d.tokens  # a proposer that drafts on the host pays its copy here
            positions[b] = r.prefix
            positions[b, :n] += d.tree.on(self.device).depth
        return inputs, positions, self._mask(rows, drafts, width, cached)

    def _shared_inputs(self, rows: list[Row], drafts: list[Draft], cached: int):
        """`_inputs` where every row drafts the same tree (AR, a static tree): the batch's at once, a few ops a
        step instead of a few a row (each a kernel launch on a GPU). No padding: the mask is each row's prefix, its
        stale columns hidden, and the tree's bias."""
        tree, n = drafts[0].tree, drafts[0].tree.size + 1
        inputs = torch.stack([r.seq[r.length - 1 : r.length] for r in rows])
        if n > 1:  # a proposer that drafts on the host pays its copy here
            inputs = torch.cat([inputs, torch.stack([d.tokens for d in drafts]).to(self.device)], 1)
        prefix = torch.empty(len(rows), 1, dtype=torch.long, device=self.device)
        for b, r in enumerate(rows):  # a fill a row: torch.tensor(prefixes) would copy from the host, a wait on CUDA
            prefix[b] = r.prefix
        mask = aligned_mask((len(rows), 1, n, cached + n), torch.finfo(self.dtype).min, self.dtype, self.device)
        mask[..., :cached].masked_fill_((torch.arange(cached, device=self.device) < prefix)[:, None, None], 0.0)
        mask[..., cached:] = tree.attention_bias(self.dtype, self.device)
        return inputs, prefix + tree.on(self.device).depth, mask

    def _groups(self, drafts: list[Draft], out) -> list[list[int]]:
        """The rows verified together (Group): all where they share one tree at T = 0 (slots a pruned forward
        dropped are each row's own non-candidates), else one a row (trees of different shapes; the stochastic walk,
        with each row's own generator)."""
        whole = (self.temperature == 0 and one_tree(drafts)
                 and len({d.candidates is None for d in drafts}) == 1)
        return [list(range(len(drafts)))] if whole else [[b] for b in range(len(drafts))]

    def _verify(self, rows: list[Row], drafts: list[Draft], inputs: torch.Tensor, out, timer: Timer) -> list[RowStep]:
        """Each row's acceptance, decided on the device: greedy at temperature 0, else the stochastic walk."""
        steps = []
        for group in self._groups(drafts, out):
            d, at = drafts[group[0]], slice(group[0], group[-1] + 1)  # consecutive rows: views, not copies
            tree, n = d.tree, d.tree.size + 1
            logits, tokens = out.logits[at, :n], inputs[at, :n]
            target = logits.argmax(-1)
            candidates = None  # [G, n], on the device for either verifier (the stochastic one indexes with them)
            if d.candidates is not None:
                mine = [drafts[b].candidates for b in group]
                candidates = (torch.stack(mine) if len(mine) > 1 else mine[0][None]).to(self.device)
            verified = inputs.new_full((len(group),), tree.size)
            if out.kept is not None:  # slots the forward dropped are never accepted
                kept = out.kept[at, :n].to(self.device)
                candidates = kept if candidates is None else candidates & kept
                verified = kept.sum(-1) - 1  # read with the step's counts, not on its own
            if self.temperature == 0:
                acc = greedy_accept(tree, tokens, target, candidates)
            else:
                p = target_probs(logits[0], self.temperature)
                timer.lap("sampling")
                acc = stochastic_verify(tree, tokens[0], p, d.probs, rows[group[0]].proposer.rule,
                                        rows[group[0]].generator, None if candidates is None else candidates[0])
            g = Group(group, tree, tokens, target, acc, verified)
            for i, b in enumerate(group):
                rows[b].draft_nodes.append(tree.size)
                one = acc if len(group) == 1 else Acceptance(*(t[i : i + 1] for t in (acc.best, acc.path,
                                                                                      acc.accept_len, acc.bonus)))
                steps.append(RowStep(g, one, logits[i], tokens[i], target[i]))
        return steps

    def _commit(self, rows: list[Row], drafts: list[Draft], steps: list[RowStep], max_new_tokens: int) -> None:
        """Commit each row's accepted drafts + bonus, cut at EOS and at its token limit: decided on the device a
        group at a time, then the step's one host read brings back what the loop's Python needs (bench.core.syncs
        counts them)."""
        groups = list({id(s.group): s.group for s in steps}.values())
        longest = max(len(g.tree.on(self.device).path_slots[0]) for g in groups)  # a row's most new tokens
        host_targets = any(r.proposer.host_tokens for r in rows)  # their update gets the target's choices too
        width = max(g.target.shape[1] for g in groups)
        stats = []
        for g in groups:
            acc = g.acc
            slots = g.tree.on(self.device).path_slots.index_select(0, acc.best)  # root..best, padded with the root
            new = torch.cat([g.tokens.gather(1, slots[:, 1:]), g.tokens[:, :1]], 1)  # accepted, then the bonus's room
            new.scatter_(1, acc.accept_len[:, None] - 1, acc.bonus[:, None])
            at = torch.arange(new.shape[1], device=self.device)
            # the first EOS among the accepted tokens; each row's token limit cuts them on the host, after the read
            eos = torch.where(torch.isin(new, self.eos) & (at < acc.accept_len[:, None]), at, new.shape[1]).amin(-1)
            stats.append(torch.cat([eos[:, None], acc.accept_len[:, None], acc.best[:, None], g.verified[:, None],
                                    pad(new, (0, longest - new.shape[1])),
                                    *([pad(g.target, (0, width - g.target.shape[1]))] * host_targets)], 1))
            for i, b in enumerate(g.rows):
                steps[b].slots, steps[b].new = slots[i], new[i]
        # [first EOS, path length, best slot, verified, new tokens..., (target...)] per row: the step's one read
        read = (stats[0] if len(stats) == 1 else torch.cat(stats)).tolist()
        for r, s, (eos, path_len, best, verified, *values) in zip(rows, steps, read):
            values, r.targets = values[:longest], values[longest:]
            limit = min(path_len, r.n_prompt + max_new_tokens - r.length)
            n_new = min(limit, eos + 1)
            r.verified_nodes.append(verified)
            s.best, s.path = best, s.slots[:path_len]
            s.leading = best == path_len - 1  # the path is slots 0..best: a chain's always is
            r.seq[r.length : r.length + n_new] = s.new[:n_new]
            r.host[r.length : r.length + n_new] = torch.tensor(values[:n_new])
            r.length += n_new
            r.accept_lengths.append(n_new)
            r.done = eos < limit or r.length - r.n_prompt >= max_new_tokens

    def _feed_back(self, rows: list[Row], steps: list[RowStep], out, hidden: bool) -> None:
        """What each proposer learns from the step: the verification, and the target's states if it wants them
        (only rows still decoding)."""
        for b, (r, s) in enumerate(zip(rows, steps)):
            target = torch.tensor(r.targets[: len(s.target)]) if r.proposer.host_tokens else s.target
            r.proposer.update(s.tokens, s.logits if r.proposer.wants_logits else None, target, s.acc)
            if not r.done:
                self._hand_over(r, out, b, s.best, s.path, hidden)
