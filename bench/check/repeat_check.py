"""gpu-check's repeats part (`--only repeats`): does one prompt decode alike every time, in each way of running the
engine?

The H200 lease of 2026-11-28 saw graph mode (AR, then on the bucket path, and PLD) decode some prompts otherwise from
one timed pass to the next, at near-ties, where the eager engine and Token Recycling's whole-step graph repeated
(docs/gpu.md). Graph mode differs from the eager engine in two ways at once: a static cache with bucketed widths, and
the capture. This part tells them apart: one prompt decoded `times` in a row by AR (a whole step) and PLD (the bucket
path) on the eager engine, on graph mode's static-shape code run without capture, and captured, after one warm decode
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


def repeats(bundle, prompt: list[int], max_new: int, times: int = 3, names=NAMES) -> dict:
    """{"ways": {method: {way: [each later decode graded against the first]}}, and the sizes}."""
    ways: dict = {}
    for way in WAYS:
        engine = engine_of(bundle, way, [prompt], max_new)
        for name in names:
            method = build_method(compose_config([f"method={name}"]).method, bundle)
            # the first decode warms (its graphs captured, as a timed pass's warm-up does); the others are compared
            _, first, *later = [method_check.run_rows(method, engine, [prompt], 1, max_new, 0.0)[0].output_ids
                                for _ in range(times + 1)]
            ways.setdefault(name, {})[way] = [method_check.graded(bundle, prompt, out, first, where=True)
                                              for out in later]
    return {"prompt_tokens": len(prompt), "max_new_tokens": max_new, "times": times, "ways": ways}


def lines(result: dict) -> list[str]:
    """gpu-check's table line for the part."""
    said = "; ".join(f"{name} " + ", ".join(f"{way} {' / '.join(grades) or '-'}" for way, grades in by.items())
                     for name, by in result["ways"].items())
    return ["", (f"repeats (one prompt of {result['prompt_tokens']} tokens x {result['max_new_tokens']} new, "
                 f"{result['times']} decodes after a warm one, each later one against the first): {said}")]
