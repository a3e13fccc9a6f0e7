"""The engine's graph mode (run.graphs=true, bench.core.graph_engine) on a CPU: the static-shape path that CUDA
captures, run eagerly. Its outputs are greedy AR's in fp32 on the embedded model, its buffers never move, a step
waits for the device once, the regions a GPU captures trace whole, and what it cannot run is refused (the one-line
errors of the command line: tests/test_bad_inputs.py)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from bench.core.graph_engine import GraphEngine, GraphModeRefused, bucket_width
from bench.core.syncs import HostSyncCounter
from bench.core.timing import PhaseTimer
from bench.core.tree import chain
from bench.models.heads import MedusaHeads
from methods import build_method
from tests.conftest import assert_lossless, compose_cfg, run_method, tiny_llama, with_draft

CAPACITY = 512  # the prompts (<= ~200 tokens) + 32 new + Token Recycling's 80-node tree
V, NO_EOS = 64, 10_000
PROMPTS = [[5, 6, 7, 8, 9] * 3, [3, 1, 4, 1, 5, 9, 2, 6]]


def medusa_bundle(smollm):
    """Zero-block Medusa heads: each is the lm_head (drafts rarely accepted; the static tree is verified)."""
    lm_head = smollm.model.get_output_embeddings()
    heads = MedusaHeads(lm_head.in_features, smollm.vocab_size, 5, lm_head=lm_head).to(smollm.device, smollm.dtype)
    bundle = dataclasses.replace(smollm)
    bundle.load_heads = lambda: heads.eval()
    return bundle


@pytest.mark.model
@pytest.mark.parametrize("overrides", [("method=ar",), ("method=token_recycling",), ("method=pld",),
                                       ("method=medusa",), ("method=sd", "method.draft_length=4")],
                         ids=lambda o: o[0].split("=")[1])
def test_identical_to_greedy_ar(smollm, prompts, greedy, drafts, overrides):
    """fp32, the embedded model: the eager engine's outputs are these (tests/test_real_model.py and the methods'
    own tests), so graph mode's equal run.graphs=false's."""
    bundle = {"medusa": medusa_bundle(smollm), "sd": with_draft(smollm, drafts["self"])}.get(
        overrides[0].split("=")[1], smollm)
    n = 1 if overrides[0] in ("method=ar", "method=medusa") else 2  # (zero-block Medusa: ~26 s for 2; AR: no tree)
    gens = run_method(bundle, prompts[:n], *overrides, graphs=CAPACITY)
    mat = assert_lossless(gens, greedy[:n])
    if overrides[0] in ("method=token_recycling", "method=pld", "method=sd"):
        assert mat > 1.2  # drafts were accepted: the KV compaction and the buckets ran


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(V, attn_implementation="sdpa", max_positions=512)


def bundle_of(model):
    """What the lookup methods use of a bundle."""
    return SimpleNamespace(name="tiny", model=model, device=torch.device("cpu"), dtype=torch.float32, vocab_size=V,
                           eos_token_ids=[NO_EOS], max_context=512)


def make(name: str, model):
    return build_method(compose_cfg(f"method={name}").method, bundle_of(model))


def graph_engine(model, capacity=256):
    return GraphEngine(model, [NO_EOS], 512, capacity)


def decode(method, engine, prompt, new=12):
    return method.generate(engine, prompt, new, PhaseTimer(sync=False))


@pytest.mark.parametrize("capture", [False, True], ids=["eager", "replayed"])
@pytest.mark.parametrize("name", ["ar", "token_recycling", "pld"])
def test_tiny_matches_the_eager_engine(tiny, name, capture):
    """Replayed: the capture path as on CUDA (warm-ups, state reset around them, static outputs rewritten by each
    replay) with an EagerReplay standing in for the graph."""
    from bench.core.engine import Engine

    eager = Engine(tiny, [NO_EOS], 512)
    graph = GraphEngine(tiny, [NO_EOS], 512, 256, capture=capture)
    for p in PROMPTS:
        want = decode(make(name, tiny), eager, p, 20).output_ids
        assert decode(make(name, tiny), graph, p, 20).output_ids == want


@pytest.mark.parametrize("name", ["ar", "token_recycling", "pld"])
def test_a_compiled_forward_decodes_as_the_eager_engine(tiny, name):
    """run.graph_compile: the bucket forward goes through torch.compile(fullgraph=True) before the capture path
    (here the aot_eager backend, which traces as inductor does and computes as the eager ops: a CPU needs no
    compiler); every width after the first is served by one dynamic recompile, never a fallback to eager."""
    from bench.core.engine import Engine

    torch._dynamo.reset()  # (what earlier tests compiled)
    torch._dynamo.utils.counters.clear()
    eager = Engine(tiny, [NO_EOS], 512)
    graph = GraphEngine(tiny, [NO_EOS], 512, 256, capture=True, compile_with={"backend": "aot_eager"})
    for p in PROMPTS:
        want = decode(make(name, tiny), eager, p, 20).output_ids
        assert decode(make(name, tiny), graph, p, 20).output_ids == want
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert 1 <= frames <= 2, frames  # the first width static, then one graph with the width dynamic


def test_a_compiled_forward_compiles_once_for_whole_steps_and_bucket_forwards_alike(tiny, monkeypatch):
    """One compiled engine serving a whole step (AR) and a bucket forward (PLD, as gpu-check's T(n) does) compiles
    its forward twice in all: the first width, then the width dynamic. The whole step passed `layers` as None and
    the bucket forward as a dict, and the type guard on it cost a third compile (an inductor compile on a lease);
    so did a first trace in a process whose eager forwards had not yet looked up the cache argument's name."""
    monkeypatch.setattr("bench.core.forward.CACHE_NAMES", {})  # as in a fresh process
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graph = GraphEngine(tiny, [NO_EOS], 512, 256, capture=True, compile_with={"backend": "aot_eager"})
    for name in ("pld", "ar"):
        decode(make(name, tiny), graph, PROMPTS[0], 12)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2


def heads_bundle(model):
    """bundle_of(model) with zero-block Medusa heads (each is the lm_head: it drafts the root again, which a tiny
    model that repeats itself accepts)."""
    heads = MedusaHeads(model.config.hidden_size, V, 5, lm_head=model.get_output_embeddings()).eval()
    bundle = bundle_of(model)
    bundle.load_heads = lambda: heads
    return bundle


@pytest.mark.parametrize("capture", [False, True], ids=["eager", "replayed"])
@pytest.mark.parametrize("overrides", [("method=medusa", "tree=tr_2_2_2"), ("method=bpd",)], ids=["medusa", "bpd"])
def test_heads_steps_are_one_graph_fed_the_engines_hidden_states(tiny, overrides, capture, monkeypatch):
    """Medusa and BPD in graph mode: the whole step is one graph (draft from the heads, forward, acceptance,
    compaction, the deepest accepted slot's hidden state into a static buffer). Each draft reads the hidden state
    the eager engine hands over at that step, and the outputs are the eager engine's."""
    from bench.core.engine import Engine
    from methods.shared.heads import HeadsProposer

    seen = []
    cls = type(build_method(compose_cfg(*overrides).method, heads_bundle(tiny)))
    original = cls.draft_from

    def logged(self: HeadsProposer, root):
        seen.append(self.hidden.clone())
        return original(self, root)

    monkeypatch.setattr(cls, "draft_from", logged)
    eager = Engine(tiny, [NO_EOS], 512)
    graph = GraphEngine(tiny, [NO_EOS], 512, 256, capture=capture)
    accepted = 0  # drafts accepted over both prompts: the hidden states decided something
    for p in PROMPTS:
        method = build_method(compose_cfg(*overrides).method, heads_bundle(tiny))
        want = decode(method, eager, p, 20)
        hiddens, seen[:] = list(seen), []
        method = build_method(compose_cfg(*overrides).method, heads_bundle(tiny))
        assert graph.whole(method)
        got = decode(method, graph, p, 20)
        assert got.output_ids == want.output_ids and got.accept_lengths == want.accept_lengths
        accepted += sum(want.accept_lengths[1:]) - len(want.accept_lengths[1:])
        if capture:  # the capture's warm-ups draft too (their state is reset after): the steps' are the last
            seen[:] = seen[len(seen) - len(hiddens):]
        assert len(seen) == len(hiddens) == len(want.accept_lengths) - 1
        for a, b in zip(seen, hiddens, strict=True):
            torch.testing.assert_close(a, b)
        seen[:] = []
    assert accepted > 0


def test_static_buffers_keep_their_addresses(tiny, monkeypatch):
    """The KV buffer, the slots and length and every bucket's inputs stay where they were allocated, across steps
    and prompts: a captured graph reads and writes those addresses."""
    engine = graph_engine(tiny)
    seen: dict[tuple, set] = {}
    forward = engine.forward_bucket

    def recording(bucket, hidden, layers):
        key = bucket.ids.shape[1]
        seen.setdefault(key, set()).add((bucket.ids.data_ptr(), bucket.positions.data_ptr(), bucket.mask.data_ptr()))
        seen.setdefault("kv", set()).add((engine.kv.buf.data_ptr(), engine.kv.slots.data_ptr(),
                                          engine.kv.length.data_ptr()))
        return forward(bucket, hidden, layers)

    monkeypatch.setattr(engine, "forward_bucket", recording)
    method = make("pld", tiny)  # chains of varying width: several buckets
    steps = sum(len(decode(method, engine, p, 24).accept_lengths) - 1 for p in PROMPTS * 2)
    assert steps > 20 and len(seen) >= 2
    assert all(len(pointers) == 1 for pointers in seen.values()), seen


@pytest.mark.parametrize("name", ["ar", "token_recycling", "medusa", "bpd"])
def test_one_wait_per_step(tiny, name):
    """A graph-mode step reads the device once (the outcome); nothing else waits between its start and that read."""
    engine = graph_engine(tiny)
    bundle = heads_bundle(tiny) if name in ("medusa", "bpd") else bundle_of(tiny)
    method = build_method(compose_cfg(f"method={name}").method, bundle)
    decode(method, engine, PROMPTS[0], 3)  # warm: the tree's indices are sent once
    counts = []
    for new in (1, 12):
        with HostSyncCounter() as counter:
            steps = len(decode(method, engine, PROMPTS[0], new).accept_lengths)
        counts.append((counter.total, steps))
    (w1, s1), (w12, s12) = counts
    assert (w12 - w1) / (s12 - s1) == 1.0


def test_captured_regions_trace_whole(tiny):
    """What CUDA captures around a bucket's forward traces into one graph with torch.compile(fullgraph=True), the
    CPU's stand-in for capture, which a graph break or a host read would fail, and computes what the eager code does:
    the forward with the device work around it (the mask, the KV columns, the path compaction). The whole steps'
    traces: tests/test_graph_regions.py."""
    from bench.core.forward import full_forward

    engine = graph_engine(tiny)
    decode(make("pld", tiny), engine, PROMPTS[0], 12)  # a filled cache and buckets
    bucket = max(engine.buckets.values(), key=lambda b: b.ids.shape[1])
    tree = chain(bucket.ids.shape[1] - 1)
    bias, depth = engine.padded(tree, bucket.ids.shape[1])

    def region(ids, positions):
        engine.kv.write_after_prefix(ids.shape[1])
        mask = engine.kv.mask(bias, engine.low)[None, None]
        logits = full_forward(tiny, ids, cache=engine.kv.cache, position_ids=positions + depth,
                              attention_mask=mask).logits
        engine.kv.keep_path(tree.on("cpu").path_slots[-1], torch.ones(1, dtype=torch.long))
        return logits

    with torch.inference_mode():  # (the engine's buffers are inference tensors)
        positions = engine.kv.length - 1 + torch.zeros_like(bucket.positions)
        start = (engine.kv.buf.clone(), engine.kv.length.clone())

    def state():
        return engine.kv.buf.clone(), engine.kv.length.clone()

    def restore():
        engine.kv.buf.copy_(start[0])
        engine.kv.length.copy_(start[1])

    with torch.inference_mode():
        restore()
        want = region(bucket.ids, positions), state()
        restore()
        got = torch.compile(region, backend="aot_eager", fullgraph=True)(bucket.ids, positions), state()
    torch.testing.assert_close(got[0], want[0])
    for a, b in zip(got[1], want[1], strict=True):
        torch.testing.assert_close(a, b)


def test_ar_runs_its_whole_step_as_one_graph(tiny):
    """AR's step in graph mode is one graph as Token Recycling's is (forward, argmax, commit; one read): no bucket
    graph serves it and it decodes as the eager engine (its step body's trace: tests/test_graph_regions.py)."""
    from bench.core.engine import Engine

    engine, ar = graph_engine(tiny), make("ar", tiny)
    assert engine.whole(ar)
    want = decode(make("ar", tiny), Engine(tiny, [NO_EOS], 512), PROMPTS[0], 10).output_ids
    got = decode(ar, engine, PROMPTS[0], 10)
    assert got.output_ids == want and not engine.buckets
    assert set(got.accept_lengths[1:]) == {1}  # one token a step: the bonus


def test_buckets():
    assert [bucket_width(n) for n in (1, 2, 3, 5, 9, 65)] == [1, 2, 4, 8, 16, 128]
    assert bucket_width(81, widest=81) == 81 and bucket_width(5, widest=81) == 8  # a static tree, a smaller draft
    assert [bucket_width(n, widest=11) for n in (2, 8, 9, 11, 12)] == [2, 8, 11, 11, 16]  # PLD; past it: a power
    assert bucket_width(65, widest=65) == 65 and bucket_width(1, widest=1) == 1


def test_refused_in_the_engine(tiny):
    with pytest.raises(GraphModeRefused, match="greedily only"):
        GraphEngine(tiny, [NO_EOS], 512, 256, temperature=0.6)
    engine = graph_engine(tiny, capacity=64)
    ar = make("ar", tiny)
    with pytest.raises(GraphModeRefused, match="one sequence at a time"):
        ar.generate_batch(engine, PROMPTS, 4, PhaseTimer(sync=False), [torch.Generator()] * 2)
    with pytest.raises(GraphModeRefused, match="holds 64 positions"):
        decode(ar, engine, PROMPTS[0], 40)


def test_ar_three_ways_goes_on_without_a_failed_hf_compile(tiny, monkeypatch):
    """On a node whose first torch.compile fails, HF's static-cache generate is recorded as failed and the eager
    and graph AR figures still come back (tiny, fp32: graph AR's tokens are eager AR's)."""
    from bench.check import graph_check, hf_static

    def no_compiler(*args, **kwargs):
        raise RuntimeError("InductorError: Python.h: No such file or directory")

    monkeypatch.setattr(hf_static.StaticCacheGenerate, "generate", no_compiler)
    ar = graph_check.ar_three_ways(bundle_of(tiny), PROMPTS, 6, 1)
    assert ar["hf_static"].startswith("failed: RuntimeError: InductorError") and "hf_static_tok_s" not in ar
    assert ar["graph_identical"] == 2 and ar["eager_tok_s"] > 0 and ar["graph_tok_s"] > 0
    assert "HF static cache - tok/s" in graph_check.table_lines({"ar": {"tiny": ar}})[0]
    # graph AR's static cache is sized to these prompts and tokens, as HF sizes its own: 15 + 6 + 128 -> 192
    assert ar["capacities"] == {"graph": 192} == {"graph": graph_check.run_capacity(PROMPTS, 6)}


def test_hf_static_generate_keeps_one_cache_across_calls(tiny, monkeypatch):
    """transformers' static-cache generate, graph AR's peer: one StaticCache made once and reset before each call, so
    a compiled forward's CUDA graphs find the same tensors at every call; its tokens are eager AR's (tiny, fp32)."""
    from bench.check.hf_static import StaticCacheGenerate
    from bench.core.engine import Engine

    bundle = SimpleNamespace(**vars(bundle_of(tiny)), pad_token_id=NO_EOS)
    eager = Engine(tiny, [NO_EOS], 512)
    hf = StaticCacheGenerate(bundle, compiled=False, capacity=64)
    given, generate = [], tiny.generate

    def spy(**kwargs):
        given.append(next(v for k, v in kwargs.items() if k in ("cache", "past_key_values")))
        return generate(**kwargs)

    outputs, addresses = [], set()
    with monkeypatch.context() as patch:
        patch.setattr(tiny, "generate", spy)
        for prompt in PROMPTS * 2:
            outputs.append(decode(hf, eager, prompt, 6).output_ids)
            addresses |= {(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in hf.cache.layers}
    assert len(given) == 4 and all(c is hf.cache for c in given)  # its one cache, given to generate at every call
    assert len(addresses) == len(hf.cache.layers) and outputs[:2] == outputs[2:]
    assert outputs[:2] == [decode(make("ar", tiny), eager, p, 6).output_ids for p in PROMPTS]
    assert hf.describe() == {"generate_kwargs": {"cache": "StaticCache(64)", "disable_compile": True}}


def test_the_curve_is_timed_at_the_capacity_it_needs_and_over_the_wide_one(tiny):
    """T(n) after `context` cached tokens on a static cache sized to it (run eagerly and as a graph; off CUDA both
    eagerly), and over WIDE_CAPACITY columns beside it: what attending over unused columns costs."""
    from bench.check import graph_check

    rows = graph_check.forward_curve(bundle_of(tiny), "tiny", widths=(1, 4), context=100, reps=1)
    assert [r["n"] for r in rows] == [1, 4] and all(r["graph_wide_ms"] > 0 for r in rows)
    # 100 + 4 + 128 -> 256 (a multiple of 64); the wide one clamped to the model's 512 positions here
    assert rows[0]["capacities"] == {"static_eager": 256, "graph": 256, "graph_wide": 512}
    lines = graph_check.table_lines({"context": 100, "t_n": rows})
    assert "static eager / graph / graph over 512 columns" in lines[0] and lines[-2].startswith("static caches:")
