"""`make gpu-check`: what a GPU node does with this harness, in minutes, offline, into one folder and one table.

    python -m bench.check.gpu_check [--sizes gpu|cpu] [--small] [--device cuda] [--out DIR] [--partial FILE]
                                  [--only PART,...] [--methods NAME,...] [--speedup-methods NAME,...]
                                  [--speedup-reps N] [--timed-new N] [--max-new N]
    python -m bench.check.gpu_check --merge FILE... --out DIR    (a lease's calls' results as one folder)

Records (docs/gpu.md): the environment; the target forward's cost T(n, context) after 512, 128 and 2048 cached
tokens in fp16 and bf16 for the embedded model and for the papers' 7B and 13B Llama shapes with random weights
(bench.models.random_init), also as cost profiles (profiles/*.json: bench/cost/profiles.py, docs/cost_model.md);
our AR against HF generate (also on the 7B shape); AR, Token Recycling and PLD taking turns prompt by prompt
in bf16 (a speedup a drifting machine cannot fake, with its interval); every registered method at batch 1 and
4, T = 0 and 0.6, in bf16 (no crash, host waits per step and a decode step's per row against the CPU suite's
budget, on CUDA also torch's sync-debug count and its callers, graded losslessness at T = 0); eager against sdpa attention;
the engine's graph mode beside the eager one (graphs, compiled) and every method in it (graph_methods); whether two
prompts decode alike every time, eager, in graph mode's static code and captured (repeats). `--only` and `--methods`
pick parts and methods: on the H200 measured (docs/gpu.md) the parts before the methods took 347 s over two calls
and one method row 1.4-74.1 s (DySpec's four rows 174 s). `--sizes cpu` (`--small`, the default without CUDA) runs the same code on
a tiny random model in seconds, which is how the suite tests it (tests/test_gpu_check.py).

The folder, results/gpu_check/<machine>-<time>/ by default, holds JSON, CSV and md files only (no token ids), so it
can be committed as it is: `make evidence` copies every such folder into evidence/gpu_check/. `--partial FILE`
rewrites FILE with the parts done so far after each part, for a lease that may end before the last part
(scripts/gpu_session.sh); the folder is written only when every part is done. `--merge` runs nothing: it writes
one folder from several calls' results files (bench.check.lease_merge: which call ran what in
environment.calls).
"""

from __future__ import annotations

import argparse
import csv
import functools
import gc
import json
import platform
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path

import torch

from bench.cachefile import atomic_write
from bench.check import compiled_check, graph_check, method_check, repeat_check, speedup_check
from bench.check.check_table import table
from bench.check.lease_merge import merged
from bench.cli import OneLineParser
from bench.core.machine import machine_id
from bench.cost.profiles import Profile
from bench.errors import HarnessError
from bench.models import forward_cost
from bench.models.loading import load_model
from bench.models.random_init import SHAPES as RANDOM_SHAPES
from bench.paths import project_path
from bench.run.compose import compose_config
from bench.run.provenance import provenance
from methods import REGISTRY


@dataclass(frozen=True)
class Sizes:
    cost_models: tuple[tuple[str, str | None], ...]  # (label, random_init shape; None = the embedded weights)
    cost_sizes: tuple[int, ...]  # n of T(n)
    contexts: tuple[int, ...]  # tokens in the cache before each timed forward (T(n, context)); the table: the first
    prefill_sizes: tuple[int, ...]  # prompt lengths of the timed prefills (the profiles' prefill curve)
    reps: int  # timed repeats per size (median), after one warm-up
    method_shape: str | None  # the methods' model: a random_init shape, or None for the embedded weights
    method_dtype: str  # bfloat16 on a GPU; float32 on a CPU, whose bf16 GEMMs here cost 7x fp32's (same code paths)
    per_batch: int  # batches per method row: batch 1 decodes this many prompts, batch 4 four times as many
    max_new: int  # new tokens per method row
    timed_new: int  # new tokens per prompt of AR vs HF and eager vs sdpa
    timed_reps: int
    hf_shapes: tuple[str, ...]  # random_init shapes of AR vs HF generate beside the methods' model (token ids)
    speedup: tuple[str, ...] = ("ar", "token_recycling", "pld")  # taking turns on the methods' model, AR first
    speedup_prompts: int = 3  # prompts of each pass, max_new_tokens timed_new
    speedup_reps: int = 2  # timed passes per method
    # the compiled part's torch.compile backend: None, inductor on CUDA and aot_eager elsewhere (no C compiler
    # needed); "inductor" on a CPU rehearses a lease's compile (the same trace and lowering, C++ for triton)
    compile_backend: str | None = None


SIZES = {
    "gpu": Sizes((("smollm2-135m", None), ("llama-7b", "llama-7b"), ("llama-13b", "llama-13b")),
                 (1, 2, 4, 8, 16, 32, 64, 128), (512, 128, 2048), (64, 256, 1024), 7, None, "bfloat16", 2, 32, 128,
                 3, ("llama-7b",), speedup_prompts=4, speedup_reps=3),  # 3 x 2 on the H100: [1.35, 2.30]
    "cpu": Sizes((("tiny", "tiny"),), (1, 2, 4), (32, 8), (4, 16), 1, "tiny", "float32", 1, 3, 4, 1, ("tiny",)),
}
DTYPES = ("float16", "bfloat16")
COMPILE_BACKENDS = ("inductor", "aot_eager")
PARTS = ("forward_cost", "ar_vs_hf_shapes", "ar_vs_hf", "speedup", "methods", "attention", "graphs", "compiled",
         "graph_methods", "repeats")


def bundle_for(device: str, dtype: str, shape: str | None, model_cache="data/cache/models"):
    """The embedded model (or its tokenizer with random weights of `shape`) as the runs load it."""
    overrides = ["model=smollm2-135m", f"model.device={device}", f"model.dtype={dtype}", "model.cpu_linear=plain",
                 "model.attn_implementation=sdpa", "model.eagle.source=init", "model.eagle3.source=init"]
    if shape:
        overrides.append(f"model.random_init={shape}")
    return load_model(compose_config(overrides).model, str(project_path(model_cache)))


def environment(device: str) -> dict:
    import accelerate
    import transformers

    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
           "accelerate": accelerate.__version__, "python": platform.python_version(), "device": device,
           **{k: v for k, v in provenance(device, torch.bfloat16).items() if k in ("git_sha", "git_dirty", "cpu",
                                                                                     "hostname", "machine")}}
    if torch.device(device).type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                   capability=f"{props.major}.{props.minor}", gpus=torch.cuda.device_count())
    return env


def free(*bundles) -> None:
    """Drop models before the next one loads (a 13B in bf16 is 26 GB)."""
    for b in bundles:
        b.model = b.draft = b.heads = b.early_heads = b.eagle = b.eagle3 = None
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def forward_costs(sizes: Sizes, device: str) -> list[dict]:
    rows = []
    for label, shape in sizes.cost_models:
        for dtype in DTYPES:
            bundle = bundle_for(device, dtype, shape)
            for context in sizes.contexts:
                seconds = forward_cost.measure(bundle, sizes.cost_sizes, context, sizes.reps)
                rows += [{"model": label, "weights": "random" if shape else "embedded", "dtype": dtype,
                          "context": context, "n": n, "ms": round(1000 * s, 4)} for n, s in seconds.items()]
            # context "prefill": a prompt's forward from an empty cache, one token scored (Profile.prefill)
            seconds = forward_cost.measure_prefill(bundle, sizes.prefill_sizes, sizes.reps)
            rows += [{"model": label, "weights": "random" if shape else "embedded", "dtype": dtype,
                      "context": "prefill", "n": n, "ms": round(1000 * s, 4)} for n, s in seconds.items()]
            free(bundle)
    return rows


def ar_vs_hf_shapes(sizes: Sizes, device: str) -> dict:
    """AR against HF generate on each random-weight shape in bf16 (the papers' target sizes), fed the embedded
    tokenizer's prompts as ids below the shape's vocabulary (random weights: only the speed means anything)."""
    out = {}
    for shape in sizes.hf_shapes:
        bundle = bundle_for(device, "bfloat16", shape)
        vocab = bundle.model.config.vocab_size
        rows = [[i % vocab for i in row] for row in method_check.prompts(bundle, 2)]
        out[shape] = speedup_check.ar_vs_hf(bundle, rows, sizes.timed_new, sizes.timed_reps)
        free(bundle)
    return out


def run_checks(sizes: Sizes, device: str, scratch: Path, partial: Path | None = None, parts=PARTS,
               methods=None) -> dict:
    """The results of `parts` (all by default; `methods` names the methods part's methods, all by default; the
    speedup part's are `sizes.speedup`, those past AR, Token Recycling and PLD on the untrained parts);
    `scratch` holds what the methods need and the folder does not keep (a REST store, Sequoia's calibration);
    `partial`, when given, holds the results so far after each part."""
    results = {"sizes": asdict(sizes), "environment": environment(device), "seconds": {}}
    lap = time.perf_counter()

    def save(so_far: dict) -> None:
        if partial is not None:
            atomic_write(partial, json.dumps(so_far, indent=2) + "\n")

    def record(key: str, value) -> None:  # each part's result and how long it took (a lease's budget)
        nonlocal lap
        results[key], now = value, time.perf_counter()
        results["seconds"][key], lap = round(now - lap, 1), now
        save(results)

    save(results)  # the machine and versions, before a first part that a lease's cap may cut before it saves

    if "forward_cost" in parts:
        record("forward_cost", forward_costs(sizes, device))
    if "ar_vs_hf_shapes" in parts:
        record("ar_vs_hf_shapes", ar_vs_hf_shapes(sizes, device))
    bundle = bundle_for(device, sizes.method_dtype, sizes.method_shape)
    rows = method_check.prompts(bundle, 4 * sizes.per_batch)

    @functools.cache
    def shared() -> list[str]:  # the untrained parts (heads, a draft, a REST store on HumanEval): built once
        return method_check.add_untrained_parts(bundle, scratch)

    @functools.cache
    def configs() -> dict | None:  # the speedup and graph parts' run configs: the defaults' own need no parts
        if not set(sizes.speedup) - set(Sizes.speedup):
            return None
        return method_check.method_configs(shared(), sizes.method_shape is not None)

    if "ar_vs_hf" in parts:
        record("ar_vs_hf", speedup_check.ar_vs_hf(bundle, rows[:2], sizes.timed_new, sizes.timed_reps))
    if "speedup" in parts:
        both = method_check.prompts(bundle, 2 * sizes.speedup_prompts)  # the timed ones, then as many to warm up on
        timed, warm = both[: sizes.speedup_prompts], both[sizes.speedup_prompts :]
        record("speedup", speedup_check.interleaved_speedup(bundle, timed, warm, sizes.speedup, sizes.timed_new,
                                                           sizes.speedup_reps, configs=configs(),
                                                           progress=lambda sp: save({**results, "speedup": sp})))
    if "methods" in parts:
        # each method's rows saved as they come: the longest part
        record("methods", method_check.check_methods(bundle, rows, sizes.max_new, shared(),
                                                     progress=lambda recs: save({**results, "methods": recs}),
                                                     small=sizes.method_shape is not None, per_batch=sizes.per_batch,
                                                     only=methods))
    if "attention" in parts:
        record("attention", speedup_check.attention_pair(bundle, rows[:2], sizes.timed_new, sizes.timed_reps))
    if "graphs" in parts:  # the engine's graph mode beside the eager one (bench.check.graph_check)
        record("graphs", graph_check.run_graphs(sizes, lambda shape, dtype: bundle_for(device, dtype, shape), free,
                                                bundle, progress=lambda g: save({**results, "graphs": g}),
                                                scratch=scratch, configs=configs()))
    if "compiled" in parts:  # graph mode with its forward compiled (run.graph_compile) beside plain graph mode
        record("compiled", compiled_check.run_compiled(sizes, bundle, progress=lambda c: save({**results, "compiled": c}),
                                                    load=lambda shape, dtype: bundle_for(device, dtype, shape),
                                                    free=free))
    if "graph_methods" in parts:  # every method in graph mode, batch 1, T = 0: the methods part's rows, graph mode's
        record("graph_methods", method_check.check_methods(
            bundle, rows, sizes.max_new, shared(), small=sizes.method_shape is not None, per_batch=sizes.per_batch,
            batches=(1,), temperatures=(0.0,), only=methods, graphs=True,
            progress=lambda recs: save({**results, "graph_methods": recs})))
    if "repeats" in parts:  # prompts decoded alike every time, eager, static and captured? (bench.check.repeat_check)
        # the speedup part's first and third timed prompts (the same prompts): PLD's and AR's that departed
        record("repeats", repeat_check.repeats(bundle, [rows[0], rows[2]], sizes.timed_new,
                                               progress=lambda r: save({**results, "repeats": r})))
    free(bundle)
    return results


def write_csv(path: Path, rows: list[dict]) -> None:
    """One line a row; a dict value (the methods part's decode_waits) as columns of its own, `key.inner`."""
    rows = [{f"{k}.{i}" if isinstance(v, dict) else k: w for k, v in r.items()
             for i, w in (v.items() if isinstance(v, dict) else [(None, v)])} for r in rows]
    left_out = ("traceback", "waits", "cuda_sync_sites")  # (results.json has them)
    keys = list(dict.fromkeys(k for r in rows for k in r if k.split(".")[0] not in left_out))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()} for r in rows)


def write_folder(results: dict, out: Path) -> None:
    """results.json (everything), forward_cost.csv, methods.csv, graph_methods.csv and table.md (what was printed)."""
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    for part in ("forward_cost", "methods", "graph_methods"):
        if part in results:
            write_csv(out / f"{part}.csv", results[part])
    (out / "table.md").write_text(table(results))
    (out / "profiles").mkdir(exist_ok=True)
    for profile in profiles(results):
        profile.save(out / "profiles" / f"{profile.name}.json")


def profiles(results: dict) -> list[Profile]:
    """T(n, context) of each (model, dtype) as a cost profile (bench.cost.profiles), for a replay onto this node:
    `python -m bench.report project --profile <folder>/profiles/<name>.json`; the graph part's replayed T(n) too
    (`<model>-<dtype>-graphs`: the graph regime's cost)."""
    rows, env = results.get("forward_cost", []), results["environment"]
    out = []
    for model, dtype in dict.fromkeys((r["model"], r["dtype"]) for r in rows):
        mine = [r for r in rows if (r["model"], r["dtype"]) == (model, dtype) and r["context"] != "prefill"]
        prefill = [r for r in rows if (r["model"], r["dtype"]) == (model, dtype) and r["context"] == "prefill"]
        ns, contexts = sorted({r["n"] for r in mine}), sorted({r["context"] for r in mine})
        ms = {(r["context"], r["n"]): r["ms"] for r in mine}
        out.append(Profile(f"{model}-{dtype}", "gpu-check", model, env.get("gpu") or env.get("cpu") or "unknown",
                           dtype, ns, contexts, [[ms[c, n] for n in ns] for c in contexts],
                           [r["n"] for r in prefill] or None, [r["ms"] for r in prefill] or None))
    graph_rows, dtype = results.get("graphs", {}).get("t_n", []), results.get("sizes", {}).get("method_dtype")
    for model in dict.fromkeys(r["model"] for r in graph_rows):  # the graph regime's T(n), one context
        mine = sorted((r for r in graph_rows if r["model"] == model), key=lambda r: r["n"])
        out.append(Profile(f"{model}-{dtype}-graphs", "gpu-check graphs", model,
                           env.get("gpu") or env.get("cpu") or "unknown", dtype, [r["n"] for r in mine],
                           [mine[0]["context"]], [[r["graph_ms"] for r in mine]], None, None))
    return out


def default_out(device: str) -> Path:
    stamp = re.sub(r"[^A-Za-z0-9._-]+", "_", machine_id(device))
    return project_path("results/gpu_check") / f"{stamp}-{datetime.now():%Y%m%d-%H%M%S}"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """gpu-check's command line, checked: a bad value raises HarnessError naming it (docs/gpu.md's lease calls are
    checked against it by the suite). Adds `parts`, `method_list`, `speedup` and `shapes` as lists or None."""
    parser = OneLineParser(prog="python -m bench.check.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", choices=sorted(SIZES), help="gpu (default on CUDA) or cpu (tiny, seconds)")
    parser.add_argument("--small", action="store_true", help="the same as --sizes cpu")
    parser.add_argument("--device", default=None, help="cuda when available, else cpu")
    parser.add_argument("--out", default=None, help="the folder (default results/gpu_check/<machine>-<time>/)")
    parser.add_argument("--partial", default=None, help="a file rewritten with the parts done so far after each")
    parser.add_argument("--only", default=",".join(PARTS), help=f"the parts to run, of {','.join(PARTS)}")
    parser.add_argument("--methods", default=None, help="the methods part's methods (default: every one)")
    parser.add_argument("--speedup-methods", default=None,
                        help=f"the speedup part's, AR first (default: {','.join(Sizes.speedup)}; e.g. the step "
                             "model's held-out check: ar,token_recycling,pld,hf_generate,lookahead,rest,medusa)")
    parser.add_argument("--merge", nargs="+", default=None, metavar="FILE",
                        help="run nothing: merge a lease's results files (each call's partial or results.json) "
                             "into --out, with its table")
    parser.add_argument("--timed-new", type=int, default=None,
                        help="new tokens per prompt of the timed parts (default: 128 on a GPU, 4 on a CPU)")
    parser.add_argument("--max-new", type=int, default=None,
                        help="new tokens per row of the methods part (default: 32 on a GPU, 3 on a CPU; its host "
                             "waits are judged where each row takes 3 decode steps or more)")
    parser.add_argument("--speedup-reps", type=int, default=None,
                        help="the speedup part's timed passes (default: 3 on a GPU; fewer fit a short lease)")
    parser.add_argument("--compile-backend", choices=COMPILE_BACKENDS, default=None,
                        help="the compiled part's torch.compile backend (default: inductor on CUDA, aot_eager "
                             "elsewhere; inductor on a CPU, with a C compiler, rehearses a lease's compile)")
    parser.add_argument("--hf-shapes", default=None,
                        help="the random shapes timed beside the methods' model, comma-separated, or none "
                             "(default: llama-7b on a GPU)")
    parser.add_argument("--method-dtype", choices=("float32", *DTYPES), default=None,
                        help="the dtype of the methods' model (default: bfloat16 on a GPU, float32 on a CPU; "
                             "--small --method-dtype bfloat16 rehearses the half-precision paths on a CPU)")
    args = parser.parse_args(argv)
    args.parts = args.only.split(",")
    args.method_list = args.methods.split(",") if args.methods else None
    args.speedup = tuple(args.speedup_methods.split(",")) if args.speedup_methods else None
    args.shapes = () if args.hf_shapes == "none" else tuple(args.hf_shapes.split(",")) if args.hf_shapes else None
    if args.merge:
        if not args.out:
            raise HarnessError("--merge needs --out (the evidence folder to write)")
        return args
    if set(args.parts) - set(PARTS):
        raise HarnessError(f"unknown --only part(s) {sorted(set(args.parts) - set(PARTS))} (known: {', '.join(PARTS)})")
    if args.method_list and set(args.method_list) - set(REGISTRY):
        raise HarnessError(f"unknown --methods {sorted(set(args.method_list) - set(REGISTRY))}")
    if args.shapes and set(args.shapes) - set(RANDOM_SHAPES):
        raise HarnessError(f"--hf-shapes {args.hf_shapes}: none, or of {', '.join(RANDOM_SHAPES)}")
    if args.speedup and (set(args.speedup) - set(REGISTRY) or args.speedup[0] != "ar"):
        raise HarnessError(f"--speedup-methods {','.join(args.speedup)}: registered methods, ar first")
    for flag, value in (("--speedup-reps", args.speedup_reps), ("--timed-new", args.timed_new),
                        ("--max-new", args.max_new)):
        if value is not None and value < 1:
            raise HarnessError(f"{flag} {value}: at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(argv)
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        name = "cpu" if args.small else args.sizes or ("gpu" if torch.device(device).type == "cuda" else "cpu")
        out = project_path(args.out) if args.out else default_out(device)
        if args.merge:
            results = merged([Path(f) for f in args.merge])
            out.mkdir(parents=True, exist_ok=True)
            write_folder(results, out)
            print(table(results) + f"\nresults: {out}")
            return 0
        if torch.device(device).type == "cuda" and not torch.cuda.is_available():
            raise HarnessError("--device cuda, but no CUDA device is available")
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as scratch:
            sizes = replace(SIZES[name], method_dtype=args.method_dtype or SIZES[name].method_dtype,
                            speedup=args.speedup or SIZES[name].speedup,
                            speedup_reps=args.speedup_reps or SIZES[name].speedup_reps,
                            timed_new=args.timed_new or SIZES[name].timed_new,
                            max_new=args.max_new or SIZES[name].max_new, compile_backend=args.compile_backend,
                            hf_shapes=SIZES[name].hf_shapes if args.shapes is None else args.shapes)
            results = run_checks(sizes, device, Path(scratch), Path(args.partial) if args.partial else None,
                                 args.parts, args.method_list)
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    write_folder(results, out)
    print(table(results) + f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
