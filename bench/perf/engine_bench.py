"""Engine micro-benchmarks, measured side by side in one process (`make bench-engine`).

- ar_vs_hf_generate: our AR tok/s / HF generate tok/s (same model object, so the same linear backend, prompts
  and dtype; outputs must match).
- ar_vs_hf_generate_unmodified: our AR on the chosen linear backend / HF generate on the model as HF ships it
  (loaded again with model.cpu_linear=plain): what a user gains over plain transformers. Outputs may differ
  in rare tokens (the backends' fp32 sums differ in the last bits), so they are reported, not required.
- forward_*: the target forward against the machine's roofline and plain against the chosen linear backend
  (bench.perf.roofline: machine roof, T(n) table, per-op comparison, results/figures/forward_cost.png).
- pld_vs_hf_pld: our PLD in the HF setting (n-gram 2, partial continuation) / generate(prompt_lookup_...).
- breakdown_mode_cost (details): the tok/s AR loses in the breakdown mode (run.sync_phases=true, a device sync at
  every phase boundary) against the default, synced only at the ends of the timed region as HF generate is.
- tr_overhead_share: share of Token Recycling's timed wall time outside model forwards (phases synced).
- batch_ar_vs_hf_generate_b<B>: aggregate tok/s of our AR at run.batch_size=B / HF generate on the same
  left-padded batches (B = 4 and 16; outputs must match row by row).
- tr_overhead_share_b16: Token Recycling's share outside model forwards at batch 16 (per-row drafting,
  verification and KV moves are Python loops over rows: this is what they cost; phases synced).
- tr_speedup_efficiency: achieved TR speedup over our AR / (MAT x T(1) / T(tree + root)), with T(1) and
  T(tree + root) the mean target-forward time per decode step measured inside those same AR and TR runs, both
  timed per phase (on a GPU an unsynced target_forward phase times only the kernel launches).
  The isolated forward-cost curve T(n) (a cache as long as a typical prompt + half the output) is kept
  in the details with the efficiency it implies: on the 2-core CPU here its T(81) moved by +-40% from one
  invocation to the next while the in-run means stayed within a few percent.
Pairs run interleaved (A, B, A, B, ...; order flipped every repeat) so drift hits both sides alike. Every figure
states its timing mode (`timing_mode`; printed beside it and kept in the JSON's `timing_modes`): the shares and
in-run forward times come from runs with run.sync_phases=true, the tok/s ratios from runs synced at the ends only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import Counter

from tqdm import tqdm

from bench import metrics
from bench.cachefile import atomic_write
from bench.core.proposer import Replay
from bench.models import forward_cost
from bench.paths import PROJECT
from bench.perf import cache_bench, roofline
from bench.run.compose import compose_config
from bench.run.grading import grade
from bench.run.provenance import provenance
from bench.run.runner import Runner

GOALS = {"ar_vs_hf_generate": 1.00, "ar_vs_hf_generate_unmodified": 1.6, "pld_vs_hf_pld": 0.95,
         "tr_overhead_share": 0.10, "tr_speedup_efficiency": 0.95, "batch_ar_vs_hf_generate_b4": 1.0,
         "batch_ar_vs_hf_generate_b16": 1.0, "tr_overhead_share_b16": 0.10, **roofline.GOALS}
# Shares to keep small and the forward's time ratios; every other goal is a ratio to raise.
LOWER_IS_BETTER = {"tr_overhead_share", "tr_overhead_share_b16", *roofline.GOALS}
BATCHES = (4, 16)
PHASES_SYNCED, ENDS_SYNCED = "phases synced", "ends synced"  # run.sync_phases true / false (bench/core/timing.py)
FORWARDS_SYNCED = "each forward synced"  # isolated forwards, bench.models.forward_cost and bench.perf.roofline


def timing_mode(*runners: Runner) -> str:
    """How a figure's runs were timed: PHASES_SYNCED (a device sync at every phase boundary, which a phase share
    or an in-run forward time needs on a GPU) or ENDS_SYNCED (the timed region only, as HF generate is timed)."""
    return " vs ".join(PHASES_SYNCED if r.timer.sync else ENDS_SYNCED for r in runners)


def runner_for(model: str, method: str, overrides: list[str], args, prompts: int | None = None,
               max_new_tokens: int | None = None) -> Runner:
    cfg = compose_config([f"model={model}", f"method={method}", "dataset=humaneval",
                          f"run.limit={prompts or args.prompts}",
                          f"run.max_new_tokens={max_new_tokens or args.max_new_tokens}", *args.set, *overrides])
    return Runner(cfg)


def timed(r: Runner, prompts: list[list[int]]):
    """One generate call over the prompts (a batch when several); the generators are seeded alike."""
    import torch

    gens = [torch.Generator(device=r.bundle.device).manual_seed(i) for i in range(len(prompts))]
    if len(prompts) == 1:
        r.engine.generator.manual_seed(0)
        gens = [r.engine.generator]
    return r.timed(prompts, gens)


def divergences(r: Runner, prompts: list[list[int]], outs: list[list[int]], refs: list[list[int]]) -> dict:
    """How outputs that differ from the reference differ (bench.run.grading: near-tie or mismatch), by count: in
    fp16/bf16 a rounding can flip a near-tie, so a difference alone does not say which."""
    return dict(Counter(grade(r.bundle.model, p, o, ref, device=r.bundle.device)["grade"]
                        for p, o, ref in zip(prompts, outs, refs, strict=True) if o != ref))


def divergence_text(divergences: dict[str, dict]) -> str:
    """"; differing, graded: ar/hf 2 near-tie" for the pairs whose outputs differ, else nothing."""
    shown = [f"{pair} " + ", ".join(f"{n} {g}" for g, n in d.items()) for pair, d in divergences.items() if d]
    return f"; differing, graded: {'; '.join(shown)}" if shown else ""


def rate(per: dict) -> float:
    """tok/s over all prompts (or batches) and repeats, from their per-prompt sums {"tokens": [...], "wall": [...]}."""
    return sum(per["tokens"]) / sum(per["wall"])


def ratio_interval(a: dict, b: dict) -> list[float] | None:
    """95% interval of a's tok/s over b's: a paired bootstrap over the prompts (or batches), each with its tokens and
    wall time summed over the repeats (bench.metrics); None with fewer than two."""
    return metrics.bootstrap_interval([a["tokens"], a["wall"], b["tokens"], b["wall"]], metrics.ratio_of_rates)


def timed_pair(a: Runner, b: Runner, repeats: int, label: str) -> dict:
    """Interleaved runs of two methods over the same prompts; returns tok/s of each and their ratio."""
    prompts = [a.encode([], it["turns"][0]) for it in a.items]
    replay = Replay()  # each prompt's repeats (the warm-up's too) start from its first's state
    for r in (a, b):  # warm-up, untimed
        replay.start(r.method, (id(r), 0))
        timed(r, prompts[:1])
    per = {id(r): {"tokens": [0] * len(prompts), "wall": [0.0] * len(prompts)} for r in (a, b)}  # per prompt
    steps = {id(a): [], id(b): []}
    mismatches, last = 0, {}  # the last repeat's outputs, per prompt: (a's, b's)
    jobs = [(rep, i) for rep in range(repeats) for i in range(len(prompts))]
    for rep, i in tqdm(jobs, desc=label, file=sys.stderr):
        outs = []
        for r in ((a, b) if rep % 2 == 0 else (b, a)):
            replay.start(r.method, (id(r), i))
            (gen,), wall = timed(r, [prompts[i]])
            steps[id(r)].append({"accept_lengths": gen.accept_lengths, "phase_times": gen.phase_times})
            per[id(r)]["tokens"][i] += len(gen.output_ids)
            per[id(r)]["wall"][i] += wall
            outs.append(gen.output_ids)
        mismatches += outs[0] != outs[1]
        last[i] = outs if rep % 2 == 0 else outs[::-1]
    tps = {k: rate(v) for k, v in per.items()}
    return {
        "a_tok_s": tps[id(a)], "b_tok_s": tps[id(b)], "ratio": tps[id(a)] / tps[id(b)],
        "ratio_interval": ratio_interval(per[id(a)], per[id(b)]),
        "outputs_identical": mismatches == 0, "mismatched_prompts": mismatches,
        "divergences": divergences(a, prompts, *zip(*(last[i] for i in range(len(prompts))))),
        "a_steps": steps[id(a)], "b_steps": steps[id(b)],
    }


def timed_batch_pair(a: Runner, b: Runner, batch: int, repeats: int, label: str) -> dict:
    """Interleaved batched runs of two methods over the same batches of prompts: aggregate tok/s and ratio."""
    prompts = [a.encode([], it["turns"][0]) for it in a.items]
    batches = [prompts[i : i + batch] for i in range(0, len(prompts), batch)]
    replay = Replay()
    for r in (a, b):  # warm-up, untimed
        replay.start(r.method, (id(r), 0))
        timed(r, batches[0])
    per = {id(r): {"tokens": [0] * len(batches), "wall": [0.0] * len(batches)} for r in (a, b)}  # per batch
    mismatches, last = 0, {}  # the last repeat's rows, per batch: (a's, b's)
    for rep, c in tqdm([(rep, c) for rep in range(repeats) for c in range(len(batches))], desc=label,
                       file=sys.stderr):
        chunk, outs = batches[c], {}
        for r in ((a, b) if rep % 2 == 0 else (b, a)):
            replay.start(r.method, (id(r), c))
            gens, seconds = timed(r, chunk)
            per[id(r)]["tokens"][c] += sum(len(g.output_ids) for g in gens)
            per[id(r)]["wall"][c] += seconds
            outs[id(r)] = [g.output_ids for g in gens]
        mismatches += sum(x != y for x, y in zip(outs[id(a)], outs[id(b)]))
        last[c] = outs[id(a)], outs[id(b)]
    tps = {k: rate(v) for k, v in per.items()}
    rows = [pair for c in range(len(batches)) for pair in zip(*last[c])]  # (a's row, b's row), in prompt order
    return {"a_tok_s": tps[id(a)], "b_tok_s": tps[id(b)], "ratio": tps[id(a)] / tps[id(b)],
            "ratio_interval": ratio_interval(per[id(a)], per[id(b)]),
            "outputs_identical": mismatches == 0, "mismatched_rows": mismatches,
            "divergences": divergences(a, prompts, *zip(*rows))}


def batch_section(args) -> dict:
    """Batched AR against HF generate at B = 4 and 16, and Token Recycling's overhead at B = 16."""
    out = {}
    for b in BATCHES:
        batched = [f"run.batch_size={b}"]
        ar = runner_for(args.model, "ar", batched, args, args.batch_prompts, args.batch_max_new_tokens)
        hf = runner_for(args.model, "hf_generate", batched, args, args.batch_prompts, args.batch_max_new_tokens)
        out[b] = {**timed_batch_pair(ar, hf, b, args.repeats, f"batch {b}: ar vs hf_generate"),
                  "timing_mode": timing_mode(ar, hf)}
    # its overhead share is a phase breakdown: timed per phase
    tr = runner_for(args.model, "token_recycling", ["run.batch_size=16", "run.sync_phases=true"], args, 16,
                    args.batch_tr_max_new_tokens)
    prompts = [tr.encode([], it["turns"][0]) for it in tr.items]
    replay = Replay()
    replay.start(tr.method, 0)
    timed(tr, prompts[:2])  # warm-up, its matrix then thrown away (a hot one would have seen 2 of the prompts)
    replay.start(tr.method, 0)
    gens, _ = timed(tr, prompts)
    steps = [{"accept_lengths": [], "phase_times": gens[0].phase_times}]
    out["tr_b16"] = {"overhead_share": metrics.overhead_share(steps), "phase_times": gens[0].phase_times,
                     "timing_mode": timing_mode(tr),
                     "mat": metrics.mat([{"accept_lengths": g.accept_lengths} for g in gens]),
                     "aggregate_tok_s": sum(len(g.output_ids) for g in gens) / sum(gens[0].phase_times.values())}
    return out


def in_run_forward(steps: list[dict]) -> float:
    """Mean target-forward seconds per decode step (prefill excluded), from the runs' own phase times."""
    total = sum(s["phase_times"].get("target_forward", 0.0) for s in steps)
    return total / max(sum(len(s["accept_lengths"]) - 1 for s in steps), 1)


def unmodified_pair(args, ar: Runner, ar_hf: dict) -> dict:
    """Our AR (chosen backend) against hf_generate on a model loaded with cpu_linear=plain. get_bundle keeps one
    model at a time: loading the plain one drops the chosen bundle from its cache, but `ar` still holds it."""
    keep = ("a_tok_s", "b_tok_s", "ratio", "ratio_interval", "outputs_identical", "mismatched_prompts", "divergences")
    if ar.bundle.linear_backend == "plain":  # the model is unmodified already: the first pair measured this
        return {**{k: ar_hf[k] for k in keep}, "same_model_as_ar": True, "hf_linear_backend": "plain"}
    hf = runner_for(args.model, "hf_generate", ["model.cpu_linear=plain"], args)
    pair = timed_pair(ar, hf, args.repeats, "ar vs hf_generate (unmodified model)")
    return {**{k: pair[k] for k in keep}, "same_model_as_ar": False, "hf_linear_backend": hf.bundle.linear_backend}


def write_json(result: dict, out: str) -> None:
    os.makedirs(os.path.dirname(out), exist_ok=True)
    atomic_write(out, json.dumps(result, indent=2))


def print_goals(result: dict) -> None:
    """One line per goal: the figure, its goal, the timing mode it was measured in (result["timing_modes"])."""
    modes = result.get("timing_modes", {})
    for key, goal in GOALS.items():
        if key not in result:
            continue
        value, lower = result[key], key in LOWER_IS_BETTER
        ok = value <= goal if lower else value >= goal
        mode = f" [{modes[key]}]" if key in modes else ""
        interval = result.get("intervals", {}).get(key)
        shown = f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""
        verdict = "met" if ok else "MISSED"
        if interval and interval[0] <= goal <= interval[1]:
            verdict += " (the goal is inside the 95% interval)"
        print(f"{key:30s} {value:7.3f}{shown}   goal {'<=' if lower else '>='} {goal:.2f}{mode}: {verdict}")


def forward_section(args, ar: Runner) -> dict:
    sec = roofline.section(ar.bundle, args)
    return {**sec["goals"], "roofline": sec["details"], "roofline_table": sec["table"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=10,
                    help="prompts of the batch-1 pairs, whose intervals are bootstrapped over them (5 until 2026-11-30)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--batch-prompts", type=int, default=16, help="prompts of the batched AR/HF comparison")
    ap.add_argument("--batch-max-new-tokens", type=int, default=128)
    ap.add_argument("--batch-tr-max-new-tokens", type=int, default=32, help="Token Recycling at batch 16")
    ap.add_argument("--out", help="results/bench/engine.json (roofline.json with --roofline-only)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every run, e.g. --set model.device=cuda --set model.dtype=bfloat16")
    roof = ap.add_argument_group("forward cost and roofline (bench.perf.roofline)")
    roof.add_argument("--roofline-only", action="store_true", help="only the roofline section (no generate runs)")
    roof.add_argument("--no-roofline", action="store_true",
                      help="leave the section out (a CPU's: on a GPU, gpu-check's forward_cost is the curve)")
    roof.add_argument("--no-compile", action="store_true", help="leave torch.compile out of the per-op comparison")
    roof.add_argument("--roof-mb", type=int, default=512, help="MiB per buffer of the bandwidth copy and sum")
    roof.add_argument("--gemm-size", type=int, default=2048, help="n of the n^3 fp32 matmul that gives the peak")
    roof.add_argument("--roof-repeats", type=int, default=5, help="repeats of the bandwidth and GEMM timings")
    roof.add_argument("--prefix-tokens", type=int, default=256, help="cache length before the T(n) forwards")
    roof.add_argument("--cost-reps", type=int, default=5, help="interleaved repeats of T(n) per backend")
    roof.add_argument("--op-reps", type=int, default=30, help="repeats of each single-op timing")
    roof.add_argument("--figure", default=str(PROJECT / "results" / "figures" / "forward_cost.png"))
    args = ap.parse_args(argv)
    # A roofline-only run must not overwrite the full benchmark's file with a part of it.
    args.out = args.out or str(PROJECT / "results" / "bench" / ("roofline.json" if args.roofline_only
                                                                   else "engine.json"))

    if args.roofline_only:
        ar = runner_for(args.model, "ar", [], args)
        result = {**forward_section(args, ar), "goals": {k: GOALS[k] for k in roofline.GOALS},
                  "timing_modes": dict.fromkeys(roofline.GOALS, FORWARDS_SYNCED),
                  "settings": vars(args),
                  "provenance": provenance(ar.bundle.device, ar.bundle.dtype, ar.bundle.linear_backend)}
        write_json(result, args.out)
        print_goals(result)
        roofline.print_section({"details": result["roofline"], "table": result["roofline_table"]})
        print(f"results: {args.out}")
        return 0

    hf = runner_for(args.model, "hf_generate", [], args)
    ar = runner_for(args.model, "ar", [], args)
    ar_hf = timed_pair(ar, hf, args.repeats, "ar vs hf_generate")

    pld_hf_setting = ["method.max_ngram=2", "method.full_continuation=false"]
    pld = runner_for(args.model, "pld", pld_hf_setting, args)
    hf_pld = runner_for(args.model, "hf_pld", [], args)
    pld_pair = timed_pair(pld, hf_pld, args.repeats, "pld(hf setting) vs hf_pld")

    # The breakdown mode (phase syncs) against the default (synced at the ends only, as HF generate is timed).
    ar_sync = runner_for(args.model, "ar", ["run.sync_phases=true"], args)
    sync_pair = timed_pair(ar_sync, ar, args.repeats, "ar breakdown mode vs ar")

    # Its overhead share and both in-run forward times (T(1) from AR, T(tree) from TR) are phase times: both
    # sides timed per phase, so on a GPU target_forward holds the forward, not only its kernel launches.
    tr = runner_for(args.model, "token_recycling", ["run.sync_phases=true"], args)
    tr_ar = timed_pair(tr, ar_sync, 1, "token_recycling vs ar (phases synced)")
    tr_mat = metrics.mat(tr_ar["a_steps"])
    overhead = metrics.overhead_share(tr_ar["a_steps"])

    prompt_len = statistics.mean(len(ar.encode([], it["turns"][0])) for it in ar.items)
    tree_slots = tr.method.tree.size + 1
    sizes = sorted({1, 4, 8, 16, 32, 64, tree_slots})
    costs = forward_cost.measure(ar.bundle, sizes, int(prompt_len + args.max_new_tokens / 2), reps=15)
    t_ar, t_tr = in_run_forward(tr_ar["b_steps"]), in_run_forward(tr_ar["a_steps"])
    ideal = tr_mat * t_ar / t_tr
    achieved = tr_ar["ratio"]
    forward = {} if args.no_roofline else forward_section(args, ar)
    kv_share = cache_bench.cache_share(ar.bundle.model)
    batch = batch_section(args)
    unmodified = unmodified_pair(args, ar, ar_hf)  # last: it loads a second model
    result = {
        "ar_vs_hf_generate": ar_hf["ratio"],
        "ar_vs_hf_generate_unmodified": unmodified["ratio"],
        "pld_vs_hf_pld": pld_pair["ratio"],
        "tr_overhead_share": overhead,
        "tr_speedup_efficiency": achieved / ideal,
        **{f"batch_ar_vs_hf_generate_b{b}": batch[b]["ratio"] for b in BATCHES},
        "tr_overhead_share_b16": batch["tr_b16"]["overhead_share"],
        **forward,
        # 95% paired-bootstrap intervals of the tok/s ratios (ratio_interval); None where one batch or prompt
        "intervals": {"ar_vs_hf_generate": ar_hf["ratio_interval"],
                      "ar_vs_hf_generate_unmodified": unmodified["ratio_interval"],
                      "pld_vs_hf_pld": pld_pair["ratio_interval"],
                      "tr_speedup_over_ar": tr_ar["ratio_interval"],
                      **{f"batch_ar_vs_hf_generate_b{b}": batch[b]["ratio_interval"] for b in BATCHES}},
        "batch_details": {str(k): v for k, v in batch.items()},
        "unmodified_details": unmodified,
        "kv_cache_share": {str(k): v for k, v in kv_share.items()},
        "details": {
            "ar_tok_s": ar_hf["a_tok_s"], "hf_generate_tok_s": ar_hf["b_tok_s"],
            "ar_hf_outputs_identical": ar_hf["outputs_identical"],
            "pld_tok_s": pld_pair["a_tok_s"], "hf_pld_tok_s": pld_pair["b_tok_s"],
            "pld_hf_outputs_identical": pld_pair["outputs_identical"],
            "pld_mat": metrics.mat(pld_pair["a_steps"]), "hf_pld_mat": metrics.mat(pld_pair["b_steps"]),
            "tr_tok_s": tr_ar["a_tok_s"], "tr_ar_tok_s": tr_ar["b_tok_s"],
            "tr_ar_outputs_identical": tr_ar["outputs_identical"],
            "divergences": {"ar/hf": ar_hf["divergences"], "pld/hf_pld": pld_pair["divergences"],
                            "tr/ar": tr_ar["divergences"]},  # graded, where outputs differ (the last repeat's)
            "breakdown_mode_cost": 1 - sync_pair["ratio"],  # fraction of AR's tok/s lost to phase syncs
            "tr_mat": tr_mat, "tr_speedup_over_ar": achieved, "tr_ideal_speedup": ideal,
            "tree_slots": tree_slots, "forward_cost_s": {str(k): v for k, v in costs.items()},
            "forward_cost_prefix_len": int(prompt_len + args.max_new_tokens / 2),
            "in_run_forward_s": {"ar": t_ar, "tr": t_tr},
            "tr_speedup_efficiency_isolated_T": achieved / (tr_mat * costs[1] / costs[tree_slots]),
        },
        "goals": GOALS,
        "goals_lower_is_better": sorted(LOWER_IS_BETTER),
        "timing_modes": {
            "ar_vs_hf_generate": timing_mode(ar, hf), "ar_vs_hf_generate_unmodified": timing_mode(ar, hf),
            "pld_vs_hf_pld": timing_mode(pld, hf_pld), "tr_overhead_share": timing_mode(tr),
            "tr_speedup_efficiency": timing_mode(tr, ar_sync),
            **{f"batch_ar_vs_hf_generate_b{b}": batch[b]["timing_mode"] for b in BATCHES},
            "tr_overhead_share_b16": batch["tr_b16"]["timing_mode"],
            **dict.fromkeys(roofline.GOALS if forward else (), FORWARDS_SYNCED),
            "breakdown_mode_cost": timing_mode(ar_sync, ar),
        },
        "settings": vars(args),
        "provenance": provenance(ar.bundle.device, ar.bundle.dtype, ar.bundle.linear_backend),
    }
    write_json(result, args.out)

    print_goals(result)
    d = result["details"]
    print(f"T(1) = {t_ar * 1e3:.1f} ms, T({tree_slots}) = {t_tr * 1e3:.1f} ms in the runs ({PHASES_SYNCED}); "
          f"isolated {costs[1] * 1e3:.1f} / {costs[tree_slots] * 1e3:.1f} ms (efficiency with those: "
          f"{d['tr_speedup_efficiency_isolated_T']:.2f}); TR MAT {tr_mat:.2f}, ideal speedup {ideal:.2f}, "
          f"achieved {achieved:.2f}")
    print(f"outputs identical: ar/hf {d['ar_hf_outputs_identical']}, pld/hf_pld {d['pld_hf_outputs_identical']}, "
          f"tr/ar {d['tr_ar_outputs_identical']}; PLD MAT ours {d['pld_mat']:.2f} vs HF {d['hf_pld_mat']:.2f}"
          + divergence_text(d["divergences"]))
    for b in BATCHES:
        x = batch[b]
        print(f"batch {b}: ar {x['a_tok_s']:.1f} tok/s vs hf_generate {x['b_tok_s']:.1f} tok/s aggregate, "
              f"rows identical {x['outputs_identical']} ({x['mismatched_rows']} differ) [{x['timing_mode']}]"
              + divergence_text({"rows": x["divergences"]}))
    t16 = batch["tr_b16"]
    print(f"batch 16: token_recycling MAT {t16['mat']:.2f}, {t16['aggregate_tok_s']:.1f} tok/s aggregate "
          f"[{t16['timing_mode']}]")
    u, u_mode = unmodified, result["timing_modes"]["ar_vs_hf_generate_unmodified"]
    print(f"ar ({ar.bundle.linear_backend}) {u['a_tok_s']:.1f} tok/s vs hf_generate on the unmodified model "
          f"({u['hf_linear_backend']}) {u['b_tok_s']:.1f} tok/s; outputs identical {u['outputs_identical']} "
          f"({u['mismatched_prompts']} prompts differ) [{u_mode}]" + divergence_text({"ar/hf": u["divergences"]}))
    print(f"breakdown mode (run.sync_phases=true) costs {100 * d['breakdown_mode_cost']:+.1f}% of AR's tok/s on "
          f"{ar.bundle.device.type} (a CPU has nothing to sync: expect noise around 0)")
    cache_bench.print_share(kv_share)
    if forward:
        roofline.print_section({"details": result["roofline"], "table": result["roofline_table"]})
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
