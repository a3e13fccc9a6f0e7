"""Recording a step or a forward as a CUDA graph (bench.core.graph_engine's capture path), and what stands in for
one off CUDA, where the suite runs the same path."""

from __future__ import annotations

import gc
from contextlib import nullcontext

import torch
from torch.cuda import CUDAGraph


def recorded(run, device: torch.device, pool, reset=lambda: None) -> tuple[CUDAGraph | EagerReplay, object, object]:
    """(graph, its outputs, the memory pool now): `run` recorded as a CUDA graph: warm-ups on a side stream (lazy
    allocations, cuBLAS handles), each after `reset` (a whole step's warm-up changes the state it starts from), then
    the capture into `pool` (None: a new one), and `reset` again. A forward's warm-ups write this step's keys at this
    step's columns, as the replay that follows does. Off CUDA (tests) an EagerReplay stands in for the graph, through
    the same warm-ups and resets."""
    cuda = device.type == "cuda"
    side = torch.cuda.Stream(device) if cuda else None
    if cuda:
        side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side) if cuda else nullcontext():
        for _ in range(2):
            reset()
            run()
    if cuda:
        torch.cuda.current_stream(device).wait_stream(side)
    reset()
    if not cuda:
        pool = [] if pool is None else pool  # the graphs that share it, as a CUDA pool's do
        graph = EagerReplay(run, pool)
        out = graph.out
    else:
        graph, out = capture(run, pool, device)
        pool = graph.pool()
    reset()  # an EagerReplay ran `run` to get its outputs; a capture only recorded it
    return graph, out, pool


def capture(run, pool, device) -> tuple[CUDAGraph, object]:
    """`run` captured into a new CUDA graph (its memory from `pool`, or a new pool). A failed capture puts `device`'s
    stream back before it raises: torch.cuda.graph's exit raises from capture_end before it restores the stream, and
    every later forward (the next method of a gpu-check part) would run on the dead capture's stream. Python's cycle
    collector is off during the capture: torch 2.11 no longer collects before one (force_cudagraph_gc), and an
    engine freed by a collection then would destroy its graphs inside this capture."""
    graph = torch.cuda.CUDAGraph()
    before = torch.cuda.current_stream(device)
    collecting = gc.isenabled()
    gc.disable()  # a collection inside the capture may free a dead engine's graph, a call a capture refuses
    try:
        with torch.cuda.graph(graph, pool=pool):
            out = run()
    except BaseException:
        torch.cuda.set_stream(before)
        raise
    finally:
        if collecting:
            gc.enable()
    return graph, out


class EagerReplay:
    """What stands in for a CUDA graph off CUDA, in the tests of the capture path: built, it runs `run` once and keeps
    its outputs; each replay runs it again and copies the new outputs into those first ones, so what a replay changes
    in place (the static outputs that proposers read) is what a CUDA graph's replay changes.

    Graphs that share a memory pool (`pool`, a list of them in capture order here) may overwrite each other's outputs
    on CUDA: a graph captured later may hold its outputs where an earlier one kept temporaries, which that one's
    replay writes again (an earlier graph's outputs stay allocated, so a later one's replay cannot). So a replay
    first spoils the floating outputs of the graphs captured after it (NaN): code that reads a graph's outputs after
    an earlier graph replayed fails here as it would, by chance, on a GPU."""

    def __init__(self, run, pool: list | None = None):
        self.run = run
        self.pool = [] if pool is None else pool
        self.pool.append(self)
        self.out = run()

    def replay(self) -> None:
        for other in self.pool[self.pool.index(self) + 1 :]:
            if other.out is not None:
                for t in other.out:
                    if isinstance(t, torch.Tensor) and t.is_floating_point():
                        t.fill_(float("nan"))
        new = self.run()
        if self.out is not None:
            for old, fresh in zip(self.out, new, strict=True):
                if isinstance(old, torch.Tensor):
                    old.copy_(fresh)
