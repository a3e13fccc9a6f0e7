"""Profiles of one CUDA graph replay, for gpu-check's graph and compiled parts (issue 67): which kernels a replay
runs, their summed device time and their span. A replay whose busy time is near its span costs its kernels' work; one
whose span is mostly gaps costs their number (what keeps the eager forward's ~1200 kernels from the memory floor)."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from bench.core.step_profile import events_of
from bench.core.timing import device_sync
from bench.core.tree import chain


def replay_profiles(engines: dict, n: int, context: int) -> dict:
    """{name: profile_replays of its n-token bucket after `context` cached tokens, or as many as its static cache
    holds beside the n (`context` in each entry: a write past the cache would be a device-side error on CUDA, and
    sticky)} for each capturing engine, the bucket filled (any tokens: the kernels are the same) and run once first,
    which captures it if AR's whole-step graph left none. A profiler that fails on a node costs this figure only:
    its entry is the error."""
    out = {}
    for name, engine in engines.items():
        if not engine.capture:
            continue
        at = min(context, engine.kv.capacity - n)
        try:  # in inference mode, as the engine decodes: a compiled forward's guards hold on it
            with torch.inference_mode():
                engine.kv.length.fill_(at)
                bucket = engine.bucket(n, False, {})
                engine.fill(bucket, torch.zeros(1, dtype=torch.long, device=engine.device),
                            torch.zeros(n - 1, dtype=torch.long, device=engine.device), chain(n - 1))
                engine.forward_bucket(bucket, False, {})
                profile_replays(engine, bucket, reps=1)  # thrown away: a process's first profile pays CUPTI's start
                out[name] = {**profile_replays(engine, bucket), "context": at}
        except Exception as err:  # noqa: BLE001
            out[name] = {"error": f"{type(err).__name__}: {err}"}
    return out


def profile_replays(engine, bucket, reps: int = 5) -> dict:
    """The kernels of `reps` replays of a captured bucket under torch.profiler, per replay (kernel_summary). Off CUDA
    (tests) the host's ops are profiled: no kernels."""
    cuda = engine.device.type == "cuda"
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            engine.forward_bucket(bucket, False, {})
        device_sync(engine.device)
    return kernel_summary(events_of(prof), reps)


def kernel_summary(events, reps: int, top: int = 5) -> dict:
    """Per replay: the kernels the device ran, their summed time (`busy_ms`) and the time from the first one's
    start to the last one's end (`span_ms`); the rest of the span is the gaps between kernels. A replay's cost is
    its kernels' when busy is near span, and their number's when it is not. `top`: the kernels with the most time."""
    kernels = [e for e in events if not e.on_host]
    if not kernels:
        return {"kernels": 0, "busy_ms": 0.0, "span_ms": 0.0, "top": {}}
    per: dict = {}
    for e in kernels:
        per[e.name[:90]] = per.get(e.name[:90], 0.0) + (e.end_ns - e.start_ns) / 1e6 / reps
    span = (max(e.end_ns for e in kernels) - min(e.start_ns for e in kernels)) / 1e6
    return {"kernels": round(len(kernels) / reps, 1), "busy_ms": round(sum(per.values()), 3),
            "span_ms": round(span / reps, 3),  # the replays run back to back: their whole span over reps
            "top": {k: round(v, 3) for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:top]}}


def replay_lines(t_n: list[dict]) -> list[str]:
    """Per profiled replay: its kernels, their busy time and span under the profiler (whose tracing widens the span),
    beside the same width's unprofiled time; a profile with no kernels says so (CUPTI saw none) instead of 0s."""
    return [f"- {r['model']}, n={r['n']}, {name}: a replay"
            + (f" after {p['context']} cached" if "context" in p else "")
            + (f" runs {p['kernels']:.0f} kernels, busy {p['busy_ms']} of its {p['span_ms']} ms profiled (the rest: "
               f"gaps between kernels, and the profiler's own)" if p["kernels"] else ": the profiler saw no kernels")
            + (f"; {r[name + '_ms']} ms unprofiled" if f"{name}_ms" in r else "")
            for r in t_n for name, p in r.get("replay", {}).items() if "kernels" in p]
