"""A step's work outside the target forward, priced for a GPU's host (docs/cost_model.md, "The step model").

On a GPU an eager decode step is host-bound (docs/gpu_leases.md: on the H200 a forward cost 18.9-30.0 ms from the
135M model to the 13B shape): each aten op the host dispatches costs a launch whatever its tensors' size, and the
host's Python runs at the host CPU's speed. A recorded step's rest (everything but the target forward, and the
draft model's forwards where a draft profile replays them) is priced on a GPU as

    rest = host_factor x (its Python, as measured here) + launch_us x (the ops it launches)

per phase: a phase's Python is its measured time times the share of it outside aten ops, and its ops per decode
step, both from the method's step costs measured on a CPU (bench.perf.step_costs, `make step-costs`:
evidence/projection/step_costs.json); its tensor work itself is taken as hidden under the launches (the device
idles in a host-bound step). A method's forward phase can dispatch ops beyond the bare forward a cost profile
timed (until 49e7261, a chain's causal mask built by transformers: PLD), priced the same way. `launch_us` and `host_factor`
belong to a GPU's host (bench/cost/hardware/*.yaml), fitted on AR's steps alone (bench.cost.gpu_validation).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.paths import PROJECT

STEP_COSTS = PROJECT / "evidence" / "projection" / "step_costs.json"  # greedy (T = 0)
SAMPLED_COSTS = PROJECT / "evidence" / "projection" / "step_costs-t0.6.json"  # sampling (T = 0.6)
# Greedy, a batch of B (--batch-size, B = 1 too), for the methods the ProPD paper runs at B > 1, with each batch step's
# rows drafted at once: for the runs that record `draft_rows_at_once` (since 4b29af0)
BATCH_COSTS = str(PROJECT / "evidence" / "projection" / "step_costs-b{}.json")
# The same at B > 1 measured before then (ab8e580), when every row drafted alone: for the runs recorded then
ROW_BY_ROW_COSTS = str(PROJECT / "evidence" / "projection" / "row_by_row_drafting" / "step_costs-b{}.json")
TARGET_PHASES = ("prefill", "target_forward")
DRAFT_PHASE = "draft_forward"
LOOP_PHASE = "generate"  # HF's own decode loop: one phase around its forwards (bench.cost.replay.forwards_priced)


@dataclass(frozen=True)
class HostCost:
    """A GPU host's price of a step's rest: µs per op launched, its Python's time over this CPU's."""

    launch_us: float
    host_factor: float
    source: str  # where the two came from (which GPU's AR fitted them)


@dataclass(frozen=True)
class StepCosts:
    """Per method and phase, its ops and Python share per decode step, measured on one CPU (bench.perf.step_costs)."""

    machine: str
    bare: dict  # the ops of the forward a cost profile times: "1" (one token, no mask), "n" (a 4D mask)
    methods: dict
    batch_size: int = 1  # the rows of the batches measured (per decode step of a batch)

    @classmethod
    def read(cls, path: str | Path = STEP_COSTS) -> StepCosts:
        data = json.loads(Path(path).read_text())
        return cls(data["machine"], data["bare_forward_ops"], data["methods"], data.get("batch_size", 1))

    def forward_extra_ops(self, method: str) -> float:
        """Ops a step's forward phase dispatches beyond the bare forward of its width (a 4D mask past one token)."""
        entry = self.methods[method]
        ops = entry["phases"].get("target_forward", {}).get("ops")
        if ops is None:
            return 0.0
        share = entry.get("multi_token_share") or 0.0
        return max(0.0, ops - (1 - share) * self.bare["1"] - share * self.bare["n"])

    def phase(self, method: str, phase: str) -> tuple[float, float]:
        """(Python share, ops per decode step) of a method's phase; a phase it did not show here: all Python, no
        ops. HF's loop phase: its ops less the bare one-token forward's (its forwards are priced apart)."""
        entry = self.methods[method]["phases"].get(phase)
        if entry is None:
            return 1.0, 0.0
        ops = entry["ops"] - (self.bare["1"] if phase == LOOP_PHASE else 0.0)
        return entry["python_share"], max(0.0, ops)


@functools.lru_cache(maxsize=4)
def step_costs(path: str = str(STEP_COSTS)) -> StepCosts | None:
    """The committed step costs; None where the file is absent (a rest is then kept as measured)."""
    return StepCosts.read(path) if Path(path).is_file() else None


def step_costs_at(temperature: float, method: str, batch_size: int = 1,
                  before_batched_drafting: bool = False) -> StepCosts | None:
    """The step costs a run at this temperature and batch size is priced with, the first that holds the method:
    greedy, those measured at its batch size (a batch's Python and launches per step grow with its rows unlike a
    prompt's, and its tensor work, which batch 1's Python share would price as Python, grows faster) with the code
    the run was recorded with (`before_batched_drafting`: ROW_BY_ROW_COSTS at B > 1, else BATCH_COSTS); those
    measured sampling (T = 0.6) for T > 0; the greedy batch-1 ones of every method; None without any."""
    paths = []
    if temperature == 0 and not before_batched_drafting:
        paths = [BATCH_COSTS.format(batch_size)]
    elif temperature == 0 and batch_size > 1:
        paths = [ROW_BY_ROW_COSTS.format(batch_size)]
    for path in paths + ([SAMPLED_COSTS] if temperature > 0 else []) + [STEP_COSTS]:
        costs = step_costs(str(path))
        if costs is not None and method in costs.methods:
            return costs
    return None


def decode_steps(record: dict) -> int:
    return max(len(record.get("accept_lengths") or []) - 1, 0)


def priced_rest_s(phases: dict, wall: float, steps: int, method: str, costs: StepCosts, host: HostCost,
                  draft_replayed: bool = False) -> float:
    """Seconds of a step's rest on the GPU host, for a record's (or a batch's) `phases` and `wall` time over `steps`
    decode steps: per phase outside the forwards, host_factor x its time x its Python share + launch_us x its ops;
    the untimed remainder as Python; the forward phase's extra ops."""
    skip = {*TARGET_PHASES, *([DRAFT_PHASE] if draft_replayed else [])}
    timed = sum(phases.values())
    rest = wall - sum(phases.get(p, 0.0) for p in TARGET_PHASES)
    python, launches = max(0.0, wall - timed), 0.0
    for phase, seconds in phases.items():
        if phase in skip:
            continue
        share, ops = costs.phase(method, phase)
        python += share * (min(seconds, rest) if phase == LOOP_PHASE else seconds)
        launches += ops * steps
    if "target_forward" in phases:
        launches += costs.forward_extra_ops(method) * steps
    return host.host_factor * python + host.launch_us * 1e-6 * launches


def fit_host(python_ms: np.ndarray, ops: np.ndarray, gpu_ms: np.ndarray) -> tuple[float, float]:
    """(launch_us, host_factor) by non-negative least squares of the relative error over AR's phases: gpu_ms[i] ~
    host_factor x python_ms[i] + launch_us / 1000 x ops[i] (phases that took no time on the GPU left out)."""
    from scipy.optimize import nnls

    keep = gpu_ms > 0
    x = np.stack([ops[keep] / 1000, python_ms[keep]], axis=1) / gpu_ms[keep, None]
    (launch_us, factor), _ = nnls(x, np.ones(keep.sum()))
    return float(launch_us), float(factor)
