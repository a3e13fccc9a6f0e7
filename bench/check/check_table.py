"""The table `make gpu-check` prints and writes as table.md (bench.check.gpu_check): one section per part that ran."""

from __future__ import annotations

from bench.check import compiled_check, goals, graph_check, repeat_check, speedup_check
from bench.cost.forward_probe import forward_alone_and_in_run

# The speedup part's tables by phase: (where a method's row holds it: a key, or "profile" and a quantity of
# bench.core.step_profile; title; format)
PER_PHASE = ((("ms_per_step_timed",), "ms per step, the timed passes (unsynced)", ".2f"),
             (("ms_per_step",), "ms per step, synced", ".2f"), (("ops_per_step",), "ops per step", ".0f"),
             (("profile", "host_ms"), "host ms per step, unsynced (profiler)", ".2f"),
             (("profile", "op_ms"), "host ms inside aten ops per step (profiler)", ".2f"),
             (("profile", "device_ms"), "device ms per step (profiler)", ".2f"),
             (("profile", "launches"), "kernel launches per step (profiler)", ".0f"),
             (("profile", "wait_ms"), "host ms waiting for the device per step (profiler)", ".2f"))


def cell(rec: dict) -> str:
    """One method row's table cell: grades (T = 0) or ok, host waits per step and, where judged, a decode step's per
    row against its budget (bench.check.wait_budget); or why it did not run."""
    status = rec["status"]
    if status.startswith("skipped"):
        return "-"
    if status != "ok":
        return "**crash**"
    grades = rec.get("grades")
    verdict = "ok" if grades is None else ", ".join(f"{grades.count(g)} {g}" for g in dict.fromkeys(grades))
    cuda = f" ({rec['cuda_syncs_per_step']:g} on CUDA)" if "cuda_syncs_per_step" in rec else ""
    late = f"; **{rec['captures_in_run']} captured in the run**" if rec.get("captures_in_run") else ""
    return f"{verdict}; {rec['host_waits_per_step']:g} w/s{cuda}{budget_cell(rec.get('decode_waits', {}))}{late}"


def budget_cell(decode: dict) -> str:
    """A decode step's waits per row against the CPU's budget, where judged (bench.check.wait_budget)."""
    if decode.get("within") is None:
        return ""
    if decode["within"]:
        return f"; decode {decode['waits']:g} ≤ {decode['budget']:g}"
    return f"; **decode {decode['waits']:g} > {decode['budget']:g}**" + (" (CPU too)" if "known_over" in decode else "")


def table(results: dict) -> str:
    env = results["environment"]
    gpu = f"{env['gpu']} ({env['gpu_memory_gib']} GiB)" if "gpu" in env else f"CPU {env['cpu']}"
    lines = [(f"gpu-check: {gpu}; torch {env['torch']} (CUDA {env['cuda']}), transformers {env['transformers']}, "
              f"accelerate {env['accelerate']}"), ""]
    if results.get("forward_cost"):
        first = results["forward_cost"][0]["context"]
        costs = [r for r in results["forward_cost"] if r["context"] == first]
        sizes = sorted({r["n"] for r in costs})
        lines += [f"| T(n) ms, {first} cached | " + " | ".join(f"n={n}" for n in sizes) + " |",
                  "|---|" + "---|" * len(sizes)]
        for key in dict.fromkeys((r["model"], r["dtype"]) for r in costs):
            ms = {r["n"]: r["ms"] for r in costs if (r["model"], r["dtype"]) == key}
            lines.append(f"| {key[0]} {key[1]} | " + " | ".join(f"{ms[n]:.2f}" for n in sizes) + " |")
        lines += [""]
    if "ar_vs_hf" in results:
        ar = results["ar_vs_hf"]
        lines += [(f"AR {ar['ar_tok_s']} tok/s, HF generate {ar['hf_generate_tok_s']} tok/s (x{ar['ar_over_hf']}); "
                   f"identical outputs {ar['identical']}/{ar['prompts']}")]
    lines += [f"AR vs HF generate, random {shape} bf16: {r['ar_tok_s']} vs {r['hf_generate_tok_s']} tok/s "
              f"(x{r['ar_over_hf']}); identical outputs {r['identical']}/{r['prompts']}"
              for shape, r in results.get("ar_vs_hf_shapes", {}).items()]
    if "speedup" in results:
        sp = results["speedup"]
        rows = {name: r for name, r in sp.items() if isinstance(r, dict) and "tok_s" in r}  # (not `seconds`)
        head = f"| taking turns, {sp['prompts']} prompts x {sp['max_new_tokens']} tokens, {sp['reps']} passes "
        lines += ["", head + "| tok/s | MAT | speedup [95%] (per pass) | fastest passes | grades |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {name} | {r['tok_s']} | {r['mat']} | {r['speedup']}"
                  + (" [{}, {}]".format(*r["speedup_interval"]) if r.get("speedup_interval") else "")
                  + f" ({', '.join(map(str, r['speedups']))}) | {r.get('best_speedup', '-')} | "
                  + ", ".join(f"{r['grades'].count(g)} {g}" for g in dict.fromkeys(r["grades"]))
                  + speedup_check.alike(r) + " |"
                  for name, r in rows.items()]
        for path, title, spec in PER_PHASE:
            per = {name: r.get(path[0]) if len(path) == 1 else r.get(path[0], {}).get(path[1])
                   for name, r in rows.items()}
            per = {name: by for name, by in per.items() if by}
            phases = list(dict.fromkeys(k for by_phase in per.values() for k in by_phase))
            if any(v for by in per.values() for v in by.values()):  # (a CPU's profile has no device work)
                lines += ["", f"| {title} | " + " | ".join([*phases, "all"]) + " |",
                          "|---|" + "---|" * (len(phases) + 1)]
                for name, by in per.items():
                    cells = [*(by.get(k, 0) for k in phases), sum(by.values())]
                    lines.append(f"| {name} | " + " | ".join(format(v, spec) for v in cells) + " |")
        probe = sp.get("forward_probe") or {}
        if "error" in probe:
            lines += ["", f"T(n) beside the timed passes failed: {probe['error']}"]
        if "ms" in probe:  # the bare forward beside the timed passes, against each one's width
            lines += ["", f"T(n) ms beside the timed passes, {probe['context']} cached: "
                      + ", ".join(f"n={n} {ms:.2f}" for n, ms in probe["ms"].items()), "", "its forward in its loop, "
                      "ms a step, against the probe's T(n) over the same widths: " + ", ".join(
                          f"{name} {f['in_run_ms']:.2f} / {f['alone_ms']:.2f} (x{f['ratio']:.2f}, over AR's "
                          f"x{f.get('over_ar', float('nan')):.2f}, mean width {f['width']})"
                          for name, f in forward_alone_and_in_run(sp).items())]
        ops = {name: r["profile"]["ops"] for name, r in rows.items() if r.get("profile", {}).get("ops")}
        lines += ["", "aten ops with the most host ms per step (profiler):", *(
            f"- {name} {phase}: " + ", ".join(f"{op} {ms:.2f}" for op, ms in top.items())
            for name, by_phase in ops.items() for phase, top in by_phase.items() if top)] if ops else []
        for key, what in (("copy_ops", "copies"), ("wait_ops", "waits")):
            queued = {name: r["profile"][key] for name, r in rows.items() if r.get("profile", {}).get(key)}
            lines += ["", f"{what} per step by the aten op that queued them (profiler):", *(
                f"- {name} {phase}: " + ", ".join(f"{op} {n:g}" for op, n in by.items())
                for name, by_phase in queued.items() for phase, by in by_phase.items() if by)] if any(
                by for q in queued.values() for by in q.values()) else []
        lines += [f"profile of {name} failed: {r['profile']['error']}" for name, r in rows.items()
                  if "error" in r.get("profile", {})]
        if "seconds" in sp:
            lines += ["", "seconds: " + ", ".join(f"{k} {v}" for k, v in sp["seconds"].items())]
    lines += [""]
    if results.get("methods"):
        lines += [("w/s: host waits per batch step, prefill included; decode a ≤ b: a decode step's waits per row "
                   "against the CPU suite's budget (bench.check.wait_budget), in bold where over it (CPU too: the "
                   "suite pins it over)"), "", *method_lines(results["methods"]), ""]
    if results.get("graph_methods"):
        lines += ["every method in graph mode (run.graphs=true), graded against the eager engine's AR; - : refused",
                  "", *method_lines(results["graph_methods"]), ""]
    if "repeats" in results:
        lines += repeat_check.lines(results["repeats"])
    if "attention" in results:
        lines += ["| attention | identical | eager ms/step | sdpa ms/step |", "|---|---|---|---|"]
        lines += [f"| {a['method']} | {a['identical']}/{a['prompts']} | {a['eager_ms_per_step']} | "
                  f"{a['sdpa_ms_per_step']} |" for a in results["attention"]]
    if "graphs" in results:
        lines += ["", *graph_check.table_lines(results["graphs"])]
    if "compiled" in results:
        lines += ["", *compiled_check.compiled_lines(results["compiled"])]
    if env.get("device") == "cuda" and (goal_lines := goals.goal_lines(results)):
        lines += ["", *goal_lines]
    return "\n".join(lines) + "\n"


def method_lines(records: list[dict]) -> list[str]:
    """The methods part's table: a row per method, a column per (batch, temperature) it ran."""
    combos = list(dict.fromkeys((r["batch"], r["temperature"]) for r in records))
    lines = ["| method | " + " | ".join(f"b{b} T{t:g}" for b, t in combos) + " |", "|---|" + "---|" * len(combos)]
    for name in dict.fromkeys(r["method"] for r in records):
        by = {(r["batch"], r["temperature"]): r for r in records if r["method"] == name}
        lines.append(f"| {name} | " + " | ".join(cell(by[c]) if c in by else "" for c in combos) + " |")
    return lines
