"""The target forward against the machine's roofline, for `make bench-engine` (bench.perf.engine_bench).

Measured in the benchmark's own process (same threads, same memory state as the runs):
- the machine roof: stream bandwidth (a large copy and a large read-only sum) and the fp32 GEMM peak;
- the forward's roofline: weight bytes / bandwidth against n x FLOPs per token / peak;
- T(n) on the plain backend and on the bundle's chosen one, interleaved, beside that roofline;
- single linear ops (lm_head, one MLP up projection) per backend, with their error against float64.
The maths and the table are pure functions (tests/test_roofline.py); the measuring ones need a model only for T(n).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from bench.models import forward_cost
from bench.models.linear_backend import PrepackedLinear, onednn_available

SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
ROOF_SIZES = range(1, 129)
# Goals on the chosen backend, all "lower is better": T(1) against plain, flatness of T(8)/T(1), distance to roof.
GOALS = {"forward_t1_chosen_vs_plain": 0.60, "forward_t8_over_t1_chosen": 1.25,
         **{f"forward_vs_roofline_n{n}": 1.3 for n in (1, 8, 16, 64)}}
OP_ROWS = (1, 2, 8, 16)


# ---- pure maths -------------------------------------------------------------------------------------------

def read_parameters(model: nn.Module) -> list[torch.Tensor]:
    """The parameters one forward reads in full: every parameter once (tied ones once: `parameters()` dedups)
    except embedding tables, of which a forward reads only the rows of its tokens. A table that is also the
    output projection (tied lm_head) is read in full by the logits, so it stays."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head_weight = getattr(head, "weight", None)
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return [p for p in model.parameters() if id(p) not in tables or p is head_weight]


def weight_bytes(model: nn.Module) -> int:
    # PrepackedLinear's packed copy is not a parameter: the forward reads it instead of the weight, same size.
    return sum(p.numel() * p.element_size() for p in read_parameters(model))


def linear_layers(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, nn.Linear | PrepackedLinear)]


def flops_per_token(model: nn.Module) -> int:
    """2 x the multiply-adds of the linear layers (lm_head included) for one token. Attention over the cache
    (~2 x 2 x context x hidden per layer) is left out: the roofline is a lower bound, and stays one."""
    return 2 * sum(m.in_features * m.out_features for m in linear_layers(model))


def roofline_s(n: int, nbytes: float, flops_token: float, bandwidth: float, peak: float) -> float:
    """Least seconds of an n-token forward: the weights must stream once, and n tokens' FLOPs must run."""
    return max(nbytes / bandwidth, n * flops_token / peak)


def roofline_curve(sizes, nbytes: float, flops_token: float, bandwidth: float, peak: float) -> dict[int, float]:
    return {int(n): roofline_s(n, nbytes, flops_token, bandwidth, peak) for n in sizes}


def ridge_tokens(nbytes: float, flops_token: float, bandwidth: float, peak: float) -> float:
    """Tokens per forward at which compute starts to cost more than streaming the weights."""
    return nbytes / bandwidth * peak / flops_token


def best_and_median(seconds: list[float], work: float) -> dict:
    """Rates (work per second) of repeated timings: the best (the roof is what the machine can reach) and median."""
    return {"best": work / min(seconds), "median": work / statistics.median(seconds)}


def goal_values(t_plain: dict[int, float], t_chosen: dict[int, float], roof: dict[int, float]) -> dict:
    return {"forward_t1_chosen_vs_plain": t_chosen[1] / t_plain[1],
            "forward_t8_over_t1_chosen": t_chosen[8] / t_chosen[1],
            **{f"forward_vs_roofline_n{n}": t_chosen[n] / roof[n] for n in (1, 8, 16, 64)}}


def format_table(t_plain: dict[int, float], t_chosen: dict[int, float], roof: dict[int, float],
                 chosen: str) -> str:
    """T(n) per backend beside the roofline, in ms; ratios to the roofline and to each backend's T(1)."""
    head = (f"{'n':>4} {'T_plain ms':>10} {f'T_{chosen} ms':>12} {'roof ms':>8} {f'{chosen}/roof':>11} "
            f"{'plain T(n)/T(1)':>15} {f'{chosen} T(n)/T(1)':>16}")
    rows = [head]
    for n in sorted(t_chosen):
        rows.append(f"{n:>4} {t_plain[n] * 1e3:>10.2f} {t_chosen[n] * 1e3:>12.2f} {roof[n] * 1e3:>8.2f} "
                    f"{t_chosen[n] / roof[n]:>11.2f} {t_plain[n] / t_plain[1]:>15.2f} "
                    f"{t_chosen[n] / t_chosen[1]:>16.2f}")
    return "\n".join(rows)


def format_ops(ops: dict) -> str:
    """Per-op medians (ms) and max abs error against float64, one line per op, rows and method."""
    lines = [f"{'op':>8} {'rows':>4} {'method':>8} {'ms':>8} {'max abs err':>12}"]
    for op, per in ops["ops"].items():
        for rows, methods in per.items():
            for method, r in methods.items():
                ms = f"{r['ms']:8.3f}" if r.get("ms") is not None else f"{'-':>8}"
                err = f"{r['max_abs_err']:12.2e}" if r.get("max_abs_err") is not None else f"{'-':>12}"
                skipped = f"  ({r['skipped']})" if r.get("skipped") else ""
                lines.append(f"{op:>8} {rows:>4} {method:>8} {ms} {err}{skipped}")
    return "\n".join(lines)


# ---- measuring ------------------------------------------------------------------------------------------

def _timings(fn, repeats: int) -> list[float]:
    fn()  # untimed: touches every page once (first-touch faults would otherwise count as bandwidth)
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


@torch.inference_mode()
def stream_bandwidth(nbytes: int = 512 * 2**20, repeats: int = 5) -> dict:
    """Bytes per second of a copy (read + written, the STREAM count) and of a read-only `sum`, best and median."""
    src = torch.ones(max(nbytes // 4, 1))
    dst = torch.empty_like(src)
    size = src.numel() * 4
    copy = best_and_median(_timings(lambda: dst.copy_(src), repeats), 2 * size)
    read = best_and_median(_timings(lambda: src.sum(), repeats), size)
    # The forward only reads weights, so the read-only stream is the relevant roof; a copy's write stream
    # (plus write-allocate reads STREAM does not count) can sit below or above it, so the higher of the two wins.
    source = "read" if read["best"] >= copy["best"] else "copy"
    return {"bytes": size, "copy": copy, "read": read, "roofline": max(copy["best"], read["best"]),
            "roofline_source": source}


@torch.inference_mode()
def gemm_peak(size: int = 2048, repeats: int = 5) -> dict:
    """fp32 FLOP/s of a size^3 matmul (torch.mm: MKL), best and median."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(size, size, generator=gen), torch.randn(size, size, generator=gen)
    out = torch.empty(size, size)
    return {"size": size, **best_and_median(_timings(lambda: torch.mm(a, b, out=out), repeats), 2 * size**3)}


def machine_roof(nbytes: int, gemm_size: int, repeats: int) -> dict:
    return {"threads": torch.get_num_threads(), "bandwidth_b_s": stream_bandwidth(nbytes, repeats),
            "gemm_flop_s": gemm_peak(gemm_size, repeats)}


def op_shapes(config) -> dict[str, tuple[int, int]]:
    """(out, in) of the lm_head and of one MLP up projection, from the model config (SmolLM2-135M's otherwise)."""
    hidden = getattr(config, "hidden_size", 576)
    return {"lm_head": (getattr(config, "vocab_size", 49152), hidden),
            "mlp_up": (getattr(config, "intermediate_size", 1536), hidden)}


def _dynamo_room(compiling: bool):
    """Room for every (op, rows) graph: all compile nn.Linear.forward, and past dynamo's recompile limit (8) it
    would silently fall back to eager."""
    if not compiling:
        return contextlib.nullcontext()
    import torch._dynamo

    cfg = torch._dynamo.config
    return cfg.patch(**{"recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit": 64})


class _Compiler:
    """torch.compile of a linear per shape, within a budget of compile seconds; after a failure or an overrun it
    compiles nothing more and says why (`note`)."""

    def __init__(self, enabled: bool, budget_s: float):
        self.note, self.seconds, self.budget_s = None if enabled else "--no-compile", 0.0, budget_s

    def __call__(self, linear: nn.Linear, x: torch.Tensor):
        if self.note:
            return None
        t0 = time.perf_counter()
        try:
            # Inductor with freezing folds the weight into the graph and prepacks it for CPU on its own.
            fn = torch.compile(linear, dynamic=False, options={"freezing": True})
            fn(x)  # compiles for this shape
        except Exception as err:  # noqa: BLE001 - no compiler, any inductor error: the comparison goes on without it
            self.note = f"torch.compile failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
            fn = None
        self.seconds += time.perf_counter() - t0
        if self.seconds > self.budget_s and not self.note:
            self.note = f"compile budget of {self.budget_s:.0f} s spent"
        return fn


def _median_ms(methods: dict, xs: dict, reps: int) -> dict:
    """Median ms per method and row count; all interleaved in every repeat, the first repeat a warm-up."""
    times = {m: {r: [] for r in fns} for m, fns in methods.items()}
    for _ in range(reps + 1):
        for m, fns in methods.items():
            for r, fn in fns.items():
                t0 = time.perf_counter()
                fn(xs[r])
                times[m][r].append(time.perf_counter() - t0)
    return {m: {r: 1e3 * statistics.median(t[1:]) for r, t in per.items()} for m, per in times.items()}


@torch.no_grad()
def compare_ops(shapes: dict[str, tuple[int, int]], rows=OP_ROWS, reps: int = 30, compile_linear: bool = True,
                compile_budget_s: float = 60.0) -> dict:
    """Median ms of one linear per method (plain F.linear, oneDNN prepacked, torch.compile) at each row count,
    and its max abs error against a float64 product. Weights ~N(0, 0.05^2), inputs N(0, 1)."""
    gen = torch.Generator().manual_seed(0)
    compiler = _Compiler(compile_linear, compile_budget_s)
    ops = {}
    with _dynamo_room(compile_linear):
        for op, (n_out, n_in) in shapes.items():
            linear = nn.Linear(n_in, n_out, bias=False).requires_grad_(False)
            linear.weight.copy_(0.05 * torch.randn(n_out, n_in, generator=gen))
            w = linear.weight
            xs = {r: torch.randn(r, n_in, generator=gen) for r in rows}
            methods = {"plain": dict.fromkeys(rows, lambda x, w=w: F.linear(x, w))}
            if onednn_available():
                methods["onednn"] = dict.fromkeys(rows, PrepackedLinear(linear))
            compiled = {r: fn for r in rows if (fn := compiler(linear, xs[r])) is not None}
            if compiled:
                methods["compile"] = compiled
            ms = _median_ms(methods, xs, reps)
            ops[op] = {}
            for r in rows:
                ref = xs[r].double() @ w.double().T
                ops[op][r] = {m: {"ms": ms[m][r], "max_abs_err": (fns[r](xs[r]).double() - ref).abs().max().item()}
                              for m, fns in methods.items() if r in fns}
                if r not in methods.get("compile", {}):
                    ops[op][r]["compile"] = {"ms": None, "max_abs_err": None,
                                             "skipped": compiler.note or "not compiled"}
    return {"shapes": {k: list(v) for k, v in shapes.items()}, "ops": ops, "compile_seconds": compiler.seconds,
            "compile_note": compiler.note}


def plot(path: Path, t_by_backend: dict[str, dict[int, float]], roof: dict[int, float], title: str) -> Path:
    """T(n) per backend and the roofline, ms against n on a log x axis; written atomically (temp file + rename)."""
    from bench.report.plots import new_figure, save_figure  # matplotlib only when a figure is drawn

    fig = new_figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot(111)
    for name, t in t_by_backend.items():
        ax.plot(list(t), [1e3 * s for s in t.values()], marker="o", label=f"T(n), {name}")
    ax.plot(list(roof), [1e3 * s for s in roof.values()], color="black", linestyle="--", label="roofline")
    ax.set_xscale("log", base=2)
    ticks = sorted({n for t in t_by_backend.values() for n in t})
    ax.set_xticks(ticks, [str(n) for n in ticks])
    ax.set_xlabel("tokens per forward (n)")
    ax.set_ylabel("ms per forward")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return save_figure(fig, Path(path))


def section(bundle, args) -> dict:
    """Items 1-5 of the engine benchmark's forward-cost part; returns the goal values and the details."""
    roof = machine_roof(args.roof_mb * 2**20, args.gemm_size, args.roof_repeats)
    bandwidth, peak = roof["bandwidth_b_s"]["roofline"], roof["gemm_flop_s"]["best"]
    model, chosen = bundle.model, bundle.linear_backend
    nbytes, flops = weight_bytes(model), flops_per_token(model)
    curve = roofline_curve(ROOF_SIZES, nbytes, flops, bandwidth, peak)
    backends = tuple(dict.fromkeys(("plain", "onednn", chosen) if chosen == "mixed" else ("plain", chosen)))
    t = forward_cost.measure_backends(bundle, backends, SIZES, args.prefix_tokens, args.cost_reps)
    t_plain, t_chosen = t["plain"], t[chosen]
    roof_at = {n: curve[n] for n in SIZES}
    ops = compare_ops(op_shapes(model.config), OP_ROWS, args.op_reps, not args.no_compile)
    figure = plot(args.figure, t, curve,
                  f"{bundle.name} {str(bundle.dtype).replace('torch.', '')}, {torch.get_num_threads()} threads, "
                  f"{args.prefix_tokens}-token prefix; roof {bandwidth / 1e9:.0f} GB/s, {peak / 1e9:.0f} GFLOP/s")
    return {
        "goals": goal_values(t_plain, t_chosen, roof_at),
        "details": {
            "machine_roof": roof, "chosen_backend": chosen, "weight_bytes": nbytes, "flops_per_token": flops,
            "ridge_tokens": ridge_tokens(nbytes, flops, bandwidth, peak), "prefix_tokens": args.prefix_tokens,
            "forward_s": {b: {str(n): s for n, s in per.items()} for b, per in t.items()},
            "roofline_s": {str(n): s for n, s in curve.items()},
            "ops": ops, "figure": str(figure),
        },
        "table": format_table(t_plain, t_chosen, roof_at, chosen),
    }


def print_section(sec: dict) -> None:
    d = sec["details"]
    bw, gemm = d["machine_roof"]["bandwidth_b_s"], d["machine_roof"]["gemm_flop_s"]
    print(f"machine roof ({d['machine_roof']['threads']} threads): copy {bw['copy']['best'] / 1e9:.1f} GB/s "
          f"(median {bw['copy']['median'] / 1e9:.1f}), read {bw['read']['best'] / 1e9:.1f} GB/s "
          f"(median {bw['read']['median'] / 1e9:.1f}) -> roofline uses {bw['roofline_source']}; fp32 GEMM "
          f"{gemm['size']}^3 {gemm['best'] / 1e9:.0f} GFLOP/s (median {gemm['median'] / 1e9:.0f})")
    print(f"forward reads {d['weight_bytes'] / 1e6:.0f} MB of weights, {d['flops_per_token'] / 1e6:.0f} MFLOP per "
          f"token (linear layers); compute passes the weight stream at n = {d['ridge_tokens']:.1f}")
    print(sec["table"])
    print(format_ops(d["ops"]))
    print(f"figure: {d['figure']}")
