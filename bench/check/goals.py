"""Issue 67's goals read from one lease's gpu-check results (bench.check.gpu_check, its calls merged with `--merge`):
each goal's figures, its bar and whether it is met, in table.md and as docs/gpu.md's goals table. A goal whose part
did not run is "not measured" (met: None), never met; a figure is taken from the results as they are, nothing else
goes in."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from bench.check.graph_check import methods_label
from methods import REGISTRY

FORWARD_MS = 3.0  # the embedded model's one-token forward in graph mode (eager: 19-21 ms)
# AR on the random 7B shape in graph mode, tok/s: 60% of its memory floor (13.5 GB of bf16 weights at 3.35 TB/s on an
# H100, 4.8 TB/s on an H200); no bar on another GPU
AR_7B = {"H200": 210.0, "H100": 150.0}
SHAPE_7B = "llama-7b"
TR_SHARE, TR_WIDTH = 0.9, 81  # Token Recycling's speedup over graph AR >= 0.9 x MAT x T(1)/T(w); its 80 nodes + root
TR_GOAL = "Token Recycling in graph mode: 0 mismatches, speedup >= 0.9 x MAT x T(1)/T(w), one read a step"
METHODS_GOAL = ("every registered method on CUDA, eager: runs or refuses, 0 mismatches at T = 0, host waits within "
                "the CPU's budgets")


@dataclass(frozen=True)
class Goal:
    goal: str
    measured: str  # the figures, each named by the regime it comes from
    met: bool | None  # None: not measured, or not all of it
    source: str  # where in results.json

    def row(self) -> str:
        verdict = {True: "yes", False: "**no**"}.get(self.met, "not measured" if self.measured == "-" else "in part")
        return f"| {self.goal} | {self.measured} | {verdict} | {self.source} |"


def interpolated(curve: dict[int, float], n: int) -> float:
    """T(n) on a measured curve {n: ms}, linear between the neighbouring widths (flat past the ends)."""
    ns = sorted(curve)
    return float(np.interp(n, ns, [curve[m] for m in ns]))


def forward_goal(label: str, graphs: dict, compiled: dict) -> Goal:
    one = {"graph": next((r["graph_ms"] for r in graphs.get("t_n", []) if r["model"] == label and r["n"] == 1), None),
           "graph compiled": next((r.get("graph_compiled_ms") for r in compiled.get("t_n", []) if r["n"] == 1), None)}
    one = {k: v for k, v in one.items() if v is not None}
    return Goal(f"{label}, one-token forward in graph mode <= {FORWARD_MS:g} ms",
                "; ".join(f"{k} {v:.2f} ms" for k, v in one.items()) or "-",
                min(one.values()) <= FORWARD_MS if one else None, "graphs.t_n, compiled.t_n (n = 1)")


def ar_7b_goal(gpu: str, graphs: dict, compiled: dict) -> Goal:
    shape = compiled.get("ar_shapes", {}).get(SHAPE_7B, {})  # (its plain graph AR too: the graph part's 7B is last)
    rates = {"graph": graphs.get("ar", {}).get(SHAPE_7B, {}).get("graph_tok_s") or shape.get("graph_tok_s"),
             "graph compiled": shape.get("graph_compiled_tok_s")}
    rates = {k: v for k, v in rates.items() if v is not None}
    bar = next((v for k, v in AR_7B.items() if k in gpu), None)
    return Goal(f"{SHAPE_7B} shape, AR in graph mode >= "
                + (f"{bar:g} tok/s on this {gpu}" if bar else f"60% of its memory floor (no bar for {gpu or 'this device'})"),
                "; ".join(f"{k} {v} tok/s" for k, v in rates.items()) or "-",
                max(rates.values()) >= bar if rates and bar else None,
                f"graphs.ar.{SHAPE_7B}, compiled.ar_shapes.{SHAPE_7B}")


def ar_hf_goal(model: str, graphs: dict, compiled: dict, embedded: bool) -> Goal:
    """Graph AR over transformers' compiled static-cache generate on `model`; the compiled part times HF beside it on
    the methods' model only, so on a shape its compiled AR is set against the graph part's HF (another call). A ratio
    over an HF generate that did not compile (a node without a compiler, or transformers declining: its `hf_static`
    label) is shown, marked, and does not count towards the goal."""
    ar = graphs.get("ar", {}).get(model, {})
    ratios = {"graph": (ar.get("graph_over_hf_static"), ar.get("hf_static", ""))}  # (ratio, how HF ran)
    if embedded:
        mine = compiled.get("ar", {})
        ratios["graph compiled"] = (mine.get("graph_compiled_over_hf_static"), mine.get("hf_static", ""))
    elif (mine := compiled.get("ar_shapes", {}).get(model, {}).get("graph_compiled_tok_s")) and ar.get("hf_static_tok_s"):
        ratios["graph compiled (HF from the graph part's call)"] = (round(mine / ar["hf_static_tok_s"], 3),
                                                                   ar.get("hf_static", ""))
    ratios = {k: (r, how.startswith("compiled")) for k, (r, how) in ratios.items() if r is not None}
    counted = [r for r, hf_compiled in ratios.values() if hf_compiled]
    return Goal(f"{model}, graph AR / compiled HF static-cache generate >= 1.0",
                "; ".join(f"{k} {r:.2f}" + ("" if ok else " (HF uncompiled)") for k, (r, ok) in ratios.items()) or "-",
                max(counted) >= 1.0 if counted else None,
                f"graphs.ar.{model}" + (", compiled.ar" if embedded else f", compiled.ar_shapes.{model}"))


def token_recycling_goal(label: str, graphs: dict) -> Goal:
    """0 mismatches; its speedup over graph AR >= TR_SHARE x MAT x T(1)/T(w) on the graph curve of the same part;
    one read a step where its host waits were counted."""
    tr = graphs.get("speedup", {}).get("token_recycling")
    curve = {r["n"]: r["graph_ms"] for r in graphs.get("t_n", []) if r["model"] == label}
    if not tr or 1 not in curve:
        return Goal(TR_GOAL, "-", None, "graphs.speedup, graphs.t_n, graphs.waits")
    bound = TR_SHARE * tr["mat"] * curve[1] / interpolated(curve, TR_WIDTH)
    mismatches = tr["grades"].count("mismatch")
    interval = " [{}, {}]".format(*tr["speedup_interval"]) if tr.get("speedup_interval") else ""
    figures = [f"{mismatches} mismatches of {len(tr['grades'])}",
               f"x{tr['speedup']}{interval} at MAT {tr['mat']} against a bound of {bound:.3f} (w = {TR_WIDTH})"]
    met = mismatches == 0 and tr["speedup"] >= bound
    if waits := graphs.get("waits", {}).get("token_recycling"):
        figures.append(f"{waits['reads_per_step']} reads a step")
        met = met and waits["reads_per_step"] <= 1.0
    else:
        figures.append("host waits not counted")
    return Goal(TR_GOAL, "; ".join(figures), met, "graphs.speedup, graphs.t_n, graphs.waits")


def methods_goal(records: list[dict]) -> Goal:
    """Every registered method on the device, eager: runs or refuses in one line, 0 mismatches at T = 0; its decode
    steps' host waits within the budget pinned on the CPU (bench.check.wait_budget: a setting the CPU suite pins over
    budget is named, not failed), counted beside CUDA's sync debug mode."""
    if not records:
        return Goal(METHODS_GOAL, "-", None, "methods")
    ran = {r["method"] for r in records}
    crashed = sorted({r["method"] for r in records if r["status"].startswith("crash")})
    grades = [g for r in records if r["temperature"] == 0 for g in r.get("grades") or ()]
    apart: dict[str, float] = {}  # each method's widest gap between the two counts
    for r in records:
        if "cuda_syncs_per_step" in r:
            gap = abs(r["host_waits_per_step"] - r["cuda_syncs_per_step"])
            apart[r["method"]] = max(gap, apart.get(r["method"], 0.0))
    judged = [r for r in records if r.get("decode_waits", {}).get("within") is not None]
    over = [r for r in judged if not r["decode_waits"]["within"]]
    unexpected = [r for r in over if "known_over" not in r["decode_waits"]]
    pinned = Counter(r["method"] for r in over if "known_over" in r["decode_waits"])
    figures = [f"{len(ran)} of {len(REGISTRY)} registered methods", f"crashes: {', '.join(crashed) or 'none'}",
               ", ".join(f"{grades.count(g)} {g}" for g in ("identical", "near-tie", "mismatch")) + " at T = 0"]
    if judged:
        figures.append(f"decode waits within budget in {len(judged) - len(over)} of {len(judged)} runs"
                       + "".join(f"; over, not pinned on the CPU: {r['method']} T={r['temperature']:g} b={r['batch']}"
                                 f" ({r['decode_waits']['waits']:g} > {r['decode_waits']['budget']:g})"
                                 for r in unexpected)
                       + (f"; over as the CPU suite pins them: {', '.join(f'{m} ({n})' for m, n in pinned.items())}"
                          if pinned else ""))
    else:
        figures.append("decode waits not judged (not counted, or too few decode steps)")
    if apart:
        worst = max(apart, key=apart.get)
        figures.append(f"host waits counted against CUDA's sync debug mode: up to {apart[worst]:.2f} a step apart "
                       f"({worst})")
    failed = bool(crashed) or "mismatch" in grades or bool(unexpected)
    complete = ran >= set(REGISTRY) and len(judged) == sum(r["status"] == "ok" for r in records)
    return Goal(METHODS_GOAL, "; ".join(figures), False if failed else True if complete else None, "methods")


def goals(results: dict) -> list[Goal]:
    sizes = results.get("sizes", {})
    label = methods_label(SimpleNamespace(cost_models=sizes.get("cost_models") or [["smollm2-135m", None]],
                                          method_shape=sizes.get("method_shape")))
    graphs, compiled = results.get("graphs", {}), results.get("compiled", {})
    gpu = results.get("environment", {}).get("gpu", "")
    return [forward_goal(label, graphs, compiled), ar_7b_goal(gpu, graphs, compiled),
            ar_hf_goal(label, graphs, compiled, True), ar_hf_goal(SHAPE_7B, graphs, compiled, False),
            token_recycling_goal(label, graphs), methods_goal(results.get("methods", []))]


def goal_lines(results: dict) -> list[str]:
    """The goals table, or nothing where no part behind them ran."""
    rows = goals(results)
    if all(g.met is None and g.measured == "-" for g in rows):
        return []
    return ["| goal (issue 67) | measured | met | results.json |", "|---|---|---|---|", *(g.row() for g in rows)]

