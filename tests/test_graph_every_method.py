"""Graph mode (run.graphs=true) for every registered method: it decodes as the eager engine does, or it is refused
before the model loads, in one line that names the method and why.

tests/test_graph_mode.py checks the methods the issue names (AR, Token Recycling, PLD, Medusa, SD) in detail, on the
embedded model too. This file keeps the rest honest: each method that graph mode accepts (the draft-model methods,
EAGLE-1/2/3, REST, Lookahead, ...) runs its bucketed target forwards through the graph engine's capture path (an
EagerReplay standing in for the CUDA graph off CUDA) and must give the eager engine's tokens, at T = 0, on gpu-check's
tiny random model with the untrained parts its methods part builds (bench.check.method_check), at its small settings.
A new method is covered by registering it."""

from __future__ import annotations

import json

import pytest
import torch

from bench.check import gpu_check
from bench.check.gpu_check import bundle_for
from bench.check.method_check import (
    add_untrained_parts,
    engine_for,
    graph_engine_for,
    method_configs,
    prompts,
    run_rows,
)
from bench.core.graph_engine import GraphEngine, GraphModeRefused
from bench.errors import HarnessError
from bench.run.validate import check_method
from methods import REGISTRY, build_method

NEW = 16  # new tokens a prompt: several decode steps of every method, drafts accepted by those that copy
# What graph mode refuses, and the words its line must hold: loops of their own, and ProPD's wrapped forward.
REFUSED = {"hf_generate": "its own decode loop", "hf_assisted": "its own decode loop", "hf_pld": "its own decode loop",
           "propd": "set method.prune=false method.dynamic=false"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    bundle = bundle_for("cpu", "float32", "tiny")
    shared = add_untrained_parts(bundle, tmp_path_factory.mktemp("parts"))
    with_graphs = method_configs(shared, small=True)
    for cfg in with_graphs.values():
        cfg.run.graphs = True
    # ProPD with its pruning and its timed tree choice off: its Medusa tree then runs on the engine's forward
    propd = with_graphs["propd"].copy()
    propd.method.prune, propd.method.dynamic = False, False
    with_graphs["propd_static"] = propd
    return bundle, prompts(bundle, 2), with_graphs


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_in_one_line_before_the_model_loads(setup, name):
    cfg = setup[2][name]
    with pytest.raises(HarnessError) as err:
        check_method(cfg)
    line = str(err.value)
    assert "\n" not in line and f"'{name}'" in line and REFUSED[name] in line


@pytest.mark.parametrize("name", sorted(set(REGISTRY) - set(REFUSED)) + ["propd_static"])
def test_decodes_as_the_eager_engine(setup, name):
    bundle, rows, configs = setup
    cfg = configs[name]
    check_method(cfg)  # accepted: no refusal line
    eager = run_rows(build_method(cfg.method, bundle), engine_for(bundle, 0.0), rows, 1, NEW, 0.0)
    graph = graph_engine_for(bundle, rows, NEW, capture=True)  # its cache sized as run.graph_capacity=auto sizes it
    method = build_method(cfg.method, bundle)
    got = run_rows(method, graph, rows, 1, NEW, 0.0)
    assert [g.output_ids for g in got] == [g.output_ids for g in eager]
    assert [g.accept_lengths for g in got] == [g.accept_lengths for g in eager]  # the same steps, not just tokens
    assert all(len(g.output_ids) == NEW for g in got)
    # buckets: powers of two narrower than the widest it can draft, and that width (max_draft_tokens holds its
    # drafts), each captured at the first generation, before its prefill; a whole step's graph holds its forward
    widest = method.max_draft_tokens + 1
    buckets = {b.ids.shape[1] for b in graph.buckets.values()}
    reach = {w for w in [1, 2, 4, 8, 16, 32, 64, 128, widest] if w <= widest}
    assert buckets == (set() if graph.whole(method) else reach), (widest, buckets)
    captured = graph.captures
    assert [g.output_ids for g in run_rows(method, graph, rows, 1, NEW, 0.0)]  # (from the state the rows left)
    assert graph.captures == captured  # no prompt after the first waits for a capture


def compiled_engine(bundle, rows) -> GraphEngine:
    """run.graph_compile's engine: the bucket forward through torch.compile before the capture, with aot_eager (the
    whole-graph trace inductor lowers on a lease, run as eager ops: no C compiler, seconds)."""
    capacity = graph_engine_for(bundle, rows, NEW).kv.capacity
    return GraphEngine(bundle.model, bundle.eos_token_ids, bundle.max_context, capacity, device=bundle.device,
                       capture=True, compile_with={"backend": "aot_eager"})


def test_compiled_graph_mode_refuses_a_method_that_reads_layer_states_in_one_line(setup):
    """EAGLE-3 reads three layers' input states through forward hooks registered inside the forward, which a
    whole-graph trace cannot register (dynamo: setattr on an unsupported type): refused before its first forward."""
    bundle, rows, configs = setup
    with pytest.raises(GraphModeRefused) as err:
        run_rows(build_method(configs["eagle3"].method, bundle), compiled_engine(bundle, rows), rows, 1, NEW, 0.0)
    line = str(err.value)
    assert "\n" not in line and "run.graph_compile cannot run method 'Eagle3'" in line and "graph_compile=null" in line


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(REGISTRY) - set(REFUSED) - {"eagle3"}) + ["propd_static"])
def test_compiled_graph_mode_decodes_as_the_eager_engine(setup, name):
    """run.graph_compile for every method it accepts: whole (fullgraph: a graph break would raise), the eager
    engine's tokens and steps. Each method compiles from a clean slate, as in a process of its own."""
    bundle, rows, configs = setup
    method = build_method(configs[name].method, bundle)
    eager = run_rows(method, engine_for(bundle, 0.0), rows, 1, NEW, 0.0)
    torch.compiler.reset()
    got = run_rows(build_method(configs[name].method, bundle), compiled_engine(bundle, rows), rows, 1, NEW, 0.0)
    assert [g.output_ids for g in got] == [g.output_ids for g in eager]
    assert [g.accept_lengths for g in got] == [g.accept_lengths for g in eager]


def test_gpu_check_runs_them_as_its_graph_methods_part(tmp_path):
    """`gpu-check --only graph_methods`: the methods part's rows in graph mode (batch 1, T = 0), graded against the
    eager engine's AR, a refused method skipped with its line; its own csv and table section."""
    out = tmp_path / "check"
    assert gpu_check.main(["--small", "--device", "cpu", "--only", "graph_methods", "--methods",
                           "ar,pld,propd,hf_generate", "--max-new", "16", "--out", str(out)]) == 0
    rows = {r["method"]: r for r in json.loads((out / "results.json").read_text())["graph_methods"]}
    assert {(r["batch"], r["temperature"], r["graphs"]) for r in rows.values()} == {(1, 0.0, True)}
    assert [rows[m]["status"] for m in ("ar", "pld")] == ["ok", "ok"]
    assert rows["ar"]["grades"] == rows["pld"]["grades"] == ["identical"]
    assert rows["ar"]["decode_waits"]["within"] and rows["pld"]["mat"] > 1  # one read a step; drafts accepted
    assert "set method.prune=false" in rows["propd"]["status"] and "own decode loop" in rows["hf_generate"]["status"]
    assert (out / "graph_methods.csv").is_file() and "every method in graph mode" in (out / "table.md").read_text()


def test_the_graph_methods_part_captures_nothing_while_it_counts(setup, monkeypatch):
    """Entering a CUDA graph capture synchronizes the device: a bucket first met in the counted run would count as the
    method's host waits. The part's warm-up decodes the same rows in full from the state the counted run starts
    from, so every bucket is captured before it: here with the capture path (EagerReplay) on, and methods whose
    pool, cache or matrix carries over from prompt to prompt."""
    from bench.check import method_check
    from bench.core import graph_engine

    bundle, rows, _ = setup
    counting, captured = [False], []

    class Counter(method_check.HostSyncCounter):
        def __enter__(self):
            counting[0] = True
            return super().__enter__()

        def __exit__(self, *exc):
            counting[0] = False
            return super().__exit__(*exc)

    real_capture = graph_engine.GraphEngine._captured

    def capture(self, run, reset=lambda: None):
        captured.append(counting[0])
        return real_capture(self, run, reset)

    monkeypatch.setattr(method_check, "HostSyncCounter", Counter)
    monkeypatch.setattr(graph_engine.GraphEngine, "_captured", capture)
    real_engine = method_check.graph_engine_for
    monkeypatch.setattr(method_check, "graph_engine_for", lambda *a: real_engine(*a, capture=True))
    records = method_check.check_methods(bundle, rows, NEW, [], small=True, batches=(1,), temperatures=(0.0,),
                                         only={"ouroboros", "holistic", "token_recycling", "pld"}, graphs=True)
    assert [r["status"] for r in records] == ["ok"] * 4, records
    assert captured and not any(captured)
    assert [r["captures_in_run"] for r in records] == [0] * 4  # what a lease records of it


def test_a_capture_in_the_counted_run_is_flagged_in_the_table():
    from bench.check.check_table import cell

    row = {"status": "ok", "grades": ["identical"], "host_waits_per_step": 1.0, "captures_in_run": 0}
    assert cell(row) == "1 identical; 1 w/s"
    assert cell({**row, "captures_in_run": 2}) == "1 identical; 1 w/s; **2 captured in the run**"
