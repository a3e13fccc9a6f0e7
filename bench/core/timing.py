"""Phase timing in the gpt-fast style: device sync at every boundary, wall clock from perf_counter.

`PhaseTimer.lap(phase)` charges the time since the previous boundary to `phase`, so the phases of one
generation tile its timed region with no gaps: they add up to the wall time by construction.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Protocol

PHASES = ("prefill", "preprocess", "draft", "target_forward", "verify", "update")  # every engine step laps these
# Laps only some runs have: draft-model proposers split `draft` into the draft model's forwards (`draft_forward`)
# and tree construction (`tree`: token sampling, heap work); temperature > 0 adds the target softmax (`sampling`);
# Post-use & Pre-cut its `controller`. Graph mode's whole step (bench.core.graph_engine) is one replayed graph: draft,
# target forward, verification and update inside it are not timed apart (`step_graph`); it counts as the model's
# time, what is left outside it as overhead.
MODEL_PHASES = ("prefill", "target_forward", "step_graph")  # everything else is overhead
# Devices whose kernels run asynchronously to the host: without a sync at every boundary a phase times only the
# launches it queued, and its device time lands in whichever later phase waits (reads a value, syncs).
ASYNC_DEVICES = ("cuda", "mps", "xpu")


def phases_exact(device: str | None, sync_phases: bool | None) -> bool:
    """Whether a run's per-phase times are each phase's own time: always on a synchronous device (CPU), only with
    run.sync_phases=true on an asynchronous one. Every report that shows phase shares decides by this. A run
    that recorded no device (older summaries) is taken as exact: nothing says it was not."""
    kind = str(device or "cpu").split(":")[0]
    return bool(sync_phases) or kind not in ASYNC_DEVICES


def device_sync(device) -> None:
    import torch  # here, not at module top: reports and notebooks import this module without paying for torch

    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def per_decode_step(generations) -> dict[str, float]:
    """Each phase's total over `generations` (bench.core.engine.Generation) per decode step, the prefill apart:
    it runs once a prompt, not once a step, and a generation's first token is its."""
    total, steps = Counter(), 0
    for g in generations:
        total.update(g.phase_times)
        steps += len(g.accept_lengths) - 1
    return {k: v / max(steps, 1) for k, v in total.items() if k != "prefill"}


class Timer(Protocol):
    """What the engine and proposers need of a timer: start the timed region, charge time to a phase."""

    def start(self) -> None: ...

    def lap(self, phase: str) -> None: ...

    def result(self) -> dict[str, float]: ...


class PhaseTimer:
    def __init__(self, device="cpu", sync: bool = True):
        self.device = device
        self.sync = sync
        self.times: dict[str, float] = defaultdict(float)
        self._last = None

    def start(self) -> None:
        if self.sync:
            device_sync(self.device)
        self.times.clear()
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        if self.sync:
            device_sync(self.device)
        now = time.perf_counter()
        self.times[phase] += now - self._last
        self._last = now

    def result(self) -> dict[str, float]:
        return dict(self.times)
