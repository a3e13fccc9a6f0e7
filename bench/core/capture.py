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
        graph = EagerReplay(run)
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
    in place (the static outputs that proposers read) is what a CUDA graph's replay changes."""

    def __init__(self, run):
        self.run = run
        self.out = run()

    def replay(self) -> None:
        new = self.run()
        if self.out is not None:
            for old, fresh in zip(self.out, new, strict=True):
                if isinstance(old, torch.Tensor):
                    old.copy_(fresh)
