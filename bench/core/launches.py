"""Kernel launches a decode step costs, counted on any device, CPU included.

Where a GPU's forward is launch-bound (docs/gpu_leases.md: T(n) flat; on the H200 we measured, 20 ms for the
embedded model's ~1100 ops), a method's step costs what its ops cost to launch, not what they compute. Each aten op
that is not a view, an allocation or a composite runs at least one kernel on a GPU, so counting them per phase on a
CPU predicts where a method's extra launches are before a GPU is at hand (kernels that an op launches inside its own
CUDA code, such as sdpa padding a mask, are not seen).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from torch.utils._python_dispatch import TorchDispatchMode

from bench.core.timing import per_decode_step

# Ops whose schema does not say "view" that launch no kernel either: allocations and metadata-only changes.
NO_KERNEL = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "_unsafe_view",
                       "detach_", "resize_"})


class OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched inside it that launch a kernel on a GPU (not views, allocations or
    composites: a composite's parts are counted), in all and by name (`ops`)."""

    def __init__(self):
        super().__init__()
        self.total = 0
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # A composite op (reshape, contiguous) reaches this mode whole under inference mode, as the engine runs:
        # its parts are counted instead (torch's FlopCounterMode does the same), else reshape's copy goes unseen.
        with self:
            out = func.decompose(*args, **kwargs)
        if out is not NotImplemented:
            return out
        if not func.is_view and func.overloadpacket.__name__ not in NO_KERNEL:
            self.total += 1
            self.ops[func.__name__] += 1
        return func(*args, **kwargs)


class OpTimer:
    """A Timer (bench.core.timing) that charges ops instead of seconds: lap(phase) adds the ops `counter` saw since
    the last boundary, so a generation's `phase_times` are its ops per phase."""

    def __init__(self, counter: OpCounter):
        self.counter = counter
        self.ops: dict[str, int] = defaultdict(int)
        self.mark = 0

    def start(self) -> None:
        self.ops.clear()
        self.mark = self.counter.total

    def lap(self, phase: str) -> None:
        self.ops[phase] += self.counter.total - self.mark
        self.mark = self.counter.total

    def result(self) -> dict[str, int]:
        return dict(self.ops)


def ops_per_step(method, engine, prompts: list[list[int]], max_new: int) -> dict[str, float]:
    """Kernel launches per decode step by phase (prefill apart: once a prompt), over `prompts` one by one."""
    with OpCounter() as counter:
        gens = [method.generate(engine, p, max_new, OpTimer(counter)) for p in prompts]
    return {k: round(v, 1) for k, v in per_decode_step(gens).items()}
