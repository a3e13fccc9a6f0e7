"""The step model (bench.cost.host) fitted on AR and checked against what the GPU leases measured
(`make validate-projection-gpu`, docs/cost_model.md "Validated on GPUs").

Fit, per GPU, on AR alone: where its lease timed AR's step phase by phase (gpu-check's speedup part, synced:
`ms_per_step`), the launch cost and host factor by least squares over AR's phases outside the forward against the
ops and Python AR's step costs hold (bench.perf.step_costs); a GPU without such a measurement takes the nearest
measured GPU's. The forward: the GPU's own T(n, context) profile where its lease measured one; else the nearest
GPU's, scaled so that AR's step comes out as measured (a second fit on AR).

Held out: the CPU runs of Token Recycling Table 1 (AR, PLD, Token Recycling, HF generate, Lookahead, REST, Medusa on
Spec-Bench and MBPP, committed in evidence/runs) replayed on each GPU, their step cost over AR's and their speedup
beside the lease's where it timed the method (Lookahead, REST and Medusa: projected ahead of the next lease). The
step-cost ratio is the fair comparison (MAT-free); a speedup also carries each side's own MAT.

    python -m bench.cost.gpu_validation [--out evidence/projection/gpu_validation.json]
"""

from __future__ import annotations

import functools
import gzip
import json
import sys
from pathlib import Path

import numpy as np

from bench.cost import graph_projection
from bench.cost.forward_probe import forward_alone_and_in_run
from bench.cost.host import TARGET_PHASES, HostCost, StepCosts, decode_steps, fit_host, step_costs
from bench.cost.profiles import Profile
from bench.cost.replay import loops_priced, priced, replayed
from bench.metrics import mat, speedup, speedup_interval, tokens_per_s
from bench.paths import PROJECT

EVIDENCE = PROJECT / "evidence"
OUT = EVIDENCE / "projection" / "gpu_validation.json"
# label: (the lease's gpu-check folder, its hardware entry, the GPU whose profile and host price it borrows if any)
GPUS = {"H200": ("gpu_check/vm_NVIDIA_H200-20261127-112000", "h200", "H100"),
        "H100": ("gpu_check/vm_NVIDIA_H100_80GB_HBM3-20261127-204500", "h100-sxm", "H200"),
        # the lease that timed Lookahead, REST and Medusa (AR beside them); no T(n) of its own: the H200's, scaled
        "H200 11-28": ("gpu_check/vm_NVIDIA_H200-20261128-142200", "h200", "H200")}
FORWARD = "smollm2-135m-bfloat16.json"  # the profile of the methods' model, under <folder>/profiles/
# Table 1's methods; those no lease timed yet are projected ahead of one (`--speedup-methods` of gpu-check: docs/gpu.md)
# The CPU runs the leases are replayed from and the host prices are fitted on: Token Recycling Table 1 as committed
# on 2026-11-25 (AMD EPYC VM, two jobs side by side), kept here when the table was measured again, so that
# re-measuring a table does not move the host price every paper's projection uses (the fit reads its AR's phases)
CPU_RUNS = "projection/table1_runs"
METHODS = ("ar", "pld", "token_recycling", "hf_generate", "lookahead", "rest", "medusa")
# Issue 68's goals: a step ratio within 10% for the methods the first leases timed, 15% for those projected ahead
GOALS = {"step_ratio": 0.10, "ar_tok_s": 0.10, "ahead": 0.15}
AHEAD = ("lookahead", "rest", "medusa")


# The eager step costs each lease is priced with: those measured at a commit whose engine ran as the lease's did
# (bench.perf.step_costs; a482579: before 49e7261 gave a drafted chain at batch 1 the engine's own mask); a lease not
# named here is priced with this tree's (step_costs.json), as REPRODUCED.md is
# (named one by one: a lease added to GPUS later ran the engine after it)
EAGER_COSTS = dict.fromkeys(("H200", "H100", "H200 11-28"), "step_costs-a482579.json")


def costs_of(label: str, default: StepCosts) -> StepCosts:
    """The step costs lease `label` is priced with (EAGER_COSTS), else `default`."""
    name = EAGER_COSTS.get(label)
    return named_costs(name) if name else default


@functools.cache
def named_costs(name: str) -> StepCosts:
    """A committed step costs file of evidence/projection/, read once."""
    return StepCosts.read(str(EVIDENCE / "projection" / name))


# The graph regime (run.graphs=true): per lease that timed it (its graph part), the step costs measured in graph mode
# at the tree it ran (bench.perf.step_costs --graphs; f28674a: graph AR's acceptance still on the host)
GRAPH_COSTS = {"H200 11-28": "step_costs-graphs-f28674a.json"}
# ahead of the next lease: this tree's graph-mode step costs (AR's whole step one graph, the sized cache) projected
# on the last graph lease's T(n) and host, at the sitting's MATs and widths
GRAPH_AHEAD = ("H200 11-28", "step_costs-graphs.json")
GRAPH_FORWARD = "smollm2-135m-bfloat16-graphs.json"  # its graph T(n) of the methods' model, under <folder>/profiles/


def graph_regime(label: str, host: HostCost, costs: str | None = None) -> dict:
    """The step model in the graph regime (bench.cost.graph_projection) on a lease that timed it, with the GPU host's
    price fitted on eager AR (`host`); its eager prefill from its own eager profile, else the nearest GPU's. With
    `costs` (another sitting's step costs), projected ahead: nothing measured beside it."""
    folder = GPUS[label][0]
    eager = Profile.read(eager_profile(label)[1])
    name = costs or GRAPH_COSTS[label]
    sitting = json.loads((EVIDENCE / "projection" / name).read_text())
    graph = Profile.read(EVIDENCE / folder / "profiles" / GRAPH_FORWARD)
    speedup = {} if costs else lease(label)["graphs"]["speedup"]
    return {"lease": folder, "step_costs": name, **graph_projection.project(speedup, sitting, host, graph, eager)}


def lease(label: str) -> dict:
    return json.loads((EVIDENCE / GPUS[label][0] / "results.json").read_text())


def nearest_with(label: str, has, what: str) -> str:
    """The lease itself if `has(label)`, else the nearest GPU for which `has` holds, following each GPU's nearest in
    GPUS; `what` names it in the error where none does."""
    seen, g = [label], label
    while not has(g):
        g = GPUS[g][2]
        if g in seen:
            raise ValueError(f"no GPU near {label} has {what} ({' -> '.join(seen)})")
        seen.append(g)
    return g


def eager_path(label: str) -> Path:
    """Where the lease's eager T(n) of the methods' model would be (none where it measured none)."""
    return EVIDENCE / GPUS[label][0] / "profiles" / FORWARD


def eager_profile(label: str) -> tuple[str, Path]:
    """(the GPU, the path) of the eager T(n) of the methods' model for the lease: its own, else that of the nearest
    GPU with one (as borrowed_host takes the host price)."""
    g = nearest_with(label, lambda g: eager_path(g).is_file(), "an eager T(n)")
    return g, eager_path(g)


def borrowed_host(label: str, hosts: dict[str, HostCost | None]) -> HostCost:
    """The lease's own host price (`hosts`: own_host's), else that of the nearest GPU with one."""
    g = nearest_with(label, lambda g: hosts[g] is not None, "a host price")
    own = hosts[g]
    return own if g == label else HostCost(own.launch_us, own.host_factor,
                                           f"the {g}'s ({own.source}): the {label} lease timed no phases")


def timed_eagerly(label: str) -> bool:
    """Whether the lease gives the eager regime anything to check against: its own eager T(n), or eager AR timed
    (to fit the nearest GPU's curve on). A lease of the graph and compiled parts alone has neither."""
    return eager_path(label).is_file() or "ar" in measured(label)


def measured(label: str) -> dict:
    """Per method, what the lease measured: its step over AR's, speedup and interval (or its passes' range), MAT;
    AR's tok/s. HF generate from the AR-vs-HF part (both MAT 1)."""
    res, out = lease(label), {}
    sp = res.get("speedup") or {}
    sp = sp if "ar" in sp else {}  # no eager AR (a lease of the graph and compiled parts only): nothing timed eagerly
    ar = sp.get("ar")
    for m in METHODS:
        if m in sp:
            row = sp[m]
            passes = row.get("speedups") or [row["speedup"]]  # each timed pass's: a step ratio is MAT / speedup
            out[m] = {"step_ratio": row["mat"] * ar["tok_s"] / row["tok_s"], "speedup": row["speedup"],
                      "interval": row.get("speedup_interval") or [min(passes), max(passes)],
                      "step_ratio_passes": [row["mat"] / max(passes), row["mat"] / min(passes)],
                      "mat": row["mat"], "tok_s": row["tok_s"]}
            if row.get("ms_per_step") and ar.get("ms_per_step"):  # the synced pass's (its phases' sum over AR's)
                out[m]["step_ratio_synced"] = sum(row["ms_per_step"].values()) / sum(ar["ms_per_step"].values())
    if "ar" in out and ar.get("timed"):  # how steady the lease was: AR's ms a token over its timed prompt runs
        per_token = [1000 * seconds / tokens for tokens, seconds in ar["timed"]]
        out["ar"]["ms_per_token_range"] = [round(min(per_token), 1), round(max(per_token), 1)]
    if "hf_generate" not in out and (hf := res.get("ar_vs_hf")):
        out["hf_generate"] = {"step_ratio": hf["ar_over_hf"], "speedup": 1 / hf["ar_over_hf"], "interval": None,
                              "mat": 1.0, "tok_s": hf["hf_generate_tok_s"]}
    return out


def phase_ms(records: list[dict]) -> dict[str, float]:
    """ms per decode step by phase over records (as their machine measured them)."""
    steps, out = sum(map(decode_steps, records)), {}
    for r in records:
        for phase, seconds in (r.get("phase_times") or {}).items():
            out[phase] = out.get(phase, 0.0) + 1000 * seconds / steps
    return out


def own_host(label: str, costs: StepCosts, here: dict[str, float]) -> HostCost | None:
    """The launch cost and host factor fitted on AR's phases of the lease, against AR's Python (`here`: its ms per
    decode step by phase on the machine whose runs are projected, times the step costs' Python share) and ops per
    phase; None where the lease timed no phases. The timed passes' own phases where the lease kept them (the step
    as timed); else the synced pass's, whose syncs at each phase boundary the fit cannot tell from the host's
    speed."""
    row = (lease(label).get("speedup") or {}).get("ar") or {}
    kind, ms = ("timed", row["ms_per_step_timed"]) if row.get("ms_per_step_timed") else ("synced", row.get("ms_per_step"))
    if not ms:
        return None
    ar = costs.methods["ar"]["phases"]
    phases = [p for p in ar if p not in TARGET_PHASES and p in ms and p in here]
    launch_us, factor = fit_host(np.array([here[p] * ar[p]["python_share"] for p in phases]),
                                 np.array([ar[p]["ops"] for p in phases]), np.array([ms[p] for p in phases]))
    return HostCost(round(launch_us, 2), round(factor, 3), f"fitted on AR's {kind} phases of the {label} lease")


def cpu_runs() -> dict[str, dict[str, list[dict]]]:
    """dataset -> method -> records of the Token Recycling Table 1 runs under CPU_RUNS (variants left out)."""
    out: dict[str, dict[str, list[dict]]] = {}
    for folder in sorted((EVIDENCE / CPU_RUNS).iterdir()):
        summary = json.loads((folder / "summary.json").read_text())
        if summary["method"] in METHODS and not summary.get("variant"):
            turns = gzip.decompress((folder / "turns.jsonl.gz").read_bytes()).decode()  # (bench.page.evidence)
            out.setdefault(summary["dataset"], {})[summary["method"]] = [json.loads(x) for x in turns.splitlines()]
    return out


def step_ms(records: list[dict]) -> float:
    """ms per target forward, the prefill's included: what a lease's step ratio (MAT x AR's tok/s / the method's)
    and AR's 1000 / tok/s measure, where the prefill's time is inside the timed seconds and its token in the MAT."""
    return 1000 * sum(r["wall_time"] for r in records) / sum(len(r["accept_lengths"]) for r in records)


def replay_all(runs: dict[str, list[dict]], profile: Profile, host: HostCost | None, costs: StepCosts) -> dict:
    """Each method's records (HF's loop with its forwards priced: `loops_priced`) replayed on the GPU: forwards on
    the profile, the rest priced on its host; host None: the rest kept as measured here (the rule before)."""
    return {m: replayed(rs, profile, rest=priced(m, host, costs) if host else True) for m, rs in runs.items()}


def scaled(profile: Profile, factor: float, hardware: str) -> Profile:
    return Profile(**{**profile.__dict__, "name": f"{profile.name}-x{factor:.3f}", "hardware": hardware,
                      "ms": (np.asarray(profile.ms) * factor).tolist(),
                      "prefill_ms": (np.asarray(profile.prefill_ms) * factor).tolist()})


def validate(costs: StepCosts | None = None) -> dict:
    """Per GPU: the host price and forward used (and how each was fitted), then per dataset and method the
    projected step ratio, speedup [interval] and MAT beside the lease's, the errors and the goals' misses. `costs`:
    the step costs of the leases EAGER_COSTS does not name (default: step_costs.json)."""
    default = "step_costs.json" if costs is None else "the caller's"
    costs = costs or step_costs()
    runs = {dataset: dict(zip(by_method, loops_priced(list(by_method.values()))))
            for dataset, by_method in cpu_runs().items()}
    ar = [r for d in runs.values() for r in d["ar"]]
    per = {g: costs_of(g, costs) for g in GPUS}  # each lease's own
    hosts = {g: own_host(g, per[g], phase_ms(ar)) for g in GPUS}
    out = {"step_costs_machine": per[next(iter(GPUS))].machine,
           "step_costs": {g: EAGER_COSTS.get(g, default) for g in GPUS}, "gpus": {}}
    for gpu in GPUS:
        host, costs = borrowed_host(gpu, hosts), per[gpu]
        meas = measured(gpu)
        if not timed_eagerly(gpu):  # its graph part only (GRAPH_COSTS), priced with this host
            out["gpus"][gpu] = {"host": host.__dict__, "forward": None, "rows": {}, "phases": {},
                                "note": "no eager T(n) and no eager AR timed: validated in graph mode only"}
            continue
        nearest, path = eager_profile(gpu)
        if nearest == gpu:
            profile, forward = Profile.read(path), f"the {gpu} lease's T(n, context)"
        else:  # the nearest GPU's curve, scaled so that AR's step (all datasets' runs) is the lease's
            base = Profile.read(path)
            forwards = step_ms(replayed(ar, base, rest=False))
            rest = step_ms(replayed(ar, base, rest=priced("ar", host, costs))) - forwards
            factor = (1000 / lease(gpu)["speedup"]["ar"]["tok_s"] - rest) / forwards
            profile, forward = scaled(base, factor, gpu), f"the {nearest}'s T(n, context) x {factor:.3f}, fitted on AR"
        rows = {}
        for dataset, by_method in sorted(runs.items()):
            proj, kept = replay_all(by_method, profile, host, costs), replay_all(by_method, profile, None, costs)
            rows[dataset] = {m: row_of(m, proj, kept, by_method[m], meas.get(m)) for m in METHODS if m in by_method}
        out["gpus"][gpu] = {"host": host.__dict__, "forward": forward, "rows": rows,
                            "phases": phase_check(gpu, host, costs, runs)}
        if in_run := forward_in_run(gpu):
            out["gpus"][gpu]["forward_in_run"] = in_run
    host_of = {g: HostCost(**out["gpus"][g]["host"]) for g in out["gpus"]}  # each GPU's, as its rows used it
    out["graph_regime"] = {g: graph_regime(g, host_of[g]) for g in GRAPH_COSTS}
    ahead_gpu, ahead_costs = GRAPH_AHEAD
    out["graph_ahead"] = graph_regime(ahead_gpu, host_of[ahead_gpu], ahead_costs)
    out["misses"] = misses(out)
    return out


def row_of(m: str, proj: dict, kept: dict, here: list[dict], got: dict | None) -> dict:
    """One method's row: its projected step over AR's (and with the rest kept as measured), tok/s, speedup with
    its interval and MAT here; beside the lease's figures (`got`, if it timed the method), the error against its
    goal and whether the measured speedup and step lie inside the projected interval and the timed passes."""
    ratio = step_ms(proj[m]) / step_ms(proj["ar"])
    row = {"step_ratio": round(ratio, 3), "step_ratio_kept": round(step_ms(kept[m]) / step_ms(kept["ar"]), 3),
           "mat_here": round(mat(here) or 1.0, 3), "tok_s": round(tokens_per_s(proj[m])["mean_of_questions"], 1)}
    if m != "ar":
        interval, value = speedup_interval(proj[m], proj["ar"]), speedup(proj[m], proj["ar"])
        row |= {"speedup": None if value is None else round(value, 3),  # None: no question in common
                "interval": [round(x, 3) for x in interval] if interval else None}
    if not got:
        return row
    row["measured"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in got.items()}
    row["error"] = round((row["tok_s"] / got["tok_s"] if m == "ar" else ratio / got["step_ratio"]) - 1, 3)
    row["goal"] = GOALS["ahead" if m in AHEAD else "ar_tok_s" if m == "ar" else "step_ratio"]
    if m != "ar":
        row["in_interval"] = bool(row["interval"] and row["interval"][0] <= got["speedup"] <= row["interval"][1])
    if passes := got.get("step_ratio_passes"):
        row["in_passes"] = bool(passes[0] <= ratio <= passes[1])
    return row


def phase_check(gpu: str, host: HostCost, costs: StepCosts, runs: dict) -> dict:
    """Per method the lease timed phase by phase (synced), each phase outside the forward: [priced from its runs'
    phase times here and its step costs, measured there] in ms per step; AR's were in the fit, the others are
    held out."""
    out = {}
    for m, row in (lease(gpu).get("speedup") or {}).items():
        if not isinstance(row, dict) or not row.get("ms_per_step") or m not in costs.methods:
            continue
        phases, here = costs.methods[m]["phases"], phase_ms([r for d in runs.values() for r in d.get(m, [])])
        timed = row.get("ms_per_step_timed") or {}  # the timed passes' own phases (unsynced), where kept
        out[m] = {p: [round(host.host_factor * here[p] * phases[p]["python_share"]
                            + host.launch_us / 1000 * phases[p]["ops"], 3), ms, *([timed[p]] if p in timed else [])]
                  for p, ms in row["ms_per_step"].items() if p in phases and p in here and p not in TARGET_PHASES}
    return out


def forward_in_run(label: str) -> dict:
    """`forward_alone_and_in_run` of the lease's speedup part."""
    return forward_alone_and_in_run(lease(label).get("speedup") or {})


def misses(result: dict) -> list[str]:
    """Each row whose error is over its goal, the graph regime's included."""
    eager = [(f"{gpu} {dataset} {m}", row) for gpu, g in result["gpus"].items()
             for dataset, rows in g["rows"].items() for m, row in rows.items()]
    graph = [(f"{gpu} graph regime {m}", row) for gpu, g in result["graph_regime"].items()
             for m, row in g["methods"].items()]
    return [f"{name}: error {row['error']:+.1%} (goal {row['goal']:.0%})" for name, row in eager + graph
            if "error" in row and abs(row["error"]) > row["goal"]]


def span(interval) -> str:
    return f"[{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "—"


def synced(got: dict) -> str:
    return f"; synced {got['step_ratio_synced']:.2f}" if "step_ratio_synced" in got else ""


def table(result: dict) -> str:
    """The validation as markdown: one row per GPU, dataset and method."""
    head = ("| GPU | dataset | method | step / AR's, projected (rest as measured here) | measured [its passes; synced] "
            "| error "
            "| speedup projected [95%] | measured [interval] | inside | MAT here / there |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for gpu, g in result["gpus"].items():
        for dataset, rows in g["rows"].items():
            for m, r in rows.items():
                got = r.get("measured") or {}
                if m == "ar":
                    spread = got.get("ms_per_token_range")
                    spread = f" ({spread[0]}-{spread[1]} ms a token over its prompts)" if spread else ""
                    lines.append(f"| {gpu} | {dataset} | ar | {r['tok_s']} tok/s | {got.get('tok_s', '—')} tok/s{spread} | "
                                 f"{r.get('error', 0):+.1%} | — | — | — | 1 / 1 |")
                    continue
                ours, step = f"{r['speedup']:.2f} {span(r['interval'])}", f"{r['step_ratio']:.2f} ({r['step_ratio_kept']:.2f})"
                if not got:
                    lines.append(f"| {gpu} | {dataset} | {m} | {step} | — | — | {ours} | — | — "
                                 f"| {r['mat_here']:.2f} / — |")
                    continue
                inside = "—" if got.get("interval") is None else "yes" if r.get("in_interval") else "no"
                lines.append(
                    f"| {gpu} | {dataset} | {m} | {step} | {got['step_ratio']:.2f} "
                    f"{span(got.get('step_ratio_passes'))}{synced(got)} | {r['error']:+.1%} | {ours} | "
                    f"{got['speedup']:.2f} {span(got.get('interval'))} | {inside} | "
                    f"{r['mat_here']:.2f} / {got['mat']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    out = Path(args[args.index("--out") + 1]) if "--out" in args else OUT
    if step_costs() is None:
        print("error: no step costs (evidence/projection/step_costs.json): run `make step-costs`", file=sys.stderr)
        return 1
    result = validate()
    from bench.cachefile import atomic_write

    atomic_write(out, json.dumps(result, indent=1) + "\n")
    for gpu, g in result["gpus"].items():
        print(f"{gpu}: host {g['host']['launch_us']} µs a launch, factor {g['host']['host_factor']} "
              f"({g['host']['source']}); forward: {g['forward']}")
    print(table(result))
    for gpu, g in result["gpus"].items():
        for m, phases in g["phases"].items():
            print(f"{gpu} {m} (ms a step, priced / synced there[ / timed]{', in the fit' if m == 'ar' else ''}): "
                  + ", ".join(f"{p} " + " / ".join(f"{x:.2f}" for x in v) for p, v in phases.items()))
    for gpu, g in result["gpus"].items():
        for m, f in g.get("forward_in_run", {}).items():
            print(f"{gpu} {m}: its forward in the timed passes {f['in_run_ms']:.2f} ms a step, alone T({f['width']}) "
                  f"{f['alone_ms']:.2f} ms (x{f['ratio']:.2f}; over AR's x{f.get('over_ar', float('nan')):.2f})")
    print("misses: " + ("; ".join(result["misses"]) or "none"))
    for g in [*result["graph_regime"].values(), result["graph_ahead"]]:
        print("\n".join(graph_projection.lines(g)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
