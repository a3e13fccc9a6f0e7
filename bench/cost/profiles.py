"""Cost profiles: T(n, context), the milliseconds of one target forward over n new tokens after `context` cached ones,
for one (model shape, hardware, dtype); the data a run's steps are replayed on (bench/cost/replay.py).

One format (`Profile`: a grid of n and context, milliseconds per cell, interpolated between), three sources:
- `roofline_profile`: from the hardware's specifications (bench/cost/hardware/*.yaml: memory bandwidth, peak FLOP/s
  per dtype, host-device link, a per-layer overhead) and the model's shape (bench/shapes/*.yaml, the fields of
  its config.json), with no weights. A forward reads every weight once and the cache of `context` tokens, and does
  2 FLOPs per weight per token (the output projection's only for the tokens scored: all of a verification's, a
  prefill's last) plus attention over the context; it takes the longer of the two at the hardware's rates, plus the
  per-layer overhead of an eager forward (kernel launches, Python). An offloaded target streams its
  weights over the host link instead of reading them from device memory (DySpec Tables 3-4).
- measured on this machine (scripts/validate_projection.py: the forward-cost measurement,
  bench.models.forward_cost, at several contexts);
- measured on a GPU by `make gpu-check` (the same measurement there).
What it leaves out: batches (replay prices a batch from the batch-1 grid: bench.cost.replay.batched_ms), kernels
faster than eager (fused attention, CUDA graphs), and the draft's own cost, which replay adds from the run's records.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench.errors import HarnessError
from bench.shapes import read_yaml, shape_config

HERE = Path(__file__).parent
BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
NS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXTS = (0, 256, 512, 1024, 2048, 4096)
PREFILL_NS = (512, 1024, 2048, 4096)  # prompts longer than the grid's n (DySpec's C4 prompts, multi-turn chats)


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False

    @classmethod
    def load(cls, name: str) -> ModelShape:
        spec = shape_config(name)  # a config.json's fields; those a forward's cost needs are kept
        return cls(name, **{k: v for k, v in spec.items() if k in cls.__dataclass_fields__})

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def layer_params(self) -> int:
        """Weights of one decoder layer: q, o (hidden^2 each), k, v (hidden x kv width each), the MLP's three."""
        kv = self.num_key_value_heads * self.head_dim
        return 2 * self.hidden_size ** 2 + 2 * self.hidden_size * kv + 3 * self.hidden_size * self.intermediate_size

    @property
    def read_params(self) -> int:
        """Weights one forward reads in full: the layers and the output projection (the embedding table only
        for the tokens' rows; a tied table is read in full as the output projection)."""
        return self.num_hidden_layers * self.layer_params + self.vocab_size * self.hidden_size


@dataclass(frozen=True)
class Hardware:
    name: str
    bandwidth_gbs: float
    peak_tflops: dict
    layer_overhead_ms: float
    link_gbs: float | None = None
    memory_gb: float | None = None
    device_name: str | None = None  # as torch names the GPU (a gpu-check profile's `hardware`)
    # The host's price of a step's rest (bench.cost.host): µs per op launched, Python time over this CPU's, whence
    launch_us: float | None = None
    host_factor: float | None = None
    host_source: str | None = None

    @classmethod
    def load(cls, name: str) -> Hardware:
        spec = read_yaml(HERE / "hardware", name)
        return cls(**{**spec, "name": spec.get("name", name)})


def hardware_of(profile_name: str) -> Hardware | None:
    """The hardware entry of a profile name (load_profile's): a roofline's `@<hardware>`, or a profile file's GPU
    by its device name; None when no entry names it."""
    if Path(profile_name).suffix == ".json":
        device = Profile.read(profile_name).hardware if Path(profile_name).is_file() else None
        return next((hw for hw in map(Hardware.load, sorted(p.stem for p in (HERE / "hardware").glob("*.yaml")))
                     if device and hw.device_name == device), None)
    hardware = profile_name.partition("@")[2].partition(":")[0].removesuffix("+offloaded")
    return Hardware.load(hardware) if hardware else None




def roofline_ms(shape: ModelShape, hw: Hardware, dtype: str, n: int, context: int,
                offloaded: bool = False, scored: int | None = None) -> float:
    """One forward over n tokens after `context` cached ones: max(bytes moved / bandwidth, FLOPs / peak) plus the
    per-layer overhead. Offloaded: the weights come over the host link, the cache stays on the device. `scored`:
    how many of the n tokens get logits (default all, as a verification needs; a prefill scores only its last)."""
    b = BYTES[dtype]
    kv_bytes = 2 * shape.num_hidden_layers * shape.num_key_value_heads * shape.head_dim * (context + n) * b
    weights = shape.read_params * b
    memory_s = kv_bytes / (hw.bandwidth_gbs * 1e9) + weights / ((hw.link_gbs if offloaded else hw.bandwidth_gbs) * 1e9)
    attention = 4 * shape.num_hidden_layers * shape.hidden_size * n * (context + n)  # QK^T and AV
    head = shape.vocab_size * shape.hidden_size  # the output projection, for the scored tokens only
    flops = 2 * (shape.read_params - head) * n + 2 * head * (n if scored is None else scored) + attention
    compute_s = flops / (hw.peak_tflops[dtype] * 1e12)
    return 1000 * max(memory_s, compute_s) + shape.num_hidden_layers * hw.layer_overhead_ms


@dataclass
class Profile:
    """T(n, context) in ms on a grid (ms[i][j]: context contexts[i], n ns[j]), for one model, hardware and dtype."""

    name: str
    source: str  # "roofline", "measured" or "gpu-check"
    model: str
    hardware: str
    dtype: str
    ns: list[int]
    contexts: list[int]
    ms: list[list[float]]
    # A prefill's ms over prefill_ns prompt tokens (empty cache, only the last token scored, as the engine
    # prefills); None: the grid at context 0, which scores every token (profile files from before the curve).
    prefill_ns: list[int] | None = None
    prefill_ms: list[float] | None = None

    def prefill(self, n) -> np.ndarray:
        """ms of prefills over n prompt tokens."""
        if self.prefill_ms is None:
            return self.cost(n, 0)
        return along(np.asarray(self.prefill_ns, float), np.asarray(self.prefill_ms, float), np.asarray(n, float))

    def cost(self, n, context) -> np.ndarray:
        """ms of forwards over n tokens after `context` ones (arrays broadcast): linear in n within the grid, past
        its last n along the last segment; linear in context, flat outside the measured contexts."""
        n, context = np.broadcast_arrays(np.asarray(n, float), np.asarray(context, float))
        ns, cs, grid = np.asarray(self.ns, float), np.asarray(self.contexts, float), np.asarray(self.ms, float)
        per_context = np.stack([along(ns, row, n) for row in grid])  # [contexts, *n.shape]
        if len(cs) == 1:
            return per_context[0]
        i = np.clip(np.searchsorted(cs, context, side="right") - 1, 0, len(cs) - 2)
        w = np.clip((context - cs[i]) / (cs[i + 1] - cs[i]), 0.0, 1.0)
        lo = np.take_along_axis(per_context, i[None], 0)[0]
        hi = np.take_along_axis(per_context, (i + 1)[None], 0)[0]
        return lo + w * (hi - lo)

    def save(self, path: str | Path) -> Path:
        from bench.cachefile import atomic_write

        atomic_write(Path(path), json.dumps(asdict(self), indent=1))
        return Path(path)

    @classmethod
    def read(cls, path: str | Path) -> Profile:
        return cls(**json.loads(Path(path).read_text()))


def mean_profile(profiles: list[Profile]) -> Profile:
    """The profiles' mean, point by point (one model, grid and prefill sizes: a sitting's measurements)."""
    ms = np.mean([p.ms for p in profiles], axis=0).tolist()
    prefill = np.mean([p.prefill_ms for p in profiles], axis=0).tolist() if profiles[0].prefill_ms else None
    return Profile(**{**asdict(profiles[0]), "ms": ms, "prefill_ms": prefill})


def along(ns: np.ndarray, ms: np.ndarray, n: np.ndarray) -> np.ndarray:
    slope = (ms[-1] - ms[-2]) / (ns[-1] - ns[-2])
    return np.where(n <= ns[-1], np.interp(n, ns, ms), ms[-1] + slope * (n - ns[-1]))


def roofline_profile(model: str, hardware: str, dtype: str = "float16", offloaded: bool = False,
                     ns=NS, contexts=CONTEXTS) -> Profile:
    shape, hw = ModelShape.load(model), Hardware.load(hardware)
    if dtype not in hw.peak_tflops:
        raise HarnessError(f"{hw.name} has no peak for {dtype} (has: {', '.join(hw.peak_tflops)})")
    grid = [[roofline_ms(shape, hw, dtype, n, c, offloaded) for n in ns] for c in contexts]
    prefill_ns = sorted({*ns, *PREFILL_NS})
    prefill = [roofline_ms(shape, hw, dtype, n, 0, offloaded, scored=1) for n in prefill_ns]
    name = f"{model}-{hardware}-{dtype}" + ("-offloaded" if offloaded else "")
    return Profile(name, "roofline", model, hw.name + (" (offloaded)" if offloaded else ""), dtype, list(ns),
                   list(contexts), grid, prefill_ns, prefill)


@functools.lru_cache(maxsize=32)
def load_profile(name: str) -> Profile:
    """A profile file (a path to its JSON) or a roofline `<shape>@<hardware>[:<dtype>][+offloaded]` (dtype default
    float16), e.g. `llama-2-7b@a100-80gb` or `llama-2-70b@a100-40gb+offloaded`. Cached: callers must not change it."""
    if Path(name).suffix == ".json":
        if not Path(name).is_file():
            raise HarnessError(f"no profile file {name!r}")
        try:
            return Profile.read(name)
        except (ValueError, TypeError) as err:  # not JSON, not a mapping, or not a profile's fields
            why = err.msg if isinstance(err, json.JSONDecodeError) else str(err).splitlines()[0]
            raise HarnessError(f"profile file {name!r} is not a cost profile ({why}); gpu-check's profiles/ and "
                               "bench.cost write them") from None
    spec, offloaded = (name[: -len("+offloaded")], True) if name.endswith("+offloaded") else (name, False)
    shape, at, rest = spec.partition("@")
    hardware, _, dtype = rest.partition(":")
    if not at or not shape or not hardware:
        raise HarnessError(f"profile {name!r}: give a JSON file or <shape>@<hardware>[:<dtype>][+offloaded]")
    return roofline_profile(shape, hardware, dtype or "float16", offloaded)


# Published AR baselines the roofline is checked against (docs/cost_model.md): the papers' own CSVs, read where they
# are kept; (label, csv, row filter, column -> ms per token, model, hardware, offloaded, mean context).
PAPERS = HERE.parent / "report"
BASELINES = (
    ("DySpec Table 1 (AR, C4, T=0)", "dyspec/paper_tables/dyspec_tables_latency_per_token.csv",
     {"table": 1, "dataset": "C4", "temperature": 0, "method": "baseline"}, ("latency_s_per_token", 1000.0),
     "llama-2-7b", "a100-40gb", False, 192),
    ("DySpec Table 2 (AR, C4, T=0)", "dyspec/paper_tables/dyspec_tables_latency_per_token.csv",
     {"table": 2, "dataset": "C4", "temperature": 0, "method": "baseline"}, ("latency_s_per_token", 1000.0),
     "llama-2-13b", "a100-40gb", False, 192),
    ("DySpec Table 3 (AR, C4, T=0, offloaded)", "dyspec/paper_tables/dyspec_tables_latency_per_token.csv",
     {"table": 3, "dataset": "C4", "temperature": 0, "method": "baseline"}, ("latency_s_per_token", 1000.0),
     "llama-2-70b", "a100-40gb", True, 192),
    ("Token Recycling Table 1 (vanilla, 7B)", "token_recycling/paper_tables/token_recycling_table1.csv",
     {"size": "7B", "method": "vanilla"}, ("specbench_tok_s", -1000.0), "llama-2-7b", "a100-80gb", False, 400),
    ("Token Recycling Table 1 (vanilla, 13B)", "token_recycling/paper_tables/token_recycling_table1.csv",
     {"size": "13B", "method": "vanilla"}, ("specbench_tok_s", -1000.0), "llama-2-13b", "a100-80gb", False, 400),
    ("Token Recycling Table 1 (vanilla, 33B)", "token_recycling/paper_tables/token_recycling_table1.csv",
     {"size": "33B", "method": "vanilla"}, ("specbench_tok_s", -1000.0), "vicuna-33b", "a100-80gb", False, 400),
)


def baselines(dtype: str = "float16") -> list[dict]:
    """Each published AR baseline beside the roofline's ms per token (one forward of one token at the mean
    context) and the relative error; for an on-device row also the error with the per-layer overhead refitted
    without it (`leave_one_out`). A negative scale reads a rate: ms = -scale / value."""
    import pandas as pd

    out = []
    for label, csv, where, (column, scale), model, hardware, offloaded, context in BASELINES:
        df = pd.read_csv(PAPERS / csv)
        row = df[np.logical_and.reduce([df[k] == v for k, v in where.items()])].iloc[0]
        published = scale * row[column] if scale > 0 else -scale / row[column]
        shape, hw = ModelShape.load(model), Hardware.load(hardware)
        ours = roofline_ms(shape, hw, dtype, 1, context, offloaded)
        out.append({"baseline": label, "model": model, "hardware": hardware, "offloaded": offloaded,
                    "published_ms": published, "roofline_ms": ours, "error": ours / published - 1,
                    "layers": shape.num_hidden_layers, "overhead_ms": shape.num_hidden_layers * hw.layer_overhead_ms})
    for r in out:
        if not r["offloaded"]:
            others = fit_layer_overhead([o for o in out if o is not r])
            r["leave_one_out"] = (r["roofline_ms"] - r["overhead_ms"] + r["layers"] * others) / r["published_ms"] - 1
    return out


def fit_layer_overhead(rows: list[dict]) -> float:
    """The per-layer overhead (ms) that fits the rows' published ms per token best in least squares: what each
    on-device row's roofline leaves unexplained (published - roofline without its overhead) against its layer
    count. Offloaded rows are left out: their forward is the host link's, not the launches'."""
    rows = [r for r in rows if not r.get("offloaded")]
    layers = np.array([r["layers"] for r in rows], dtype=float)
    unexplained = np.array([r["published_ms"] - r["roofline_ms"] + r["overhead_ms"] for r in rows])
    return float(layers @ unexplained / (layers @ layers))


if __name__ == "__main__":  # evidence/projection/baselines.json: the table of docs/cost_model.md
    rows = baselines()
    print(json.dumps({"layer_overhead_ms_fit": round(fit_layer_overhead(rows), 4), "rows": rows}, indent=1))
