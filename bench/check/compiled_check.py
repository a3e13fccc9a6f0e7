"""`make gpu-check`'s compiled part (bench.check.gpu_check, `--only compiled`): the graph engine with its bucket
forward compiled by torch.compile before the capture (`run.graph_compile`, docs/engine.md) beside plain graph mode
(issue 67: the candidate for the embedded model's 3 ms forward and the 7B shape's memory-floor goal, where a
replay of the eager forward's ~1200 kernels is gaps as much as work)."""

from __future__ import annotations

import gc

import torch

from bench.check import method_check
from bench.check.graph_check import (
    CONTEXT,
    ar_notes,
    ar_three_ways,
    curve_capacity,
    forward_curve,
    graph_engine,
    methods_label,
    run_capacity,
    stager,
)
from bench.check.replay_profile import replay_lines, replay_profiles
from bench.core.graph_engine import GraphEngine

COMPILED = ("graph_compiled",)  # the way whose failure is recorded and left out; plain graph mode's is the part's


def run_compiled(sizes, bundle, progress=lambda out: None, mode: str = "default", load=None, free=None) -> dict:
    """`--only compiled`: graph mode with its forward compiled by torch.compile (run.graph_compile=<mode>) beside
    plain graph mode. The stages, the goals' figures first (a lease's cap cuts the last): where `load(shape, dtype)`
    is given, AR on both for each hf_shape (the 7B: the memory-floor goal), one width, so one compile, HF left out
    (the graph part times it), with a profile of one replay of each; then on the methods' model T(1) taking turns
    (the 3 ms goal), AR on both beside transformers' compiled static-cache generate (the AR / HF goal), and the rest
    of T(n). Each model compiles from a clean slate (torch.compiler.reset), as in a process of its own: after another
    model's sizes, torch's automatic dynamic shapes would compile this one with its cache's heads and head size
    symbolic. Off CUDA the aot_eager backend stands in for inductor (the same trace, eager ops: no C compiler,
    seconds) unless `sizes.compile_backend` says otherwise (inductor on a CPU rehearses a lease's compile).
    `dynamo`: at the end of each stage, torch.compile's tallies since this part began (graphs, graph breaks,
    recompiles; the ar stage's include HF's compiled generate where it compiles): did each model's forward compile
    whole, once for the first width and once for the others. A compiled way that fails (a node's first compile) is
    recorded where it failed and left out of the model's later stages: torch.compile caches no failed compile, so
    each call would compile, and fail, again."""
    backend = sizes.compile_backend or ("inductor" if bundle.device.type == "cuda" else "aot_eager")
    kw = {"mode": mode} if backend == "inductor" else {"backend": backend}
    out: dict = {"context": CONTEXT, "compile": kw, "t_n": [], "ar": {}, "ar_shapes": {}, "errors": {}, "seconds": {},
                 "dynamo": {}}
    dynamo_counts(clear=True)  # tallies from here (compiled code kept): what earlier parts compiled is not ours
    stage = stager(out, progress)
    rows = method_check.prompts(bundle, 2)

    def both(model, capacity: int) -> dict:
        return {"graph": graph_engine(model, capacity),
                "graph_compiled": GraphEngine(model.model, model.eos_token_ids, model.max_context, capacity,
                                              device=model.device, compile_with=kw)}

    def fresh() -> None:  # a clean slate; the collection frees a compiled engine's cycle (engine, its compiled forward)
        torch.compiler.reset()
        gc.collect()

    def drop(failed: dict) -> None:
        for name in failed or {}:
            engines.pop(name, None)

    for shape in sizes.hf_shapes if load is not None else ():
        with stage(f"ar {shape}"):
            fresh()
            model, engines = load(shape, sizes.method_dtype), None
            try:
                vocab = model.model.config.vocab_size  # a random shape's may be smaller than the tokenizer's
                shaped = [[i % vocab for i in r] for r in rows]
                engines = both(model, run_capacity(shaped, sizes.timed_new))
                out["ar_shapes"][shape] = ar_three_ways(
                    model, shaped, sizes.timed_new, sizes.timed_reps, engines=engines, hf=False,
                    progress=lambda ar, shape=shape: progress({**out, "ar_shapes": {**out["ar_shapes"], shape: ar}}))
                progress(out)  # the goal's figure kept before the profiles
                # where the memory floor is lost: one replay's kernels at AR's width, both ways (after as many cached
                # tokens as the run's cache holds); counted before the tallies, so a recompile it costs would show
                drop(out["ar_shapes"][shape].get("failed"))
                out["ar_shapes"][shape]["replay"] = replay_profiles(engines, 1, CONTEXT)
                out["dynamo"][shape] = dynamo_counts()
            finally:
                engines = None  # their graphs and static caches hold the model
                free(model)

    fresh()
    # one cache for T(n) and AR alike (AR reuses what T(n) compiled and captured), sized to the larger of the two
    engines = both(bundle, max(curve_capacity(sizes.cost_sizes), run_capacity(rows, sizes.timed_new)))
    label, (first, *rest) = methods_label(sizes), sizes.cost_sizes
    with stage("t_1"):
        out["t_n"] = forward_curve(bundle, label, [first], reps=sizes.reps, engines=engines, optional=COMPILED)
        out["dynamo"]["t_1"] = dynamo_counts()
        drop(out["t_n"][-1].get("failed"))
    with stage("ar"):  # the same engines: what T(1) compiled and captured is reused
        out["ar"] = ar_three_ways(bundle, rows, sizes.timed_new, sizes.timed_reps, engines=engines,
                                  progress=lambda ar: progress({**out, "ar": ar}))
        out["dynamo"]["ar"] = dynamo_counts()
        drop(out["ar"].get("failed"))
    with stage("t_n"):  # the other widths: one more compile, with the width dynamic
        out["t_n"] += forward_curve(bundle, label, rest, reps=sizes.reps, engines=engines, profiled=rest[-1:],
                                    optional=COMPILED, progress=lambda rows: progress({**out, "t_n": out["t_n"] + rows}))
        out["dynamo"]["t_n"] = dynamo_counts()
    return out


def dynamo_counts(clear: bool = False) -> dict:
    """torch.compile's own tallies since they were last cleared: graphs compiled, calls captured into them, graph
    breaks by reason, and why each recompile happened (its first failed guard: a width's shape is expected once,
    from the first width to a dynamic one; any other is a compile a lease pays for nothing), each named by the
    function compiled (ours `forward_eager`; transformers' generate compiles the model's call under a name of its
    own, and may break its graph: ours compiles whole or fails). torch exposes them only in torch._dynamo.utils,
    as its own tests read them. `clear`: start them again."""
    from torch._dynamo.utils import clear_compilation_metrics, counters, get_compilation_metrics

    if clear:
        counters.clear()
        clear_compilation_metrics()
    stats = counters["stats"]
    return {"graphs": stats.get("unique_graphs", 0), "calls_captured": stats.get("calls_captured", 0),
            "graph_breaks": dict(counters["graph_break"]),
            "recompiles": [f"{m.co_name}: {m.recompile_reason.strip().splitlines()[0]}"
                           for m in get_compilation_metrics() if m.recompile_reason]}


def compiled_lines(part: dict) -> list[str]:
    """gpu-check's table for the compiled part."""
    how = ", ".join(f"{k}={v}" for k, v in part["compile"].items())
    lines = []
    if part.get("t_n"):
        ns = [r["n"] for r in part["t_n"]]
        lines += [f"| T(n) ms after {part['context']} cached, graph / graph compiled ({how}) | "
                  + " | ".join(f"n={n}" for n in ns) + " |", "|---|" + "---|" * len(ns),
                  f"| {part['t_n'][0]['model']} | " + " | ".join(f"{ms(r, 'graph')} / {ms(r, 'graph_compiled')}"
                                                             for r in part["t_n"]) + " |", ""]
        lines += replay_lines(part["t_n"])
        first = {}  # each way's failure at the first width it failed (the later rows repeat it)
        for r in part["t_n"]:
            for name, error in r.get("failed", {}).items():
                first.setdefault(name, f"T(n) {name} failed at n={r['n']}: {error}")
        lines += list(first.values())
    if ar := part.get("ar"):
        lines.append(f"AR: graph {ar['graph_tok_s']}, graph compiled {ar.get('graph_compiled_tok_s', '-')}, HF static "
                     f"cache {ar.get('hf_static_tok_s', '-')} tok/s ({ar['hf_static']}); compiled/graph "
                     f"x{ar.get('graph_compiled_over_graph', '-')}, compiled/HF "
                     f"x{ar.get('graph_compiled_over_hf_static', '-')}; identical to graph AR: compiled "
                     f"{ar.get('graph_compiled_identical', '-')}/{ar['prompts']}, HF "
                     f"{ar.get('hf_static_identical', '-')}/{ar['prompts']}" + ar_notes(ar))
    lines += [f"AR on {shape}: graph {ar['graph_tok_s']}, graph compiled {ar.get('graph_compiled_tok_s', '-')} tok/s "
              f"(x{ar.get('graph_compiled_over_graph', '-')}); identical to graph AR: "
              f"{ar.get('graph_compiled_identical', '-')}/{ar['prompts']}" + ar_notes(ar)
              for shape, ar in part.get("ar_shapes", {}).items()]
    lines += replay_lines([{"model": shape, "n": 1, "replay": ar.get("replay", {})}
                           for shape, ar in part.get("ar_shapes", {}).items()])
    if counts := part.get("dynamo"):  # cumulative: the last stage's breaks and recompiles are all of them
        last = counts[list(counts)[-1]]
        lines.append("torch.compile, graphs after each stage: " + ", ".join(f"{k} {c['graphs']}" for k, c in counts.items())
                     + f"; graph breaks: {last['graph_breaks'] or 'none'}; recompiles: "
                     + ("; ".join(last["recompiles"]) or "none"))
    lines += [f"compiled part's {name} failed: {e['error']}" for name, e in part.get("errors", {}).items()]
    return lines


def ms(row: dict, way: str) -> str:
    """A T(n) row's time for one way, or "-" where it failed."""
    return f"{row[way + '_ms']:.2f}" if f"{way}_ms" in row else "-"
