"""A first look at the target forward captured in a CUDA graph, before the engine's graph mode exists (issue 67).

    python scripts/graph_probe.py [--out FILE] [--shapes smollm2-135m,llama-7b] [--widths 1,16,64]

Needs only torch and transformers (a lent GPU's first call has neither hydra nor the embedded GGUF): random weights
of a named Llama shape (bench.models.random_init's shapes, read here from bench/shapes/), bf16, 512 tokens
prefilled into a static KV buffer of 1024 columns, then one forward over n tokens with a 4D additive mask spanning
the whole buffer, timed eager and as a replayed torch.cuda.CUDAGraph (warm-up on a side stream, capture once,
device sync around each timed region, median of REPS). The KV layer writes the new tokens at columns held in a
device tensor, as the graph mode's will. Prints a table and writes the records as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import yaml
from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig
from transformers.cache_utils import DynamicLayer

CONTEXT, CAPACITY, REPS = 512, 1024, 20
SHAPES = Path(__file__).resolve().parents[1] / "bench" / "shapes"


class SlotLayer(DynamicLayer):
    """keys/values are fixed buffers [1, H, CAPACITY, D]; a forward writes its t tokens at columns slots[:t]."""

    def __init__(self, k, v, slots):
        super().__init__()
        self.keys, self.values, self.slots = k, v, slots
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        idx = self.slots[: key_states.shape[-2]]
        self.keys.index_copy_(2, idx, key_states)
        self.values.index_copy_(2, idx, value_states)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return CONTEXT


def config(shape: str) -> LlamaConfig:
    fields = yaml.safe_load((SHAPES / f"{shape}.yaml").read_text())
    keep = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
            "vocab_size", "max_position_embeddings", "tie_word_embeddings", "rms_norm_eps", "rope_theta")
    return LlamaConfig(**{k: fields[k] for k in keep if k in fields}, attn_implementation="sdpa")


def cache_kwarg(model) -> str:
    """transformers 5.24 renamed past_key_values to cache (5.17 knows only the old name)."""
    import inspect
    return "cache" if "cache" in inspect.signature(model.model.forward).parameters else "past_key_values"


def timed(fn, reps: int = REPS) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def probe(shape: str, widths: list[int]) -> list[dict]:
    cfg = config(shape)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    heads, dim = cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    buf = torch.zeros(cfg.num_hidden_layers, 2, 1, heads, CAPACITY, dim, dtype=torch.bfloat16, device="cuda")
    slots = torch.arange(CAPACITY, device="cuda")
    cache = DynamicCache(config=cfg)
    cache.layers = [SlotLayer(buf[i, 0], buf[i, 1], slots) for i in range(cfg.num_hidden_layers)]
    name = cache_kwarg(model)
    low = torch.finfo(torch.bfloat16).min
    records = []
    with torch.inference_mode():
        ids = torch.randint(0, cfg.vocab_size, (1, CONTEXT), device="cuda")
        mask = torch.full((1, 1, CONTEXT, CAPACITY), low, dtype=torch.bfloat16, device="cuda")
        mask[0, 0, :, :CONTEXT] = torch.triu(torch.full((CONTEXT, CONTEXT), low, device="cuda"), 1)
        model(input_ids=ids, position_ids=torch.arange(CONTEXT, device="cuda")[None], attention_mask=mask,
              **{name: cache}, use_cache=True)
        for n in widths:
            x = torch.randint(0, cfg.vocab_size, (1, n), device="cuda")
            pos = torch.arange(CONTEXT, CONTEXT + n, device="cuda")[None]
            m = torch.full((1, 1, n, CAPACITY), low, dtype=torch.bfloat16, device="cuda")
            m[0, 0, :, :CONTEXT] = 0
            m[0, 0, :, CONTEXT : CONTEXT + n] = torch.triu(torch.full((n, n), low, device="cuda"), 1)
            slots[:n] = pos[0]
            out = {}

            def step(x=x, pos=pos, m=m, out=out):
                out["logits"] = model(input_ids=x, position_ids=pos, attention_mask=m, **{name: cache},
                                      use_cache=True).logits

            eager_ms = timed(step)
            eager = out["logits"].clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            t0 = time.perf_counter()
            with torch.cuda.graph(graph):
                step()
            capture_s = time.perf_counter() - t0
            graph_ms = timed(graph.replay)
            same = bool(torch.equal(out["logits"], eager))
            records.append({"shape": shape, "n": n, "context": CONTEXT, "eager_ms": round(eager_ms, 3),
                            "graph_ms": round(graph_ms, 3), "capture_s": round(capture_s, 2),
                            "graph_logits_equal_eager": same})
            print(records[-1], flush=True)
            del graph
    return records


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="results/graph_probe.json")
    parser.add_argument("--shapes", default="smollm2-135m,llama-2-7b")
    parser.add_argument("--widths", default="1,16,64")
    args = parser.parse_args()
    import transformers
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "transformers": transformers.__version__}
    print(env, flush=True)
    records = []
    for shape in args.shapes.split(","):
        records += probe(shape, [int(w) for w in args.widths.split(",")])
        torch.cuda.empty_cache()  # the last shape's model went with its frame
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"environment": env, "records": records}, indent=2) + "\n")


if __name__ == "__main__":
    main()
