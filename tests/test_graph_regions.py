"""The regions graph mode captures on CUDA, checked on a CPU for the two faults a capture would meet there and the
eager CPU run cannot show.

- **A graph break.** Every proposer whose whole step is one graph (`Proposer.static_step`: AR, Token Recycling,
  Medusa, BPD; a new one is covered by registering it) has its step body traced by torch.compile(fullgraph=True),
  the CPU's stand-in for capture, and the trace computes what the eager step does.
- **A host tensor inside the region.** On CUDA a captured op that reads a tensor on the host (a tree's index built
  at setup, a 0-dim constant) copies it at capture time, or fails: a copy from pageable memory cannot be captured.
  On a CPU every tensor is on the host, so the regions run on the `meta` device instead (shapes, no data): the
  model, the method's parts and the engine's buffers live there, and any op that meets a CPU tensor is named.
  bench.core.syncs.HostSyncCounter, which the wait tests use, cannot see these: it takes a tensor made before it
  started counting for a device one.
"""

from __future__ import annotations

import traceback
from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from bench.core import syncs
from bench.core.graph_engine import GraphEngine
from bench.core.syncs import HostSyncCounter
from bench.core.timing import PhaseTimer
from bench.models.heads import MedusaHeads
from methods import REGISTRY, build_method, method_class
from tests.conftest import compose_cfg, tiny_llama

V, NO_EOS, HEADS = 64, 10_000, 5
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6] * 2
# Every registered whole-step method at its defaults (HF's loops are no proposers)
WHOLE = sorted(n for n in REGISTRY if getattr(method_class(n), "static_step", False))
META = torch.device("meta")


def parts(device: torch.device):
    """The tiny model and a bundle with zero-block heads (each is the lm_head), on `device`."""
    with device:
        model = tiny_llama(V, attn_implementation="sdpa", max_positions=512)
        heads = MedusaHeads(model.config.hidden_size, V, HEADS, lm_head=model.get_output_embeddings()).eval()
    bundle = SimpleNamespace(name="tiny", model=model, device=device, dtype=torch.float32, vocab_size=V,
                             eos_token_ids=[NO_EOS], max_context=512, load_heads=lambda: heads)
    return model, bundle


def engine_on(model, device, monkeypatch) -> GraphEngine:
    with monkeypatch.context() as patch:
        if device.type == "meta":  # the engine's batch-1 generator (unused here): the meta device has none
            cpu_generator = torch.Generator
            patch.setattr(torch, "Generator", lambda device=None: cpu_generator())
        return GraphEngine(model, [NO_EOS], 512, 256, device=device, capture=False)


def changed(engine, method, step) -> list[torch.Tensor]:
    """What a step changes: the KV cache and its length, the outcome, the draft's hidden state, the method's own."""
    hidden = [step.hidden] if step.hidden is not None else []
    return [engine.kv.buf, engine.kv.length, step.stats, *tree_leaves(method.state_dict()), *hidden]


def state(engine, method, step) -> list[torch.Tensor]:
    return [t.clone() for t in changed(engine, method, step)]


def set_state(engine, method, step, saved) -> None:
    for t, s in zip(changed(engine, method, step), saved, strict=True):
        t.copy_(s)


@pytest.mark.parametrize("name", WHOLE)
def test_whole_steps_trace_whole(name, monkeypatch):
    """A filled cache and state (a decoded prompt), then one step eagerly and one through the fullgraph trace from
    the same start: the same cache, outcome, hidden state and method state."""
    model, bundle = parts(torch.device("cpu"))
    engine = engine_on(model, torch.device("cpu"), monkeypatch)
    method = build_method(compose_cfg(f"method={name}").method, bundle)
    assert engine.whole(method)
    method.generate(engine, PROMPT, 6, PhaseTimer(sync=False))
    step = engine.step_graph(method)
    torch.compiler.reset()  # (what earlier tests compiled)
    with torch.inference_mode():  # (the engine's buffers are inference tensors)
        step.root.fill_(PROMPT[-1])
        step.remaining.fill_(8)
        start = state(engine, method, step)
        engine.step_body(method, step)
        want = state(engine, method, step)
        set_state(engine, method, step, start)
        torch.compile(engine.step_body, backend="aot_eager", fullgraph=True)(method, step)
        got = state(engine, method, step)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


class HostTensorOps(TorchDispatchMode):
    """`with HostTensorOps() as h: ...` on the meta device: `h.ops`, each aten op that took or made a CPU tensor,
    with the frame of this project that called it."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in tree_leaves((args, kwargs, out))):
            ours = [f for f in traceback.extract_stack() if "/site-packages/" not in f.filename
                    and f.filename not in (__file__, syncs.__file__)]
            self.ops.append((str(func), f"{ours[-1].filename.split('/')[-1]}:{ours[-1].lineno}" if ours else "?"))
        return out


def on_meta(name, monkeypatch):
    model, bundle = parts(META)
    engine = engine_on(model, META, monkeypatch)
    return engine, build_method(compose_cfg(f"method={name}").method, bundle)


def host_ops(region) -> tuple[list, int]:
    """The aot ops of `region` that meet a CPU tensor, and HostSyncCounter's reads and transfers over it."""
    with HostTensorOps() as ops, HostSyncCounter() as counter, torch.inference_mode():
        region()
    return ops.ops, counter.total


@pytest.mark.parametrize("name", WHOLE)
def test_whole_steps_keep_to_the_device(name, monkeypatch):
    engine, method = on_meta(name, monkeypatch)
    step = engine.step_graph(method)
    assert host_ops(lambda: engine.step_body(method, step)) == ([], 0)


@pytest.mark.parametrize("hidden, layers", [(False, {}), (True, {}), (False, {"feature_layers": (0, 1)})],
                         ids=["logits", "hidden", "layer-states"])
def test_bucket_forwards_keep_to_the_device(hidden, layers, monkeypatch):
    """A bucketed verification's captured forward, as the methods with a host or variable draft run it (EAGLE-3's
    layer states through hooks registered inside it)."""
    engine, _ = on_meta("pld", monkeypatch)
    bucket = engine.bucket(16, hidden, layers)
    out = []
    assert host_ops(lambda: out.append(engine.target(bucket.ids, bucket.positions, bucket.mask, hidden,
                                                     layers))) == ([], 0)
    assert (out[0].hidden is not None) == hidden and (out[0].layer_states is not None) == bool(layers)


def test_a_setup_time_host_index_is_named(monkeypatch):
    """The check can fail: Token Recycling's per-level parent indices left on the host, as a tree builds them, are
    an index copied into every captured step. HostSyncCounter misses it (the indices predate its counting)."""
    engine, method = on_meta("token_recycling", monkeypatch)
    step = engine.step_graph(method)
    method.levels = [(slots, torch.zeros(parents.shape, dtype=torch.long), ranks)
                     for slots, parents, ranks in method.levels]
    ops, waits = host_ops(lambda: engine.step_body(method, step))
    assert waits == 0 and ops and all(site.startswith("proposer.py:") for _, site in ops), ops


def test_a_failed_capture_puts_the_stream_back(monkeypatch):
    """torch.cuda.graph's exit raises from capture_end (a capture that met an op it cannot hold) before it restores
    the stream it switched to: the engine puts it back, so the next method's forwards do not run on a dead capture's
    stream. Python's cycle collector is off during a capture (a dead engine's graphs freed inside it would spoil it)
    and on again after, failed or not. Here torch.cuda's calls stand in for CUDA's, as torch's own graph context
    behaves."""
    import gc

    from bench.core import capture

    current, collecting = ["main"], []

    class Graph:
        def __enter__(self):
            current[0] = "capture"
            collecting.append(gc.isenabled())

        def __exit__(self, *exc):
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    monkeypatch.setattr(torch.cuda, "CUDAGraph", object)
    monkeypatch.setattr(torch.cuda, "graph", lambda graph, pool=None: Graph())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current[0])
    monkeypatch.setattr(torch.cuda, "set_stream", lambda stream: current.__setitem__(0, stream))
    with pytest.raises(RuntimeError, match="not permitted"):
        capture.capture(lambda: None, None, torch.device("cuda"))
    assert current == ["main"] and collecting == [False] and gc.isenabled()


def test_an_engine_nothing_uses_is_freed_without_a_collection():
    """No reference cycle through the engine (its forward was once an attribute bound to it): its static cache, and
    on CUDA its graphs, go when the last reference does, not at a collection that may fall inside a capture."""
    import gc
    import weakref

    model, _ = parts(torch.device("cpu"))
    gc.disable()
    try:
        engine = GraphEngine(model, [NO_EOS], 512, 256)
        freed = weakref.ref(engine)
        del engine
        assert freed() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("capture", [False, True], ids=["eager", "replayed"])
def test_a_prompt_decodes_bitwise_alike_whatever_the_cache_held(capture, monkeypatch):
    """The static cache is reused by every prompt and the mask hides what the last one left: in bf16 (where a leak
    would flip near-ties) every verification's logits are bit for bit those of a fresh engine. (The H200 lease of
    2026-11-28 saw graph mode decode some prompts otherwise from pass to pass: not this, on a CPU.)"""
    model, bundle = parts(torch.device("cpu"))
    model.to(torch.bfloat16)
    bundle.dtype = torch.bfloat16
    runs = []
    for before in (None, [3, 1, 4, 1, 5, 9, 2, 6] * 4):
        engine, seen = GraphEngine(model, [NO_EOS], 512, 256, capture=capture), []

        def recorded(*args, forward=engine.forward_bucket, seen=seen):
            out = forward(*args)
            seen.append(out.logits.clone())
            return out

        monkeypatch.setattr(engine, "forward_bucket", recorded)
        if before:
            build_method(compose_cfg("method=pld").method, bundle).generate(engine, before, 40, PhaseTimer(sync=False))
            seen.clear()
        gen = build_method(compose_cfg("method=pld").method, bundle).generate(engine, PROMPT, 40,
                                                                                PhaseTimer(sync=False))
        runs.append((gen.output_ids, seen))
    (tokens, logits), (again, logits_again) = runs
    assert tokens == again and len(logits) == len(logits_again) > 10
    assert all(torch.equal(a, b) for a, b in zip(logits, logits_again, strict=True))


def test_a_replay_spoils_the_other_graphs_outputs_in_its_pool():
    """On CUDA the graphs of one pool may overwrite each other's outputs (a later capture's outputs where an earlier
    one keeps temporaries): the stand-in spoils them at every replay, so a read of a bucket's logits after another
    bucket replayed fails off CUDA too, and the engine (which reads each bucket's output before the next replay)
    still decodes as the eager engine (tests/test_graph_mode.py, tests/test_graph_every_method.py)."""
    from bench.core.capture import EagerReplay

    pool, x = [], torch.ones(3)
    first, second = EagerReplay(lambda: (x * 2, torch.arange(3)), pool), EagerReplay(lambda: (x * 3, x * 4), pool)
    second.replay()  # a later graph's replay leaves an earlier one's outputs (still allocated on CUDA) alone
    assert torch.equal(first.out[0], x * 2) and pool == [first, second]
    first.replay()
    assert second.out[0].isnan().all() and second.out[1].isnan().all() and torch.equal(first.out[0], x * 2)
    ints = EagerReplay(lambda: (torch.arange(3),), pool)
    first.replay()
    assert torch.equal(ints.out[0], torch.arange(3))  # floats only: an index spoiled would fail otherwise
    model, bundle = parts(torch.device("cpu"))
    engine = GraphEngine(model, [NO_EOS], 512, 256, capture=True)
    build_method(compose_cfg("method=pld").method, bundle).generate(engine, PROMPT, 20, PhaseTimer(sync=False))
    earliest, *later = engine.pool
    assert later and all(not b.out.logits.isnan().any() for b in engine.buckets.values() if b.graph is earliest)
    with torch.inference_mode():  # as the engine replays
        earliest.replay()
    assert all(g.out.logits.isnan().all() for g in later)  # what a read after another replay would see

