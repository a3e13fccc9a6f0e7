"""Drafting a batch step's rows at once against one row at a time, side by side in one process
(`make bench-draft-batch`).

Since 4b29af0 BPD, Medusa and ProPD draft every row of a batch step in one call (`Proposer.propose_batch`): one
heads forward over the rows' hidden states, and for ProPD one tree choice and one hit-rate update. Here each method
runs beside itself drafting row by row (the base class's `propose_batch`: each row's `propose` in turn, as before),
on the same batches of HumanEval prompts. The runs are interleaved, A B then B A, with the untrained parts of
gpu-check's methods part (zero-block heads: what drafting costs, not what it accepts).

Per method and batch size the output gives:
- the aggregate tok/s of each side and their ratio, with a 95% paired bootstrap interval over the (repeat, batch)
  units;
- the draft phase's ms per decode step of each side (the controller's too for ProPD);
- whether every row's output is the same on both sides. Both are lossless, so it must be.

    python -m bench.perf.draft_batch [--methods bpd,propd] [--batch-sizes 4,16] [--prompts 16] [--max-new 16]
"""

from __future__ import annotations

import json
import sys
import tempfile
import types
from datetime import UTC, datetime
from pathlib import Path

import torch
from tqdm import tqdm

from bench.cachefile import atomic_write
from bench.check import method_check
from bench.check.gpu_check import bundle_for
from bench.cli import OneLineParser
from bench.core.machine import machine_id
from bench.core.proposer import Proposer, Replay
from bench.core.timing import PhaseTimer
from bench.paths import project_path
from bench.perf.engine_bench import ratio_interval
from bench.run.provenance import provenance
from methods import build_method

OUT = "results/bench/draft_batch.json"
DRAFT_PHASES = ("draft", "controller")


def row_by_row(method: Proposer) -> Proposer:
    """The method drafting each row of a batch step alone: the base class's `propose_batch` bound on the instance
    (its forks, shallow copies, keep it)."""
    method.propose_batch = types.MethodType(Proposer.propose_batch, method)
    return method


def timed_batch(method, engine, chunk: list[list[int]], max_new: int) -> tuple[list, dict, int]:
    """One batch decoded: (its generations, its phase seconds, its decode steps: the longest row's)."""
    generators = [torch.Generator(device=engine.device).manual_seed(i) for i in range(len(chunk))]
    gens = method.generate_batch(engine, chunk, max_new, PhaseTimer(engine.device), generators)
    return gens, gens[0].phase_times, max(len(g.accept_lengths) for g in gens) - 1


def compare(at_once, by_row, engine, batches: list[list[list[int]]], max_new: int, repeats: int, label: str) -> dict:
    """Interleaved batches of the two sides; per side tok/s, draft ms a decode step, and their ratio."""
    replay = Replay()  # what a method learns across prompts (ProPD's controller) starts each batch alike
    sides = {"at_once": at_once, "row_by_row": by_row}
    for name, m in sides.items():  # warm-up, untimed
        replay.start(m, (name, 0))
        timed_batch(m, engine, batches[0], max_new)
    per = {name: {"tokens": [], "wall": [], "draft_s": 0.0, "steps": 0} for name in sides}
    mismatched, units = 0, [(rep, c) for rep in range(repeats) for c in range(len(batches))]
    for rep, c in tqdm(units, desc=label, file=sys.stderr):
        outs = {}
        for name in (list(sides) if (rep + c) % 2 == 0 else list(sides)[::-1]):
            replay.start(sides[name], (name, c))
            gens, phases, steps = timed_batch(sides[name], engine, batches[c], max_new)
            p = per[name]
            p["tokens"].append(sum(len(g.output_ids) for g in gens))
            p["wall"].append(sum(phases.values()))
            p["draft_s"] += sum(phases.get(k, 0.0) for k in DRAFT_PHASES)
            p["steps"] += steps
            outs[name] = [g.output_ids for g in gens]
        mismatched += sum(a != b for a, b in zip(outs["at_once"], outs["row_by_row"], strict=True))
    rate = {name: sum(p["tokens"]) / sum(p["wall"]) for name, p in per.items()}
    return {"at_once_tok_s": rate["at_once"], "row_by_row_tok_s": rate["row_by_row"],
            "ratio": rate["at_once"] / rate["row_by_row"], "ratio_interval": ratio_interval(per["at_once"],
                                                                                          per["row_by_row"]),
            **{f"{name}_draft_ms": 1000 * p["draft_s"] / max(p["steps"], 1) for name, p in per.items()},
            "units": len(units), "mismatched_rows": mismatched}


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="bench.perf.draft_batch", description=__doc__.splitlines()[0])
    p.add_argument("--methods", default="bpd,propd", help="comma-separated, of bpd, medusa, propd")
    p.add_argument("--batch-sizes", default="4,16")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--max-new", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=OUT)
    args = p.parse_args(argv)
    names = [m for m in args.methods.split(",") if m]
    sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip().isdigit()]
    problems = [f"method {m!r} does not draft a batch at once (bpd, medusa, propd do)" for m in names
                if m not in ("bpd", "medusa", "propd")]
    if not sizes or min(sizes) < 2 or len(sizes) != len(args.batch_sizes.split(",")):
        problems.append(f"--batch-sizes {args.batch_sizes!r}: integers >= 2, comma-separated")
    if not names or args.prompts < max(sizes or [2]) or args.max_new < 1 or args.repeats < 1:
        problems.append("--methods, --prompts (at least the largest batch), --max-new and --repeats must be positive")
    if problems:
        print(f"error: {problems[0]}", file=sys.stderr)
        return 1
    torch.set_num_threads(1)
    bundle = bundle_for("cpu", "float32", None)
    rows = method_check.prompts(bundle, args.prompts)
    engine = method_check.engine_for(bundle, 0.0)
    out = {"machine": machine_id("cpu"), "created": datetime.now(UTC).isoformat(timespec="seconds"),
           "git_sha": provenance("cpu", torch.float32).get("git_sha"), "model": bundle.name, "dtype": "float32",
           "prompts": len(rows), "max_new_tokens": args.max_new, "repeats": args.repeats, "results": {}}
    with tempfile.TemporaryDirectory() as scratch:
        configs = method_check.method_configs(method_check.add_untrained_parts(bundle, Path(scratch)), False)
        for name in names:
            for b in sizes:
                cfg = configs[name].method
                at_once, by_row = build_method(cfg, bundle), row_by_row(build_method(cfg, bundle))
                batches = [rows[i : i + b] for i in range(0, len(rows), b)]
                result = compare(at_once, by_row, engine, batches, args.max_new, args.repeats, f"{name} at batch {b}")
                out["results"][f"{name}_b{b}"] = result
                lo, hi = result["ratio_interval"] or (float("nan"), float("nan"))
                print(f"{name} at batch {b}: at once {result['at_once_tok_s']:.2f} tok/s, row by row "
                      f"{result['row_by_row_tok_s']:.2f}: {result['ratio']:.2f}x [{lo:.2f}, {hi:.2f}]; draft "
                      f"{result['at_once_draft_ms']:.1f} against {result['row_by_row_draft_ms']:.1f} ms a step; "
                      f"rows differing {result['mismatched_rows']}")
    atomic_write(project_path(args.out), json.dumps(out, indent=1) + "\n")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
