"""The timed comparisons of `make gpu-check` (bench.check.gpu_check): methods against a baseline taking turns prompt by
prompt (the speedup part, with where a step's time goes), our AR against HF generate, eager against sdpa attention.
Each on one model bundle and a few prompts, on the methods part's untrained parts where a method needs them
(bench.check.method_check); every timed region is synced at both ends."""

from __future__ import annotations

import statistics
import time
from collections import Counter

import numpy as np

from bench.check.method_check import engine_for, graded
from bench.core.launches import ops_per_step
from bench.core.proposer import Replay
from bench.core.step_profile import step_profile
from bench.core.timing import PhaseTimer, device_sync, per_decode_step
from bench.metrics import bootstrap_interval, ratio_of_rates
from bench.run.compose import compose_config
from methods import build_method

DIAGNOSED_PROMPTS = 2  # prompts of the speedup part's synced pass
PROFILED_NEW = 48  # tokens under torch.profiler per method: ~4 events a GPU op, each parsed in Python afterwards


def one_pass(method, engine, rows, max_new: int) -> tuple[list, float]:
    """The generations of `rows` one by one and the seconds they took, synced at both ends."""
    device_sync(engine.device)
    t0 = time.perf_counter()
    outputs = [method.generate(engine, p, max_new, PhaseTimer(engine.device, sync=False)) for p in rows]
    device_sync(engine.device)
    return outputs, time.perf_counter() - t0


def timed_generate(method, engine, rows, max_new: int, reps: int) -> tuple[list[list[int]], float, int]:
    """Outputs, the median tokens/s over `reps` passes of the prompts (synced at both ends; one more pass first,
    untimed, as warm-up) and the decode steps of a pass. Every pass starts from the method's state before the first
    (bench.core.proposer.Replay), so each decodes as the first did."""
    rates, outputs, replay = [], [], Replay()
    for rep in range(reps + 1):
        replay.start(method, "pass")
        outputs, seconds = one_pass(method, engine, rows, max_new)
        if rep:
            rates.append(sum(len(g.output_ids) for g in outputs) / seconds)
    steps = sum(len(g.accept_lengths) for g in outputs)
    return [g.output_ids for g in outputs], statistics.median(rates), steps


def interleaved_speedup(bundle, rows, warm, names: tuple[str, ...], max_new: int, reps: int,
                        progress=lambda out: None, engine=None, diagnostics: bool = True, configs=None) -> dict:
    """Each method's greedy tokens/s on the same prompts, the methods taking turns prompt by prompt, the first
    rotating (`turn_order`), after one untimed pass over the `warm` prompts (the device warms up, and a method that
    learns across prompts, as Token Recycling's hot matrix does, learns as in a run, but not from the timed prompts;
    every timed pass of a prompt starts from the state its first did: bench.core.proposer.Replay), so that a machine
    whose speed drifts slows them alike: per method its tok/s and speedup over the first method over all timed
    passes (all tokens / all seconds), the speedup's 95% interval (a paired bootstrap over the timed (pass, prompt)
    pairs, bench.metrics), its speedup on each pass and on the fastest pass of each prompt (`best_speedup`: a busy
    machine only ever adds time), the raw [tokens, seconds] of each timed pair, MAT, its grades against the first
    method. Then where a step's time goes, the methods again taking turns: ms per decode step by phase from a pass
    synced at every phase boundary (apart: syncs cost time of their own) over the first DIAGNOSED_PROMPTS prompts,
    the ops (kernel launches) per step by phase on the first prompt, and its profile (bench.core.step_profile) over
    the first PROFILED_NEW tokens of the first prompt: the device's own launches, waits and busy time by phase.
    `seconds`: what each of these took (a lease's budget). `progress(out)` gets the speedups before the diagnostics
    start. `engine`: the one they decode on (the eager engine by default; the graph part passes a GraphEngine);
    `diagnostics`: False stops after the speedups; `configs`: run configs by method (`method_configs`, with the
    untrained parts), else each method's defaults."""
    engine = engine or engine_for(bundle, 0.0)
    methods = {n: build_method((configs[n] if configs and n in configs else compose_config([f"method={n}"])).method,
                               bundle) for n in names}
    gens = {n: [] for n in names}  # every timed generation, pass-major: outputs, and the timed steps' own phases
    timed = {n: [] for n in names}  # per timed (pass, prompt): [tokens, seconds]
    lap, replay = time.perf_counter(), Replay()
    for rep in range(reps + 1):
        for i, prompt in enumerate(rows if rep else warm):
            for name, method in turn_order(methods, (rep - 1) * len(rows) + i if rep else 0):
                if rep:
                    replay.start(method, (name, i))
                (gen,), seconds = one_pass(method, engine, [prompt], max_new)
                if rep:
                    gens[name].append(gen)
                    timed[name].append([len(gen.output_ids), seconds])
        if rep:  # the passes so far survive a lease that ends in the next one, or in the diagnostics
            out = speedups(bundle, rows, max_new, rep, gens, timed)
            out["seconds"] = {"timed": round(time.perf_counter() - lap, 1)}
            progress(out)
    if diagnostics:  # T(n) right after the timed passes, at their mean context: the forward alone (a few seconds)
        lap = time.perf_counter()
        last = gens[names[0]][-len(rows):]  # the baseline's last timed pass
        try:  # a failed probe costs only itself
            out["forward_probe"] = forward_probe(bundle, round(np.mean([len(p) + len(g.output_ids) / 2
                                                                         for p, g in zip(rows, last)])))
        except Exception as err:  # noqa: BLE001
            out["forward_probe"] = {"error": f"{type(err).__name__}: {err}"}
        out["seconds"]["probe"] = round(time.perf_counter() - lap, 1)
        progress(out)
        diagnose(out, methods, engine, replay, rows, max_new, progress)
    return out


def speedups(bundle, rows, max_new: int, reps: int, gens: dict, timed: dict) -> dict:
    """interleaved_speedup's figures from its first `reps` timed passes (`gens`, `timed`: pass-major, by method; the
    first method is the baseline)."""
    names = list(gens)
    outputs = {n: g[-len(rows):] for n, g in gens.items()}  # the last timed pass (every pass decodes alike)
    base = names[0]
    out = {"prompts": len(rows), "prompt_tokens": [len(p) for p in rows], "max_new_tokens": max_new, "reps": reps,
           "baseline": base, "order": "rotated"}
    for name in names:
        accepted = [a for g in outputs[name] for a in g.accept_lengths]
        pairs = np.concatenate([timed[name], timed[base]], axis=1).T  # tokens, seconds, base tokens, base seconds
        interval = bootstrap_interval(list(pairs), ratio_of_rates)
        out[name] = {"tok_s": round(pairs[0].sum() / pairs[1].sum(), 1), "mat": round(sum(accepted) / len(accepted), 3),
                     "speedup": round(float(ratio_of_rates(*pairs)), 3),
                     "speedup_interval": [round(x, 3) for x in interval] if interval else None,
                     "speedups": [round(float(ratio_of_rates(*one)), 3) for one in np.split(pairs, reps, axis=1)],
                     "best_speedup": round(float(ratio_of_rates(*fastest_pass(pairs, reps))), 3),
                     "timed": [[t, round(s, 4)] for t, s in timed[name]],
                     # per prompt: did every timed pass decode it alike (each starts from the same state, so greedy
                     # decoding must; the H200's graph mode of 2026-11-28 did not, eager did)
                     "same_every_pass": [len({tuple(g.output_ids) for g in gens[name][i :: len(rows)]}) == 1
                                         for i in range(len(rows))],
                     "pass_departures": pass_departures(bundle, rows, gens[name]),
                     **timed_phases(gens[name], [s for _, s in timed[name]]),
                     "grades": [graded(bundle, p, g.output_ids, b.output_ids)
                                for p, g, b in zip(rows, outputs[name], outputs[base], strict=True)]}
    return out


def pass_departures(bundle, rows, gens: list) -> dict:
    """{prompt index: each later timed pass graded against the first, with where it departs} for the prompts some
    pass decoded otherwise (`gens` pass-major). Each pass starts from one state: a near-tie says the device summed
    otherwise from pass to pass (a kernel whose order of sums varies), a mismatch that a pass carried state over."""
    out = {}
    for i, prompt in enumerate(rows):
        first, *later = [g.output_ids for g in gens[i :: len(rows)]]
        if any(p != first for p in later):
            out[str(i)] = [graded(bundle, prompt, p, first, where=True) for p in later]
    return out


def alike(r: dict) -> str:
    """A speedup row's note where some prompt decoded otherwise in another timed pass (each starts from one state),
    with how the later passes departed from the first."""
    same = r.get("same_every_pass")
    how = "; ".join(f"prompt {i}: {', '.join(g)}" for i, g in r.get("pass_departures", {}).items())
    return (f"; alike in every pass {sum(same)}/{len(same)}" + (f" ({how})" if how else "")
            if same and not all(same) else "")


def turn_order(methods: dict, turn: int) -> list:
    """The methods' (name, method) pairs at timed turn `turn` (a pass and prompt), rotated by one each turn: whatever
    going first costs falls on every method alike (the 11-28 H200 lease ran AR first at every prompt)."""
    items = list(methods.items())
    k = turn % len(items)
    return items[k:] + items[:k]


def timed_phases(gens, seconds: list[float]) -> dict:
    """Where the timed passes' steps went, from their own phase times (unsynced: on an asynchronous device a
    phase's host time, a wait charged to the phase that waits): ms per decode step by phase; per generation (each
    took `seconds`) its decode steps and its ms in all, in the prefill and outside every phase; the widths of the
    verification forwards (verified nodes and the root: steps at each, their mean; 1 where none are recorded)."""
    if not any(g.phase_times for g in gens):
        return {}
    widths = Counter(1 + n for g in gens for n in g.verified_nodes)
    per_generation = {"decode_steps": np.mean([len(g.accept_lengths) - 1 for g in gens]),
                      "wall_ms": 1000 * np.mean(seconds),
                      "prefill_ms": 1000 * np.mean([g.phase_times.get("prefill", 0.0) for g in gens]),
                      "untimed_ms": 1000 * np.mean([s - sum(g.phase_times.values()) for g, s in zip(gens, seconds)])}
    return {"ms_per_step_timed": {k: round(1000 * v, 3) for k, v in per_decode_step(gens).items()},
            "per_generation": {k: round(float(v), 3) for k, v in per_generation.items()},
            "widths": {w: widths[w] for w in sorted(widths)},
            "mean_width": round(sum(w * c for w, c in widths.items()) / widths.total(), 2) if widths else 1.0}


def forward_probe(bundle, context: int) -> dict:
    """The bare forward's T(n) at `context` cached tokens (bench.models.forward_cost.measure, its sizes, 5
    repeats taking turns: ~3 s on a GPU), to set beside each method's forward as its timed passes ran it
    (`ms_per_step_timed`)."""
    from bench.models.forward_cost import measure

    return {"context": context, "ms": {n: round(1000 * s, 3) for n, s in measure(bundle, prefix_tokens=context,
                                                                                   reps=5).items()}}


def diagnose(out: dict, methods: dict, engine, replay: Replay, rows, max_new: int, progress=lambda out: None) -> None:
    """interleaved_speedup's diagnostics into each method's row of `out`, and each stage's seconds; progress(out)
    after each stage (a lease's cap falls in them)."""
    lap = time.perf_counter()

    def stage(name: str) -> None:
        nonlocal lap
        out["seconds"][name], lap = round(time.perf_counter() - lap, 1), time.perf_counter()
        progress(out)

    synced = {n: [] for n in methods}
    for i, prompt in enumerate(rows[:DIAGNOSED_PROMPTS]):
        for name, method in methods.items():
            replay.start(method, (name, i))
            synced[name].append(synced_generation(method, engine, prompt, max_new))
    for name in methods:
        out[name]["ms_per_step"] = {k: round(1000 * v, 3) for k, v in per_decode_step(synced[name]).items()}
    stage("synced")
    for name, method in methods.items():
        replay.start(method, (name, 0))
        out[name]["ops_per_step"] = ops_per_step(method, engine, rows[:1], max_new)
    stage("ops")
    # the profiler's first use starts CUPTI, which slowed the first method's profile (AR's forward 110 ms a step
    # on the H100, 61 ms for Token Recycling's after it): a short profile first, thrown away
    profiled(next(iter(methods.values())), engine, rows[:1], 2)
    for name, method in methods.items():
        replay.start(method, (name, 0))
        out[name]["profile"] = profiled(method, engine, rows[:1], min(max_new, PROFILED_NEW))
    stage("profile")


def fastest_pass(pairs: np.ndarray, reps: int) -> np.ndarray:
    """pairs [4, reps * prompts] (tokens, seconds, base tokens, base seconds; pass-major) -> [4, prompts]: each
    prompt's fastest timed pass, for each method on its own (its tokens are the same on every greedy pass)."""
    per = pairs.reshape(4, reps, -1)
    best = np.stack([np.argmin(per[1], axis=0), np.argmin(per[3], axis=0)])
    cols = np.arange(per.shape[2])
    return np.stack([per[0][best[0], cols], per[1][best[0], cols], per[2][best[1], cols], per[3][best[1], cols]])


def profiled(method, engine, rows, max_new: int) -> dict:
    """step_profile, or {"error": what failed}: a profiler that fails on a node (no CUPTI there) costs its own
    tables, not the part's."""
    try:
        return step_profile(method, engine, rows, max_new)
    except Exception as err:  # noqa: BLE001 (any failure of the profiler is reported, not raised)
        return {"error": f"{type(err).__name__}: {err}"}


def synced_generation(method, engine, prompt: list[int], max_new: int):
    """A generation whose phase times are synced at every phase boundary: where a method's time per step goes on
    a device (drafting, verifying, updating); bench.core.timing.per_decode_step reduces them."""
    return method.generate(engine, prompt, max_new, PhaseTimer(engine.device))


def ar_vs_hf(bundle, rows, max_new: int, reps: int) -> dict:
    """Our AR against transformers' greedy generate on the same model object: tokens/s and identical outputs."""
    engine = engine_for(bundle, 0.0)
    ours = build_method(compose_config(["method=ar"]).method, bundle)
    hf = build_method(compose_config(["method=hf_generate"]).method, bundle)
    ar_out, ar_rate, _ = timed_generate(ours, engine, rows, max_new, reps)
    hf_out, hf_rate, _ = timed_generate(hf, engine, rows, max_new, reps)  # (HF generate ignores the engine)
    return {"ar_tok_s": round(ar_rate, 1), "hf_generate_tok_s": round(hf_rate, 1),
            "ar_over_hf": round(ar_rate / hf_rate, 3), "prompts": len(rows), "max_new_tokens": max_new,
            "identical": sum(a == h for a, h in zip(ar_out, hf_out)),
            "grades": [graded(bundle, p, a, h) for p, a, h in zip(rows, ar_out, hf_out)]}


def attention_pair(bundle, rows, max_new: int, reps: int, tree_method: str = "token_recycling") -> list[dict]:
    """eager against sdpa on the bundle's own weights (switched in place, then restored): for AR (a chain, no
    mask) and a tree method (a 4D tree mask), whether their outputs agree (graded) and ms per decode step."""
    model, out = bundle.model, []
    own = model.config._attn_implementation
    try:
        for name in ("ar", tree_method):
            per = {}
            for impl in ("eager", "sdpa"):
                model.set_attn_implementation(impl)
                method = build_method(compose_config([f"method={name}"]).method, bundle)
                outputs, rate, steps = timed_generate(method, engine_for(bundle, 0.0), rows, max_new, reps)
                per[impl] = {"outputs": outputs, "ms_per_step": 1000 * sum(map(len, outputs)) / rate / steps}
            eager, sdpa = per["eager"]["outputs"], per["sdpa"]["outputs"]
            out.append({"method": name, "identical": sum(a == b for a, b in zip(eager, sdpa)), "prompts": len(rows),
                        "grades": [graded(bundle, p, b, a) for p, a, b in zip(rows, eager, sdpa)],
                        **{f"{impl}_ms_per_step": round(v["ms_per_step"], 2) for impl, v in per.items()}})
    finally:
        model.set_attn_implementation(own)
    return out
