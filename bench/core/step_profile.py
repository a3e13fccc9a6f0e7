"""Where a decode step's time goes on a device, from torch.profiler: per phase, the host's own time (unsynced) and
the part of it inside aten ops (the rest is Python), the kernels and copies it queued, its waits for the device, and
the device's time in the phase's kernels; and per phase, the aten ops that took the most host time, and the ops
that queued its copies and waits (the H100's profile had Token Recycling's forward queue 30 copies a step that AR's
did not, and nothing said which op).

bench.core.launches counts the aten ops a phase dispatches, on any device; a GPU can launch more (an op that runs
kernels of its own, such as sdpa padding a mask) and only its own profile says how long each launch and each wait
took there. On a CPU the profile has no device events: launches, copies, waits and device_ms are 0.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import Counter, defaultdict
from typing import NamedTuple

import torch
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from bench.core.timing import per_decode_step

MARK = "lap:"  # a zero-length range at each phase boundary: `lap:<phase>` ends that phase
BEGIN = "^"  # the mark of Timer.start: what precedes it is outside any generation
# The runtime calls that queue device work or wait for it, by a part of their name (cudaLaunchKernel,
# cudaLaunchKernelExC, cuLaunchKernel; cudaMemcpyAsync, cudaMemsetAsync; cudaStreamSynchronize, ...).
# (count, host ms inside the calls, parts of the name)
KINDS = (("launches", "launch_ms", ("LaunchKernel", "LaunchCooperativeKernel")),
         ("copies", "copy_ms", ("Memcpy", "Memset")), ("waits", "wait_ms", ("Synchronize",)))
# op_ms: host ms inside the aten ops the phase calls itself (host_ms - op_ms: its Python, the profiler's cost)
QUANTITIES = ("host_ms", "op_ms", "launches", "launch_ms", "copies", "copy_ms", "waits", "wait_ms", "device_ms")
OP = "op:"  # a phase's quantity `op:<aten op>`: host ms inside that op, called from the phase itself (not nested)
# a phase's quantity `copy:<op>` / `wait:<op>`: the copies (memcpy, memset) and waits queued inside that aten op, named
# "<the op the phase called> > <the innermost op>" (which of a forward's ops copies: sdpa's own mask, a cache write)
# (its key in step_profile's output: copy_ops, wait_ops)
BY_OP = {"copies": ("copy:", "copy_ops"), "waits": ("wait:", "wait_ops")}


class MarkTimer:
    """A Timer (bench.core.timing) that marks each phase boundary in the running profile and times nothing."""

    def start(self) -> None:
        self.lap(BEGIN)

    def lap(self, phase: str) -> None:
        with record_function(MARK + phase):
            pass

    def result(self) -> dict[str, float]:
        return {}


def kind_of(name: str) -> tuple[str, str] | None:
    """(count key, ms key) of a runtime call that queues or waits for device work; None for anything else."""
    return next(((count, ms) for count, ms, parts in KINDS if any(p in name for p in parts)), None)


class Event(NamedTuple):
    """What is read of one profiler event (its ids link a device event to the op that launched it)."""

    name: str
    start_ns: int
    end_ns: int
    on_host: bool
    id: int  # the correlation id
    linked: int  # a device event's or runtime call's: the launching op's id; 0 for an op or a range


def events_of(prof) -> list[Event]:
    """The profile's raw events: building torch's FunctionEvents (prof.events()) takes ~20x longer."""
    return [Event(e.name(), e.start_ns(), e.end_ns(), e.device_type() == torch.autograd.DeviceType.CPU,
                  e.correlation_id(), e.linked_correlation_id()) for e in prof.profiler.kineto_results.events()]


def by_phase(events: list[Event]) -> tuple[list[dict[str, dict[str, float]]], Counter]:
    """Per generation (one per BEGIN mark), phase -> quantity -> total; and how often each device kernel ran
    outside the prefills (by name, cut to 90 characters). A host event belongs to the phase whose mark follows
    its start, a device event to its launching op's phase."""
    host = sorted((e for e in events if e.on_host), key=lambda e: (e.start_ns, -e.end_ns))  # an op before its calls
    marks = [(e.start_ns, e.name[len(MARK):]) for e in host if e.name.startswith(MARK)]
    starts = [t for t, _ in marks]
    gens: list[dict] = []
    where = []  # per mark: (generation index, the phase it ends)
    for (t0, _), (t1, phase) in zip([(None, BEGIN), *marks], marks):
        if phase == BEGIN:
            gens.append(defaultdict(Counter))
        elif gens:
            gens[-1][phase]["host_ms"] += (t1 - t0) / 1e6
        where.append((len(gens) - 1, phase))

    def phase_at(t: int) -> tuple[int, str] | None:
        i = bisect.bisect_right(starts, t)  # the first mark after t: the end of t's phase
        return where[i] if i < len(marks) and where[i][1] != BEGIN else None

    op_start = {e.id: e.start_ns for e in host if e.id and not e.linked}
    open_until = 0  # the end of the aten op being called: an op that starts before it is that op's own call
    for e in host:
        if e.name.startswith("aten::") and e.start_ns >= open_until and (at := phase_at(e.start_ns)):
            stats = gens[at[0]][at[1]]
            stats[OP + e.name] += (e.end_ns - e.start_ns) / 1e6
            stats["op_ms"] += (e.end_ns - e.start_ns) / 1e6
            open_until = e.end_ns
    kernels: Counter = Counter()
    issued_in = enclosing_ops(host)
    for e in events:
        if e.on_host and (kind := kind_of(e.name)) is not None and (at := phase_at(e.start_ns)):
            stats = gens[at[0]][at[1]]
            stats[kind[0]] += 1
            stats[kind[1]] += (e.end_ns - e.start_ns) / 1e6
            if kind[0] in BY_OP:
                stats[BY_OP[kind[0]][0] + issued_in.get(e, "(no aten op)")] += 1
        elif (not e.on_host and e.linked in op_start and not e.name.startswith(MARK)
              and (at := phase_at(op_start[e.linked]))):
            gens[at[0]][at[1]]["device_ms"] += (e.end_ns - e.start_ns) / 1e6
            if at[1] != "prefill":
                kernels[e.name[:90]] += 1
    return [dict(g) for g in gens], kernels


def enclosing_ops(host: list[Event]) -> dict[Event, str]:
    """Per runtime call that copies or waits (`host`: host events sorted by start, an op before the ops it calls):
    the aten ops it ran inside, as "<outermost> > <innermost>" (the one name where they are one op)."""
    named, stack = {}, []  # the aten ops open at the current event, outermost first
    for e in host:
        while stack and stack[-1].end_ns < e.start_ns:
            stack.pop()
        if e.name.startswith("aten::"):
            stack.append(e)
        elif stack and (kind := kind_of(e.name)) is not None and kind[0] in BY_OP:
            outer, inner = stack[0].name[len("aten::"):], stack[-1].name[len("aten::"):]
            named[e] = outer if outer == inner else f"{outer} > {inner}"
    return named


def step_profile(method, engine, prompts: list[list[int]], max_new: int, top: int = 12, top_ops: int = 5) -> dict:
    """Per decode step (prefill apart) over `prompts` one by one: {quantity: {phase: value}} for each of
    QUANTITIES; `kernels`, the `top` device kernels by runs per step; `ops`, per phase, its `top_ops` aten ops by host
    ms per step (what a phase that costs more than its launches spends its time in: sdpa's own host work, a top-k);
    `copy_ops` and `wait_ops`, per phase, the copies and waits per step by the aten ops that queued them."""
    activities = [ProfilerActivity.CPU]
    if torch.device(engine.device).type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        gens = [method.generate(engine, p, max_new, MarkTimer()) for p in prompts]
    stats, kernels = by_phase(events_of(prof))

    def reduced(q: str, present: bool = False) -> dict[str, float]:  # present: only the phases that have q
        return per_decode_step([dataclasses.replace(g, phase_times={p: s[p][q] for p in s if not present or q in s[p]})
                                for g, s in zip(gens, stats, strict=True)])

    out = {q: {k: round(v, 3) for k, v in reduced(q).items()} for q in QUANTITIES}
    steps = sum(len(g.accept_lengths) - 1 for g in gens)
    out["kernels"] = {name: round(n / max(steps, 1), 2) for name, n in kernels.most_common(top)}
    phases = dict.fromkeys(p for s in stats for p in s if p != "prefill")

    def by_op(prefix: str, top: int | None) -> dict[str, dict[str, float]]:  # phase -> {op: per step}, the top
        per_op = {k[len(prefix):]: reduced(k, present=True)
                  for k in dict.fromkeys(k for s in stats for by in s.values() for k in by if k.startswith(prefix))}
        return {p: {name: round(v, 3) for name, v in Counter(
            {name: by[p] for name, by in per_op.items() if p in by}).most_common(top)} for p in phases}

    out["ops"] = by_op(OP, top_ops)
    for prefix, key in BY_OP.values():  # copy_ops: per phase, the ops that queued its copies, per step
        out[key] = by_op(prefix, None)
    return out
