"""gpu-check's compiled part (bench.check.compiled_check): its backend and shapes chosen from the command line, and
inductor rehearsed on a CPU, as a lease's first compile on CUDA will run it (the same trace and lowering)."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from bench.check import gpu_check


def test_bad_compiled_part_flags_are_one_line_errors(tmp_path, capsys):
    argv = ["--small", "--device", "cpu", "--only", "compiled", "--out", str(tmp_path / "o")]
    assert gpu_check.main([*argv, "--hf-shapes", "llama-70b"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --hf-shapes llama-70b: none, or of llama-7b") and err.count("\n") == 1
    with pytest.raises(SystemExit) as exit_:
        gpu_check.main([*argv, "--compile-backend", "triton"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "error: argument --compile-backend: invalid choice" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="inductor on a CPU needs a C compiler")
def test_inductor_compiles_the_graph_forward_once_per_width_class_on_a_cpu(tmp_path, capsys):
    """`--compile-backend inductor` on a CPU: the bucket forward compiles whole (no graph break); the random shape
    first, one width, one graph; then the methods' model from a clean slate (the same shape here, compiled again):
    T(1), which AR's whole step reuses, then the width dynamic for the other widths, one recompile; compiled AR
    decodes plain graph AR's tokens; `--hf-shapes none` times no random shape."""
    out = tmp_path / "c"
    assert gpu_check.main(["--small", "--device", "cpu", "--only", "compiled", "--compile-backend", "inductor",
                           "--out", str(out)]) == 0
    part = json.loads((out / "results.json").read_text())["compiled"]
    assert part["compile"] == {"mode": "default"} and not part["errors"]
    assert {stage: c["graphs"] for stage, c in part["dynamo"].items()} == {"tiny": 1, "t_1": 2, "ar": 2, "t_n": 3}
    recompiles = part["dynamo"]["t_n"]["recompiles"]  # the width's, in our forward
    assert not part["dynamo"]["t_n"]["graph_breaks"] and len(recompiles) == 1
    assert recompiles[0].startswith("forward_eager: ") and "size mismatch at index 1" in recompiles[0]
    assert part["ar"]["graph_compiled_identical"] == part["ar"]["prompts"] == 2
    assert "torch.compile, graphs after each stage: tiny 1, t_1 2, ar 2, t_n 3; graph breaks: none" in (
        capsys.readouterr().out)
    assert gpu_check.main(["--small", "--device", "cpu", "--only", "compiled", "--hf-shapes", "none",
                           "--out", str(tmp_path / "n")]) == 0
    assert json.loads((tmp_path / "n" / "results.json").read_text())["compiled"]["ar_shapes"] == {}


def test_a_shape_stage_profiles_one_replay_per_capturing_engine_with_no_new_compile():
    """The compiled part's 7B stage profiles one replay of each engine at AR's width after AR ran
    (replay_profile.replay_profiles): the bucket is filled and run (captured) first, engines that run eagerly are left
    out, a failure is that engine's entry only, and the compiled one-token bucket reuses what AR's whole step
    compiled. Off CUDA the capture is an eager stand-in and the profiler sees no kernels."""
    import torch

    from bench.check.compiled_check import dynamo_counts
    from bench.check.replay_profile import replay_profiles
    from bench.core.graph_engine import GraphEngine
    from bench.core.timing import PhaseTimer
    from methods import build_method
    from tests.conftest import compose_cfg, tiny_llama

    model = tiny_llama(64, attn_implementation="sdpa", max_positions=256)

    def engine(**kw):
        return GraphEngine(model, [10_000], 256, 128, device=torch.device("cpu"), capture=True, **kw)

    engines = {"graph": engine(), "graph_compiled": engine(compile_with={"backend": "aot_eager"}),
               "static_eager": GraphEngine(model, [10_000], 256, 128, device=torch.device("cpu"), capture=False)}
    torch.compiler.reset()  # a model compiled earlier in this process would make this one a recompile
    dynamo_counts(clear=True)
    ar = build_method(compose_cfg("method=ar").method, None)
    for e in engines.values():
        ar.generate(e, [1, 2, 3, 4], 6, PhaseTimer())
    compiled = dynamo_counts()["graphs"]
    engines["broken"] = engine()
    engines["broken"].bucket = None  # not callable: this engine's profile fails
    out = replay_profiles(engines, 1, context=40)
    assert set(out) == {"graph", "graph_compiled", "broken"}  # static_eager captures nothing
    assert out["graph"] == out["graph_compiled"] == {"kernels": 0, "busy_ms": 0.0, "span_ms": 0.0, "top": {},
                                                     "context": 40}
    assert out["broken"]["error"].startswith("TypeError")
    assert engines["graph"].kv.length.item() == 40 and engines["graph"].buckets[(1, False, ())].graph is not None
    assert dynamo_counts()["graphs"] == compiled and not dynamo_counts()["recompiles"]
    # a cache sized for AR's run (the 7B's) holds fewer than T(n)'s 512 cached tokens: the replay sits at its end,
    # not past it (an index past the cache: an IndexError here, a sticky device-side error on CUDA)
    assert replay_profiles({"graph": engines["graph"]}, 1, context=512)["graph"]["context"] == engines["graph"].kv.capacity - 1


def test_a_failed_compile_costs_its_own_way_only(capsys):
    """A node where the compiled forward fails on its first call (inductor without a working compiler, say): AR's
    other ways are still timed and compared, the failure is recorded in one line, and the table says so."""
    import torch

    from bench.check.compiled_check import compiled_lines
    from bench.check.gpu_check import bundle_for
    from bench.check.graph_check import ar_three_ways, graph_engine, run_capacity
    from bench.check.method_check import prompts

    bundle = bundle_for("cpu", "float32", "tiny")
    rows = prompts(bundle, 2)
    capacity = run_capacity(rows, 4)
    broken = graph_engine(bundle, capacity)

    def fails(*args, **kwargs):
        raise RuntimeError("InductorError: no working C compiler\nthe rest of its report")

    broken.target = fails
    with torch.inference_mode():
        engines = {"graph": graph_engine(bundle, capacity), "graph_compiled": broken}
        ar = ar_three_ways(bundle, rows, 4, 1, engines=engines, hf=False)
    assert ar["graph_tok_s"] > 0 and "graph_compiled_tok_s" not in ar and ar["hf_static"] == "not timed"
    assert ar["failed"] == {"graph_compiled": "RuntimeError: InductorError: no working C compiler"}
    line = compiled_lines({"compile": {"backend": "aot_eager"}, "ar_shapes": {"tiny": ar}})[0]
    assert line == (f"AR on tiny: graph {ar['graph_tok_s']}, graph compiled - tok/s (x-); identical to graph AR: -/2; "
                    "graph_compiled failed: RuntimeError: InductorError: no working C compiler")


def test_a_compile_that_fails_is_tried_once_per_model_and_the_plain_figures_kept(monkeypatch):
    """The compiled part on a node whose first compile fails: torch.compile caches no failed compile, so each call
    would compile (and fail) again, at a compile's cost each on a lease. The failing way is tried once per model
    (the random shape, then the methods' model from a clean slate) and left out of that model's later stages (the
    shape's replay profile; AR and T(n) after T(1)); plain graph mode's T(n) and AR are all kept, each stage saves
    its timed passes as they end, and the table names where the compile failed."""
    import dataclasses
    import functools

    from bench.check import compiled_check
    from bench.check.compiled_check import compiled_lines, run_compiled
    from bench.check.gpu_check import SIZES, bundle_for, free
    from bench.check.graph_check import ar_notes
    from bench.core.graph_engine import GraphEngine

    compiles = []

    def backend(gm, example_inputs):
        compiles.append(gm)
        raise RuntimeError("no working C compiler")

    sizes = dataclasses.replace(SIZES["cpu"], compile_backend=backend, timed_reps=2)
    # engines that capture (off CUDA an eager stand-in), as on a lease: the shape's replay profile runs them
    monkeypatch.setattr(compiled_check, "GraphEngine", functools.partial(GraphEngine, capture=True))
    monkeypatch.setattr(compiled_check, "graph_engine", lambda b, capacity: GraphEngine(
        b.model, b.eos_token_ids, b.max_context, capacity, device=b.device, capture=True))
    bundle = bundle_for("cpu", "float32", "tiny")
    saved = []
    part = run_compiled(sizes, bundle, progress=lambda out: saved.append(copy.deepcopy(out)), load=lambda shape, dtype: bundle_for("cpu", dtype, shape),
                        free=free)
    assert len(compiles) == 2 and not part["errors"]  # once for the random shape, once for the methods' model
    shape = part["ar_shapes"]["tiny"]
    assert shape["failed"] == {"graph_compiled": "BackendCompilerFailed: backend='backend' raised: RuntimeError: no "
                                                 "working C compiler"}
    assert set(shape["replay"]) == {"graph"}
    assert [r["n"] for r in part["t_n"]] == list(sizes.cost_sizes)
    # each width saved as it ends: a lease's cap that falls inside the curve keeps the widths done
    assert {len(s["t_n"]) for s in saved} >= set(range(1, len(sizes.cost_sizes) + 1)) and len(sizes.cost_sizes) > 2
    assert all(r["graph_ms"] > 0 and "graph_compiled_ms" not in r for r in part["t_n"])
    assert "no working C compiler" in part["t_n"][0]["failed"]["graph_compiled"]
    assert part["ar"]["graph_tok_s"] > 0 and "graph_compiled_tok_s" not in part["ar"]
    # the timed passes saved as they end: the first of two, without its grades, then the stage's whole figures
    passes = [s["ar"]["reps"] for s in saved if s.get("ar") and "grades" not in s["ar"]]
    assert passes == [1] and part["ar"]["reps"] == 2 and "grades" in part["ar"]
    # a partial cut after its first pass says so in its table line; the whole stage's does not
    cut = next(s["ar"] for s in saved if s.get("ar") and "grades" not in s["ar"])
    assert ar_notes(cut).endswith("; 1 of 2 timed passes (cut)") and "passes_planned" not in part["ar"]
    lines = compiled_lines(part)
    assert "| tiny | " + " | ".join(f"{r['graph_ms']:.2f} / -" for r in part["t_n"]) + " |" in lines
    assert sum(line.startswith("T(n) graph_compiled failed at n=1: ") for line in lines) == 1


def test_an_hf_generate_that_transformers_did_not_compile_is_labelled_so(monkeypatch):
    """`compiles` says only that a node could compile HF's static-cache generate: transformers checks criteria of its
    own and, unmet, decodes uncompiled without a word (off CUDA, here). AR three ways labels HF by what it did, so the
    AR / compiled HF goal (bench.check.goals) is never judged against an HF that did not compile."""
    from types import SimpleNamespace

    import torch

    from bench.check import graph_check
    from tests.conftest import tiny_llama

    model = tiny_llama(64, attn_implementation="sdpa", max_positions=256)
    bundle = SimpleNamespace(name="tiny", model=model, device=torch.device("cpu"), dtype=torch.float32, vocab_size=64,
                             eos_token_ids=[10_000], max_context=256, pad_token_id=10_000)
    monkeypatch.setattr(graph_check, "compiles", lambda device: (True, "compiled by transformers (static cache)"))
    rows = [[5, 6, 7, 8, 9] * 3, [3, 1, 4, 1, 5, 9, 2, 6]]
    ar = graph_check.ar_three_ways(bundle, rows, 6, 1)
    assert ar["hf_static"] == "transformers compiled nothing (its own criteria unmet): timed uncompiled"
    assert ar["hf_static_identical"] == 2  # (timed all the same)
    monkeypatch.setattr(model, "_compiled_call", model.__call__, raising=False)  # what a compile leaves on the model
    assert graph_check.ar_three_ways(bundle, rows, 6, 1)["hf_static"] == "compiled by transformers (static cache)"
