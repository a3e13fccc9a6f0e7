"""The like-for-like held-out check of the step model (issue 68): a lease's own speedup part, recorded on a CPU,
projected onto each GPU and set beside what the leases measured.

bench.cost.gpu_validation replays the Token Recycling Table 1 runs, which are other prompts and other settings
than a lease times (REST searched a larger store there than gpu-check's HumanEval one, on Spec-Bench and MBPP
prompts). Here the input is gpu-check's speedup part itself, run on a CPU in fp32 on the embedded model
(`evidence/projection/lease_pass/`, its README): the same HumanEval prompts, methods, untrained heads and store,
the same first-time state, each method's timed passes with their own phases, widths and per-generation totals.

A generation on the GPU is projected as its prefill (the GPU profile's, at each prompt's length) plus, per
decode step, its forward (T(w) at the passes' mean context, averaged over the step widths it ran) and its rest
priced by the step model (bench.cost.host): host_factor x each phase's Python (its ms here x its Python share,
bench.perf.step_costs; the time outside every phase all Python) + launch_us x its ops and the forward's beyond the
bare one. The host price is fitted on AR alone, on this CPU's AR against the lease's AR phase by phase; a GPU
whose lease measured no T(n) takes the nearest one's, scaled so that AR's step comes out as the lease's (a second
fit on AR). Every other method is held out. A step ratio (a method's ms per target forward, the prefill's
included, over AR's) is what a lease measures as MAT x AR's tok/s / the method's tok/s.

Each lease is projected from the sitting recorded at a commit whose engine ran as its own did (SITTINGS), with its
own step costs (gv.EAGER_COSTS). Ahead of the next lease (`ahead`): the newest sitting (NEWEST), recorded at the tree
that lease runs, priced with this tree's step costs on every GPU: the projections committed before it. Once its
folder is in gv.GPUS, unnamed in both tables, it is projected the same way, the host price fitted on its own AR.

    python -m bench.cost.pass_projection [--out evidence/projection/lease_pass_validation.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from bench.cost import gpu_validation as gv
from bench.cost.host import TARGET_PHASES, HostCost, StepCosts, step_costs
from bench.cost.profiles import Profile

PASS = gv.EVIDENCE / "projection" / "lease_pass"  # one folder per CPU sitting: <machine>-<date>/results.json
# The sitting each lease is projected from: the part recorded at a commit whose engine ran as the lease's did (as
# gv.EAGER_COSTS names its step costs); a lease not named takes NEWEST, recorded at the tree the next lease runs
SITTINGS = dict.fromkeys(("H200", "H100", "H200 11-28"), "vm_Intel_Xeon_Processor-20261128-224700")
NEWEST = "vm_AMD_EPYC-20261202-0724"
OUT = gv.EVIDENCE / "projection" / "lease_pass_validation.json"


def sitting(name: str = NEWEST) -> tuple[str, dict]:
    """(its folder's name, its speedup part) of a committed CPU sitting."""
    return name, json.loads((PASS / name / "results.json").read_text())["speedup"]


def methods(sp: dict) -> dict[str, dict]:
    return {m: row for m, row in sp.items() if isinstance(row, dict) and "per_generation" in row}


def rest_ms(method: str, row: dict, host: HostCost, costs: StepCosts) -> float:
    """A decode step's rest on the GPU host: each phase outside the forwards and the time outside every phase."""
    per = row["per_generation"]
    python = per["untimed_ms"] / max(per["decode_steps"], 1)
    ops = costs.forward_extra_ops(method)
    for phase, ms in row["ms_per_step_timed"].items():
        if phase not in TARGET_PHASES:
            share, phase_ops = costs.phase(method, phase)
            python, ops = python + share * ms, ops + phase_ops
    return host.host_factor * python + host.launch_us / 1000 * ops


def forward_ms(row: dict, profile: Profile, context: float, factor: float = 1.0) -> float:
    """A decode step's forward: T(w) at `context`, averaged over the step widths the passes ran."""
    widths = {int(w): c for w, c in row["widths"].items()}
    return factor * float(sum(c * profile.cost(w, context) for w, c in widths.items()) / sum(widths.values()))


def step_ms(method: str, sp: dict, profile: Profile, host: HostCost, costs: StepCosts, factor: float = 1.0) -> float:
    """ms per target forward (the prefill's included) of `method`'s generations projected onto the GPU."""
    row, context = sp[method], sp["forward_probe"]["context"]
    per = row["per_generation"]
    prefill = factor * float(np.mean(profile.prefill(np.asarray(sp["prompt_tokens"]))))
    steps = per["decode_steps"]
    return (prefill + steps * (forward_ms(row, profile, context, factor) + rest_ms(method, row, host, costs))) / (
        steps + 1)


def forward_factor(sp: dict, profile: Profile, host: HostCost, costs: StepCosts, ar_tok_s: float) -> float:
    """The factor on `profile`'s forwards that makes AR's projected step the lease's (1000 / its tok/s: AR's MAT
    is 1); AR's step is linear in it."""
    rest, at_one = step_ms("ar", sp, profile, host, costs, 0.0), step_ms("ar", sp, profile, host, costs, 1.0)
    return (1000 / ar_tok_s - rest) / (at_one - rest)


def project(costs: StepCosts | None = None, ahead: bool = False) -> dict:
    """Per GPU: its sitting, the host price and forward used, and per method the projected step over AR's and
    speedup (at the sitting's MAT) beside the lease's, where it timed the method. `ahead`: the next lease's
    projections, made before it: NEWEST on every GPU, each method priced with this tree's step costs (`costs`), the
    host price fitted on each lease's AR (its own step costs) against NEWEST's, nothing set beside."""
    costs = costs or step_costs()
    per = {g: gv.costs_of(g, costs) for g in gv.GPUS}  # each lease's own (gv.EAGER_COSTS)
    named = {g: NEWEST if ahead else SITTINGS.get(g, NEWEST) for g in gv.GPUS}
    parts = {name: sitting(name)[1] for name in set(named.values())}  # each sitting read once
    # the host factor is relative to the CPU that recorded the sitting: each sitting fits its own prices on AR
    hosts = {name: {g: gv.own_host(g, per[g], sp["ar"]["ms_per_step_timed"]) for g in gv.GPUS}
             for name, sp in parts.items()}
    out = {"step_costs_machine": costs.machine if ahead else per[next(iter(gv.GPUS))].machine, "gpus": {}}
    for gpu in gv.GPUS:
        if not gv.timed_eagerly(gpu):  # a lease of the graph and compiled parts alone: no eager pass to set beside
            continue
        name = named[gpu]
        sp = parts[name]
        host, priced = gv.borrowed_host(gpu, hosts[name]), costs if ahead else per[gpu]
        (nearest, path), factor = gv.eager_profile(gpu), 1.0
        profile = Profile.read(path)
        if nearest == gpu:
            forward = f"the {gpu} lease's T(n, context)"
        else:
            factor = forward_factor(sp, profile, host, priced, gv.lease(gpu)["speedup"]["ar"]["tok_s"])
            forward = f"the {nearest}'s T(n, context) x {factor:.3f}, fitted on AR"
        got, ar = {} if ahead else gv.measured(gpu), step_ms("ar", sp, profile, host, priced, factor)
        rows = {}
        for m, row in methods(sp).items():
            ratio = step_ms(m, sp, profile, host, priced, factor) / ar
            rows[m] = {"tok_s": round(1000 / ar, 1)} if m == "ar" else {
                "step_ratio": round(ratio, 3), "mat_here": row["mat"], "speedup": round(row["mat"] / ratio, 3)}
            if m in got:
                rows[m] |= measured_beside(m, rows[m], got[m])
        out["gpus"][gpu] = {"sitting": name, "host": host.__dict__, "forward": forward, "rows": rows}
    out["misses"] = [f"{gpu} {m}: error {r['error']:+.1%} (goal {r['goal']:.0%})" for gpu, g in out["gpus"].items()
                     for m, r in g["rows"].items() if "error" in r and abs(r["error"]) > r["goal"]]
    return out


def validation(costs: StepCosts | None = None) -> dict:
    """What lease_pass_validation.json holds: each lease beside its projection, and the next lease's ahead of it."""
    return {**project(costs), "ahead": project(costs, ahead=True)}


def measured_beside(m: str, row: dict, got: dict) -> dict:
    """The lease's figures beside a projected row, the error against its goal (AR's tok/s was fitted where the
    forward was scaled) and whether the projected step lies within the timed passes' range."""
    if m == "ar":
        return {"measured_tok_s": got["tok_s"], "error": round(row["tok_s"] / got["tok_s"] - 1, 3),
                "goal": gv.GOALS["ar_tok_s"]}
    passes = got.get("step_ratio_passes") or [got["step_ratio"]] * 2
    return {"measured_step_ratio": round(got["step_ratio"], 3), "measured_passes": [round(x, 3) for x in passes],
            "measured_speedup": got["speedup"], "mat_there": got["mat"],
            "error": round(row["step_ratio"] / got["step_ratio"] - 1, 3),
            "goal": gv.GOALS["ahead" if m in gv.AHEAD else "step_ratio"],
            "in_passes": bool(passes[0] <= row["step_ratio"] <= passes[1])}


def table(result: dict) -> str:
    lines = [("| GPU | method | step / AR's, projected | measured [its passes] | error | speedup projected (MAT here) "
              "| measured (MAT there) |"), "|---|---|---|---|---|---|---|"]
    for gpu, g in result["gpus"].items():
        for m, r in g["rows"].items():
            if m == "ar":
                got = f"{r['measured_tok_s']} tok/s" if "measured_tok_s" in r else "—"  # none ahead of a lease
                lines.append(f"| {gpu} | ar | {r['tok_s']} tok/s | {got} | "
                             + (f"{r['error']:+.1%}" if "error" in r else "—") + " | — | — |")
                continue
            got = (f"{r['measured_step_ratio']:.2f} [{r['measured_passes'][0]:.2f}, {r['measured_passes'][1]:.2f}] | "
                   f"{r['error']:+.1%}") if "error" in r else "— | —"
            there = f"{r['measured_speedup']:.2f} ({r['mat_there']:.2f})" if "error" in r else "—"
            lines.append(f"| {gpu} | {m} | {r['step_ratio']:.2f} | {got} | {r['speedup']:.2f} ({r['mat_here']:.2f}) | "
                         f"{there} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    out = Path(args[args.index("--out") + 1]) if "--out" in args else OUT
    missing = [PASS / n for n in {*SITTINGS.values(), NEWEST} if not (PASS / n / "results.json").is_file()]
    if step_costs() is None or missing:
        print(f"error: no step costs (make step-costs) or no CPU sitting {missing[0] if missing else ''}",
              file=sys.stderr)
        return 1
    result = validation()
    from bench.cachefile import atomic_write

    atomic_write(out, json.dumps(result, indent=1) + "\n")
    for title, part in (("each lease", result), (f"ahead of the next lease ({NEWEST}, this tree's step costs)",
                                                  result["ahead"])):
        print(f"{title}: gpu-check's speedup part recorded on a CPU (fp32), projected onto each GPU")
        for gpu, g in part["gpus"].items():
            print(f"{gpu} from {g['sitting']}: host {g['host']['launch_us']} µs a launch, factor "
                  f"{g['host']['host_factor']} ({g['host']['source']}); forward: {g['forward']}")
        print(table(part))
    print("misses: " + ("; ".join(result["misses"]) or "none"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
