"""The step model in the engine's graph regime (run.graphs=true), checked on a lease that timed it (issue 68,
docs/cost_model.md "The graph regime").

A graph-mode step replays its forward (a whole step's graph holds the draft, the acceptance and the update too);
what it costs beyond the replay is its host phases (the copies in, a host-side draft, the acceptance around a bucket
forward, the one read and the bookkeeping after it), each priced as the eager rule prices a phase
(bench.cost.host): host_factor x its Python + launch_us x its ops, from the method's step costs measured in graph mode
on a CPU (`bench.perf.step_costs --graphs`, at the tree the lease ran) and the GPU host's price fitted on AR's eager
phases (bench.cost.gpu_validation). Unlike an eager step's, the device is busy while the host works: a bucket
forward's `verify` is queued behind the replay before the read, so it costs only what it outlasts the replay by.
The forward: T(bucket) on the lease's graph T(n) over the widths its steps verified (the lease's own where it
recorded them, else the CPU sitting's on the same prompts), a whole step at its static tree's width, a bucket
forward at its bucket (bench.core.graph_engine.bucket_width). The prefill stays eager: the GPU's eager profile at
the prompts' mean length, once per generation. Left out: the device time of a whole step's draft and update inside
its replay. Nothing is fitted on the graph regime, so AR's step is held out too.
"""

from __future__ import annotations

import numpy as np

from bench.core.graph_engine import bucket_width
from bench.cost.host import HostCost
from bench.cost.profiles import Profile

FORWARD_PHASES = ("prefill", "target_forward", "step_graph")  # replays on CUDA (the prefill apart: eager, priced apart)
BEHIND = ("verify",)  # queued after a bucket forward's replay and before the one read: runs while the device replays
GOALS = {"ar_ms": 0.10, "step_ratio": 0.15}  # AR's ms a token as the eager rule's AR tok/s; each method as held out


def widths_of(row: dict, costs: dict) -> tuple[dict[int, int], str]:
    """(steps at each verified width, where they came from): the lease's own, else the CPU sitting's."""
    if row.get("widths"):
        return {int(w): c for w, c in row["widths"].items()}, "the lease's"
    return {int(w): c for w, c in costs["widths"].items()}, "the CPU sitting's"


def forward_ms(widths: dict[int, int], whole: bool, graph: Profile, widest: int | None = None) -> float:
    """Mean ms of a step's replayed forward over its widths: a whole step at its width (its static tree's own
    bucket), a bucket forward at its bucket (the next power of two, or the method's `widest` where narrower: step
    costs record it since 2026-11-30; the buckets of a lease before were the powers of two)."""
    context = graph.contexts[0]
    ms = [float(graph.cost(w if whole else bucket_width(w, widest), context)) for w in widths]
    return float(np.average(ms, weights=list(widths.values())))


def rest_ms(costs: dict, host: HostCost, forward: float) -> float:
    """A step's host phases on the GPU's host (host_factor x each phase's Python + launch_us x its ops), those
    behind the replay only for what they outlast its `forward` ms by."""
    def priced(names) -> float:
        return sum(host.host_factor * p["ms"] * p["python_share"] + host.launch_us / 1000 * p["ops"]
                   for name, p in costs["phases"].items() if name in names)

    phases = set(costs["phases"])
    return priced(phases - {*FORWARD_PHASES, *BEHIND}) + max(0.0, priced(BEHIND) - forward)


def project(speedup: dict, sitting: dict, host: HostCost, graph: Profile, eager: Profile) -> dict:
    """Per method the sitting measured: its step priced (forward, rest) and per target forward with the prefill
    shared out, its step over AR's, and AR's ms a token. Beside each, where the lease's graph part timed it
    (`speedup`: its speedups, tok/s and MATs; {} projects ahead of a lease, at the sitting's MATs and widths): the
    measured step over AR's (MAT x AR's tok/s / its tok/s, and each timed pass's) and AR's ms a token."""
    new = speedup["max_new_tokens"] if speedup else sitting["max_new_tokens"]
    prefill = float(eager.prefill(np.mean(sitting["prompt_tokens"])))
    timed = {m: row for m, row in speedup.items() if isinstance(row, dict) and m in sitting["methods"]}
    out, per = {"prefill_ms": round(prefill, 3), "host": host.__dict__, "methods": {}}, {}
    for m, costs in sitting["methods"].items():
        widths, source = widths_of(timed.get(m, {}), costs)
        fwd = forward_ms(widths, "step_graph" in costs["phases"], graph, costs.get("widest"))
        rest = rest_ms(costs, host, fwd)
        mat = timed[m]["mat"] if m in timed else costs["mat"]
        forwards = new / mat  # the prefill's forward among them, as a lease's MAT counts it
        per[m] = (prefill + (forwards - 1) * (fwd + rest)) / forwards
        out["methods"][m] = {"forward_ms": round(fwd, 3), "rest_ms": round(rest, 3), "widths_from": source,
                             "mat": mat}
    for m, r in out["methods"].items():
        got = timed.get(m)
        if m == "ar":
            r["projected_ms"] = round(per[m], 3)
            if got:
                measured = 1000 / got["tok_s"]
                r |= {"measured_ms": round(measured, 3), "error": round(per[m] / measured - 1, 3),
                      "goal": GOALS["ar_ms"],
                      # the rest a step the lease's AR implies: its ms a token less T(1) and the prefill's share
                      "implied_rest_ms": round((measured * new - prefill) / (new - 1) - r["forward_ms"], 3)}
            continue
        ratio = per[m] / per["ar"]
        r |= {"projected_step_ratio": round(ratio, 3), "projected_speedup": round(r["mat"] / ratio, 3)}
        if got and "ar" in timed:
            passes = got.get("speedups") or [got["speedup"]]
            measured = got["mat"] * timed["ar"]["tok_s"] / got["tok_s"]
            r |= {"measured_step_ratio": round(measured, 3),
                  "measured_passes": [round(got["mat"] / max(passes), 3), round(got["mat"] / min(passes), 3)],
                  "error": round(ratio / measured - 1, 3), "goal": GOALS["step_ratio"],
                  "measured_speedup": got["speedup"]}
    return out


def lines(result: dict) -> list[str]:
    """The printed check: one line per method."""
    host = result["host"]
    head = (f"graph regime ({result['lease']}; step costs {result['step_costs']}; host {host['launch_us']} µs a launch, "
            f"factor {host['host_factor']}; prefill {result['prefill_ms']} ms a generation):")
    out = [head]
    for m, r in result["methods"].items():
        line = f"- {m}: forward {r['forward_ms']} ms + rest {r['rest_ms']} ms a step (widths: {r['widths_from']}); "
        if m == "ar":
            line += f"{r['projected_ms']} ms a token projected"
        else:
            line += f"step / AR's {r['projected_step_ratio']} projected (speedup {r['projected_speedup']} at MAT {r['mat']})"
        if "error" in r:
            line += (f", {r['measured_ms']} measured (rest implied {r['implied_rest_ms']} ms)" if m == "ar" else
                     f", {r['measured_step_ratio']} measured (passes {r['measured_passes'][0]}-"
                     f"{r['measured_passes'][1]}; speedup {r['measured_speedup']})") + f", error {r['error']:+.1%}"
        out.append(line)
    return out
