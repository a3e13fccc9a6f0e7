"""`make gpu-check`'s graph part (bench.check.gpu_check, `--only graphs`): the engine's two regimes side by side, in one
process, taking turns (issue 67).

- T(n) after CONTEXT cached tokens, n = 1..128, for each cost model (the embedded weights, the random 7B and 13B
  shapes) in the methods' dtype: the graph mode's bucket forward run eagerly (static shapes, no capture) and
  replayed as a CUDA graph (bench.core.graph_engine), each timed synced, median of `reps`, the two taking turns.
- AR three ways on the same prompts, taking turns prompt by prompt: the eager engine, the graph engine, and
  transformers' generate with a fixed-size static cache, compiled as transformers does on CUDA (`compiled`: where the
  node has no triton or no C compiler it runs uncompiled, and says so); tokens/s and outputs against eager AR. On
  the methods' model here, on each hf_shape (the random 7B) last: its stage is the longest.
- Token Recycling's `tree=auto` chosen on the graph regime's own T(n) (the stage above, the methods' model), from
  tree statistics calibrated on this node (HumanEval past the prompts timed here).
- AR, Token Recycling (the 80-node tree and that auto tree), PLD and Medusa (zero-block heads) in graph mode, taking turns
  (bench.check.speedup_check.interleaved_speedup on the graph engine, first-time MAT: each timed pass replays the
  method's state), without the eager part's diagnostics.
- Host waits per step in graph mode for AR, Token Recycling and Medusa: counted (bench.core.syncs) and, on CUDA, under
  torch's sync debug mode. The goal is one: the read of each step's outcome.
"""

from __future__ import annotations

import statistics
import time
import traceback
from contextlib import contextmanager

import torch

from bench.check import method_check, speedup_check
from bench.check.hf_static import StaticCacheGenerate, compiled_by_transformers, compiles
from bench.check.replay_profile import replay_lines, replay_profiles
from bench.core.graph_engine import GraphEngine, sized_capacity
from bench.core.syncs import CudaSyncWarnings, HostSyncCounter
from bench.core.timing import PhaseTimer, device_sync
from bench.core.tree import chain
from bench.models.heads import init_heads
from bench.run.compose import compose_config
from methods import build_method
from methods.shared.trees.static import auto_tree, load_stats
from methods.token_recycling.calibration import write_tree_stats

CONTEXT = 512
WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128)
# The graph engine's static cache is sized to what it serves (bench.core.graph_engine.sized_capacity: T(n)'s
# CONTEXT + 128, the runs' prompts and output, as transformers sizes the static cache it is timed against); T(n) is
# also timed at the fixed 2048 positions the runs used until 2026-11-28 night (`graph_wide`): what attending over
# unused columns costs
WIDE_CAPACITY = 2048
AUTO = "token_recycling_auto"  # Token Recycling with the tree chosen on the graph curve, beside the 80-node one
# the demo's calibration (conf/experiment/demo_tree.yaml): HumanEval past the 2 x speedup_prompts tasks timed here
CALIBRATION = ("tree.calibration.dataset=humaneval", "tree.calibration.skip=20", "tree.calibration.limit=8")
SMALL_CALIBRATION = ("tree.calibration.limit=2", "tree.calibration.max_new_tokens=8")  # a CPU's tiny model
WAITED = ("ar", "token_recycling", "medusa")  # the graph-mode steps whose host waits are counted
HEADS = "medusa"  # timed in graph mode too, on zero-block heads (its whole step one graph, fed the hidden state)


def graph_engine(bundle, capacity: int) -> GraphEngine:
    return GraphEngine(bundle.model, bundle.eos_token_ids, bundle.max_context, capacity, device=bundle.device)


def run_capacity(rows: list[list[int]], max_new: int) -> int:
    """The static cache for decoding `rows` with `max_new` new tokens each (and any method's draft)."""
    return sized_capacity(max(map(len, rows)) + max_new)


def curve_capacity(widths=WIDTHS, context: int = CONTEXT) -> int:
    """The static cache for T(n) after `context` cached tokens, n up to the widest of `widths`."""
    return sized_capacity(context + max(widths))


def forward_curve(bundle, label: str, widths=WIDTHS, context: int = CONTEXT, reps: int = 7,
                  engines: dict | None = None, profiled: tuple | None = None, optional: tuple = (),
                  progress=lambda rows: None) -> list[dict]:
    """ms of one bucket forward over n tokens after `context` cached ones on each of `engines`, taking turns at each
    n: by default static shapes run eagerly and replayed as a CUDA graph (on a CPU both run eagerly) at the capacity
    T(n) needs, and replayed over WIDE_CAPACITY columns (`graph_wide`); every forward attends over its whole cache.
    Each row records the engines' capacities (`capacity`: the first's); at the widths `profiled` (default: the first
    and the last) one replay of each capturing engine is profiled. An engine named in `optional` that fails (a
    node's first compile) is left out from then on, its error in each later row's `failed`, and the others go on.
    progress(rows so far) after each width: a lease's cap that falls inside the curve keeps the widths done."""
    sized = curve_capacity(widths, context)
    engines = engines or {"static_eager": GraphEngine(bundle.model, [], bundle.max_context, sized,
                                                      device=bundle.device, capture=False),
                          "graph": graph_engine(bundle, sized), "graph_wide": graph_engine(bundle, WIDE_CAPACITY)}
    capacities = {name: e.kv.capacity for name, e in engines.items()}
    vocab = bundle.model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    rows, failed = [], {}
    with torch.inference_mode():
        for n in widths:
            tree, tokens = chain(n - 1), torch.randint(0, vocab, (n,), generator=gen).to(bundle.device)
            times = {k: [] for k in engines if k not in failed}
            for rep in range(reps + 1):
                for name, engine in engines.items():
                    if name in failed:
                        continue
                    engine.kv.length.fill_(context)  # a filled cache: its values do not change the cost
                    bucket = engine.bucket(n, False, {})
                    engine.fill(bucket, tokens[:1], tokens[1:], tree)
                    device_sync(engine.device)
                    t0 = time.perf_counter()
                    try:
                        engine.forward_bucket(bucket, False, {})
                        device_sync(engine.device)
                    except Exception as err:
                        if name not in optional:
                            raise
                        failed[name] = error_line(err)  # not called again: a failed compile is not cached
                        del times[name]
                        continue
                    if rep:  # the first: warm-up (and the capture)
                        times[name].append(time.perf_counter() - t0)
            rows.append({"model": label, "n": n, "context": context, "capacity": next(iter(capacities.values())),
                         "capacities": capacities, **({"failed": dict(failed)} if failed else {}),
                         **{f"{k}_ms": round(1000 * statistics.median(v), 3) for k, v in times.items()}})
            capturing = {name: e for name, e in engines.items() if e.capture and name not in failed}
            if n in (profiled or (widths[0], widths[-1])) and capturing:  # what one replay's kernels cost
                rows[-1]["replay"] = replay_profiles(capturing, n, context)
            progress(rows)
    return rows


def error_line(err: Exception) -> str:
    """An exception as one line: its type and its message's first line, and the next where the first only leads to
    it (torch.compile's "backend='inductor' raised:")."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [""]
    return f"{type(err).__name__}: " + " ".join(lines[:2] if lines[0].endswith(":") else lines[:1])


def ar_three_ways(bundle, rows: list[list[int]], max_new: int, reps: int, engines: dict | None = None,
                  hf: bool = True, progress=lambda ar: None) -> dict:
    """AR on each of `engines` (default: the eager engine, then the graph engine) and transformers' static-cache
    generate (unless `hf` is False), taking turns prompt by prompt (the first rotating: speedup_check.turn_order)
    after one untimed pass: tokens/s over all timed passes, each engine's rate over the first's and over HF's, and
    outputs against the first engine's (identical, graded). A way other than the first that fails (a node's first
    compile) is left out, its error in `failed` (HF's in `hf_static`), and the others go on. progress(figures so
    far) after each timed pass (`passes`: how many), where a lease's cap may fall."""
    compiled, how = compiles(bundle.device)
    eager = method_check.engine_for(bundle, 0.0)
    engines = engines or {"eager": eager, "graph": graph_engine(bundle, run_capacity(rows, max_new))}
    ways = {name: (build_method(compose_config(["method=ar"]).method, bundle), engine)
            for name, engine in engines.items()}
    if hf:
        ways["hf_static"] = (StaticCacheGenerate(bundle, compiled, run_capacity(rows, max_new)), eager)
    ref = next(iter(engines))
    tokens = {k: 0 for k in ways}
    seconds = {k: 0.0 for k in ways}
    outputs: dict[str, list] = {k: [None] * len(rows) for k in ways}
    failed = {}

    def figures(passes: int, graded: bool = True) -> dict:
        ran = [k for k in ways if k not in failed]
        rate = {k: tokens[k] / seconds[k] for k in ran}
        others = [k for k in ran if k != ref]
        lost = {k: v for k, v in failed.items() if k != "hf_static"}  # (HF's has its own key)
        out = {"prompts": len(rows), "max_new_tokens": max_new, "reps": passes,
               **({"passes_planned": reps} if passes < reps else {}),
               "capacities": {k: e.kv.capacity for k, e in engines.items() if isinstance(e, GraphEngine)},
               "hf_static": f"failed: {failed['hf_static']}" if "hf_static" in failed else how if hf else "not timed",
               **({"failed": lost} if lost else {}),
               **{f"{k}_tok_s": round(v, 1) for k, v in rate.items()},
               **{f"{k}_over_{ref}": round(rate[k] / rate[ref], 3) for k in others if k != "hf_static"},
               **{f"{k}_identical": sum(a == b for a, b in zip(outputs[k], outputs[ref])) for k in others}}
        if graded:
            out["grades"] = {k: [method_check.graded(bundle, p, a, b) for p, a, b in zip(rows, outputs[k], outputs[ref])]
                             for k in others}
        if "hf_static" in rate:
            out |= {f"{k}_over_hf_static": round(rate[k] / rate["hf_static"], 3) for k in others if k != "hf_static"}
        return out

    for rep in range(reps + 1):
        for i, prompt in enumerate(rows):
            for name, (method, engine) in speedup_check.turn_order(ways, (rep - 1) * len(rows) + i if rep else 0):
                if name in failed:
                    continue
                device_sync(bundle.device)
                t0 = time.perf_counter()
                try:
                    gen = method.generate(engine, prompt, max_new, PhaseTimer(bundle.device, sync=False))
                except Exception as err:  # a node's first compile may fail: the others go on (not the reference)
                    if name == ref:
                        raise
                    failed[name] = error_line(err)
                    continue
                device_sync(bundle.device)
                if rep:
                    tokens[name] += len(gen.output_ids)
                    seconds[name] += time.perf_counter() - t0
                    outputs[name][i] = gen.output_ids
        if rep == 0 and hf and compiled and "hf_static" not in failed and not compiled_by_transformers(bundle.model):
            how = "transformers compiled nothing (its own criteria unmet): timed uncompiled"
        if 0 < rep < reps:  # the figures so far, without the grades (a forward each where outputs differ)
            progress(figures(rep, graded=False))
    return figures(reps)


def at_paths(cfg, paths: list[list[int]]):
    """`cfg` with its method's tree set to these choice paths (the tree tree=auto chose on the graph curve)."""
    cfg.method.tree = {"name": "auto-graphs", "kind": "template", "paths": paths}
    return cfg


def graph_tree(bundle, t_n: list[dict], cache_dir, small: bool = False) -> tuple:
    """(Token Recycling's run config, what to record) with `tree=auto` chosen on the graph regime's T(n) of
    `bundle` (`t_n`: the T(n) stage's rows of its model) instead of the eager curve the runs measure: the tree
    statistics calibrated here first (cached under cache_dir, as `make tree-stats` caches them)."""
    cfg = compose_config(["method=token_recycling", "tree=auto", f"paths.results={cache_dir}", *CALIBRATION,
                          *(SMALL_CALIBRATION if small else ())])
    write_tree_stats(cfg.tree.calibration, bundle)
    mine = sorted(t_n, key=lambda r: r["n"])
    if len(mine) < 2:
        raise ValueError("no graph T(n) of the methods' model to choose a tree on (its T(n) stage failed)")
    curve = {"sizes": [r["n"] for r in mine], "ms": [r["graph_ms"] for r in mine], "machine": "the graph part's T(n)"}
    paths, info = auto_tree(load_stats(cfg.tree.calibration, bundle), curve, cfg.tree.sizes, cfg.tree.max_depth)
    return at_paths(cfg, paths), {"size": len(paths), "depth": max(map(len, paths)),
                 "predicted_mat": round(float(info["predicted_mat"]), 3),
                 "predicted_speedup": round(float(info["predicted_speedup_vs_ar"]), 3),
                 "paths": paths}  # the tree itself: what pricing its steps later needs (`method.tree.paths`)


def speedups(bundle, timed, warm, names, max_new: int, reps: int, progress=lambda out: None, configs=None) -> dict:
    """interleaved_speedup on the graph engine (no diagnostics: the eager part has them)."""
    engine = graph_engine(bundle, run_capacity(timed + warm, max_new))
    out = speedup_check.interleaved_speedup(bundle, timed, warm, names, max_new, reps, progress=progress,
                                           engine=engine, diagnostics=False, configs=configs)
    return out | {"capacity": engine.kv.capacity}


def graph_waits(bundle, rows: list[list[int]], max_new: int, names=WAITED) -> dict:
    """Host waits per decode step of each method in graph mode: counted by bench.core.syncs on any device and,
    on CUDA, by torch's sync debug mode with its source lines (method_check.summarise), after one untimed
    generation that captures the graphs."""
    engine, out = graph_engine(bundle, run_capacity(rows, max_new)), {}
    for name in names:
        method = build_method(compose_config([f"method={name}"]).method, bundle)
        method_check.run_rows(method, engine, rows[:1], 1, 4, 0.0)
        with HostSyncCounter() as counter, CudaSyncWarnings(engine.device) as cuda:
            gens = method_check.run_rows(method, engine, rows, 1, max_new, 0.0)
        out[name] = method_check.summarise(gens, counter, 1, cuda)
        # the reads of results, apart from each prompt's two transfers in: the goal is 1 a step, the outcome
        out[name]["reads_per_step"] = round(sum(counter.reads.values()) / max(out[name]["steps"], 1), 2)
    return out


def ar_notes(ar: dict) -> str:
    """For ar_three_ways' table line: its ways that failed (HF's is in its own column), and its passes where a cap
    fell inside the stage (the figures saved after the last pass that ended)."""
    cut = f"; {ar['reps']} of {ar['passes_planned']} timed passes (cut)" if "passes_planned" in ar else ""
    return "".join(f"; {name} failed: {error}" for name, error in ar.get("failed", {}).items()) + cut


def stager(out: dict, progress):
    """`with stage(name):` runs a stage of a part: a failure is recorded in out["errors"][name] ({"error",
    "traceback"}) and the next stage runs (a first lease should bring back all it can); its seconds go to
    out["seconds"][name], and progress(out) gets the results so far."""
    lap = [time.perf_counter()]

    @contextmanager
    def stage(name: str):
        try:
            yield
        except Exception as err:  # noqa: BLE001 (the check's point: record any failure, go on)
            out["errors"][name] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        out["seconds"][name], lap[0] = round(time.perf_counter() - lap[0], 1), time.perf_counter()
        progress(out)

    return stage


def methods_label(sizes) -> str:
    """The label of the cost model that is the methods' model (its T(n) rows carry it)."""
    return next(label for label, shape in sizes.cost_models if shape == sizes.method_shape)


def run_graphs(sizes, load, free, bundle, progress=lambda out: None, scratch=None, configs=None) -> dict:
    """The graph part: T(n) both ways per cost model (load(shape, dtype) gives its bundle, free(bundle) drops it),
    AR three ways on the methods' model and each hf_shape, the speedups in graph mode on the methods' model
    (`bundle`; `configs`, {name: run config}, as the speedup part's). A stage that fails records {"error": ...,
    "traceback": ...} and the next one runs: a first lease should bring back all it can. `progress(out)` gets the
    results so far after each stage."""
    out: dict = {"context": CONTEXT, "t_n": [], "ar": {}, "errors": {}, "seconds": {}}
    stage = stager(out, progress)

    @contextmanager
    def model_of(shape):  # the methods' own bundle, or another loaded for the stage and freed after it
        model = bundle if shape == sizes.method_shape else load(shape, sizes.method_dtype)
        try:
            yield model
        finally:
            if model is not bundle:
                free(model)

    for label, shape in sizes.cost_models:
        with stage(f"t_n {label}"), model_of(shape) as model:
            out["t_n"] += forward_curve(model, label, sizes.cost_sizes, reps=sizes.reps,
                                        progress=lambda rows: progress({**out, "t_n": out["t_n"] + rows}))
    rows = method_check.prompts(bundle, 2 * sizes.speedup_prompts)
    timed, warm = rows[: sizes.speedup_prompts], rows[sizes.speedup_prompts :]

    def ar_on(label, shape):
        with stage(f"ar {label}"), model_of(shape) as model:
            vocab = model.model.config.vocab_size  # a random shape's may be smaller than the tokenizer's
            out["ar"][label] = ar_three_ways(model, [[i % vocab for i in r] for r in timed[:2]], sizes.timed_new,
                                             sizes.timed_reps,
                                             progress=lambda ar: progress({**out, "ar": {**out["ar"], label: ar}}))

    ar_on(bundle.name, sizes.method_shape)
    configs = dict(configs or {})
    if scratch is not None and "token_recycling" in sizes.speedup:
        with stage("tree auto"):
            mine = [r for r in out["t_n"] if r["model"] == methods_label(sizes)]
            configs[AUTO], out["tree_auto"] = graph_tree(bundle, mine, scratch, sizes.method_shape is not None)
    with stage("speedup"):
        if getattr(bundle, "heads", None) is None:  # the methods part's untrained heads, if it has not run
            bundle.heads = init_heads(bundle.model.get_output_embeddings(), 5)
        auto = (AUTO,) if AUTO in configs else ()  # configs also holds every other method's: not all are run
        names = tuple(dict.fromkeys((*sizes.speedup, HEADS, *auto)))
        out["speedup"] = speedups(bundle, timed, warm, names, sizes.timed_new, sizes.speedup_reps, configs=configs,
                                  progress=lambda sp: progress({**out, "speedup": sp}))  # after each timed pass
    with stage("waits"):
        out["waits"] = graph_waits(bundle, timed[:2], sizes.timed_new)
    for shape in sizes.hf_shapes:  # last: the 7B's stage is the longest (HF's compile), and a lease has timed it
        ar_on(shape, shape)
    return out


def table_lines(graphs: dict) -> list[str]:
    """gpu-check's table for the graph part."""
    lines = []
    if graphs.get("t_n"):
        ns = sorted({r["n"] for r in graphs["t_n"]})
        wide = next((r["capacities"]["graph_wide"] for r in graphs["t_n"] if "graph_wide_ms" in r), None)
        lines += [f"| T(n) ms after {graphs['context']} cached, static eager / graph"
                  + (f" / graph over {wide} columns" if wide else "") + " | "
                  + " | ".join(f"n={n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]
        for label in dict.fromkeys(r["model"] for r in graphs["t_n"]):
            by = {r["n"]: r for r in graphs["t_n"] if r["model"] == label}
            lines.append(f"| {label} | " + " | ".join(
                " / ".join(f"{by[n][k]:.2f}" for k in ("static_eager_ms", "graph_ms", "graph_wide_ms") if k in by[n])
                for n in ns) + " |")
        if caps := graphs["t_n"][0].get("capacities"):
            lines.append("static caches: " + ", ".join(f"{k} {v}" for k, v in caps.items()))
        lines += replay_lines(graphs["t_n"])
        lines.append("")
    for label, ar in graphs.get("ar", {}).items():
        caps = f" (static cache {ar['capacities']['graph']})" if "capacities" in ar else ""
        lines.append(f"AR on {label}: eager {ar['eager_tok_s']}, graph{caps} {ar.get('graph_tok_s', '-')}, HF static "
                     f"cache {ar.get('hf_static_tok_s', '-')} tok/s ({ar['hf_static']}); graph/eager "
                     f"x{ar.get('graph_over_eager', '-')}, graph/HF x{ar.get('graph_over_hf_static', '-')}; identical "
                     f"to eager: graph {ar.get('graph_identical', '-')}/{ar['prompts']}, HF "
                     f"{ar.get('hf_static_identical', '-')}/{ar['prompts']}" + ar_notes(ar))
    lines += [f"graph part's {name} failed: {e['error']}" for name, e in graphs.get("errors", {}).items()]
    if tree := graphs.get("tree_auto"):
        lines.append(f"{AUTO}: tree=auto on the graph T(n): {tree['size']} nodes, depth {tree['depth']}, predicted "
                     f"MAT {tree['predicted_mat']} and x{tree['predicted_speedup']} over graph AR")
    sp = graphs.get("speedup")
    if sp:
        lines += ["", (f"graph mode, taking turns, {sp['prompts']} prompts x {sp['max_new_tokens']} tokens, "
                      f"{sp['reps']} passes:")]
        lines += [f"- {name}: {r['tok_s']} tok/s, MAT {r['mat']}, x{r['speedup']}"
                  + (" [{}, {}]".format(*r["speedup_interval"]) if r.get("speedup_interval") else "")
                  + speedup_check.alike(r)
                  for name, r in sp.items() if isinstance(r, dict) and "tok_s" in r]
    if waits := graphs.get("waits"):
        lines += ["", "host waits per step in graph mode (counted, of them reads; under CUDA's sync debug mode): "
                  + ", ".join(f"{name} {w['host_waits_per_step']}, reads {w['reads_per_step']}; "
                              f"{w.get('cuda_syncs_per_step', '-')}" for name, w in waits.items())]
    return lines
