"""gpu-check's repeats part (`--only repeats`): do the same prompts decode alike every time, in each way of running
the engine?

The H200 lease of 2026-11-28 saw graph mode (AR, then on the bucket path, and PLD) decode some prompts otherwise from
one timed pass to the next, at near-ties (AR its third prompt, PLD its first), where the eager engine and Token
Recycling's whole-step graph repeated (docs/gpu.md). Graph mode differs from the eager engine in two ways at once: a
static cache with bucketed widths, and the capture. This part tells them apart: the prompts decoded `times` in a row
by AR (a whole step) and PLD (the bucket path), taking turns prompt by prompt on one engine as the timed passes do,
on the eager engine, on graph mode's static-shape code run without capture, and captured, after one warm round
each; each way's later decodes graded against its first (identical, or where and how it departs: "near-tie at 41").
If the static way varies too, a kernel varies (e.g. cuBLAS choosing by stream), not the capture. On a CPU every way
repeats (the capture is an EagerReplay there)."""

from __future__ import annotations

from bench.check import method_check
from bench.run.compose import compose_config
from methods import build_method

WAYS = ("eager", "static", "captured")
NAMES = ("ar", "pld")


def engine_of(bundle, way: str, rows: list[list[int]], max_new: int):
    if way == "eager":
        return method_check.engine_for(bundle, 0.0)
    return method_check.graph_engine_for(bundle, rows, max_new, capture=way == "captured")


def repeats(bundle, prompts: list[list[int]], max_new: int, times: int = 3, names=NAMES, progress=None) -> dict:
    """{"ways": {method: {way: per prompt, each later decode graded against the first}}, and the sizes};
    `progress(result so far)` after each way, so that a lease's cap keeps the ways it finished."""
    ways: dict = {name: {} for name in names}
    result = {"prompt_tokens": [len(p) for p in prompts], "max_new_tokens": max_new, "times": times, "ways": ways}
    for way in WAYS:
        engine = engine_of(bundle, way, prompts, max_new)  # one engine (one pool, one cache) for every decode
        methods = {name: build_method(compose_config([f"method={name}"]).method, bundle) for name in names}
        decoded: dict = {}
        # round 0 warms (its graphs captured, as a timed pass's warm-up does); round 1 is the one compared against
        for _ in range(times + 1):
            for i, prompt in enumerate(prompts):
                for name, method in methods.items():
                    out = method_check.run_rows(method, engine, [prompt], 1, max_new, 0.0)[0].output_ids
                    decoded.setdefault((name, i), []).append(out)
        for (name, i), (_, first, *later) in decoded.items():
            ways[name].setdefault(way, []).append(
                [method_check.graded(bundle, prompts[i], out, first, where=True) for out in later])
        if progress is not None:
            progress(result)
    return result


def lines(result: dict) -> list[str]:
    """gpu-check's table line for the part."""
    said = "; ".join(f"{name} " + ", ".join(f"{way} " + " | ".join(" / ".join(g) or "-" for g in per_prompt)
                                            for way, per_prompt in by.items())
                     for name, by in result["ways"].items())
    sizes = ", ".join(map(str, result["prompt_tokens"]))
    return ["", (f"repeats (prompts of {sizes} tokens x {result['max_new_tokens']} new, taking turns, "
                 f"{result['times']} decodes after a warm one, each later one against the first; | between "
                 f"prompts): {said}")]
