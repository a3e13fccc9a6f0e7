"""`make gpu-check` (bench.check.gpu_check) at its CPU sizes, and the random-init shapes it times (bench.models.random_init).

The check itself runs once (~25 s here: a tiny random model with the embedded tokenizer, every registered method at
batch 1 and 4, T = 0 and 0.6): its folder is written, its table printed, every method has its four rows, nothing
crashed, and in fp32 every T = 0 output is identical to greedy AR. The shapes are checked on the meta device (no
memory): their parameter counts are the papers' Llama-2 7B and 13B targets' and the embedded model's."""

from __future__ import annotations

import json

import pytest
import torch

from bench.check import gpu_check
from bench.core.timing import PHASES
from bench.cost.profiles import Profile
from bench.errors import HarnessError
from bench.models import random_init
from bench.page.evidence import copy_checks
from bench.paths import PROJECT
from methods import REGISTRY


@pytest.mark.parametrize("shape,params", [("llama-7b", 6_738_415_616), ("llama-13b", 13_015_864_320),
                                          ("smollm2-135m", 134_515_008)])
def test_shapes_have_the_papers_sizes(shape, params):
    model = random_init.build(shape, torch.bfloat16, "meta")
    assert sum(p.numel() for p in model.parameters()) == params
    assert model.dtype == torch.bfloat16 and model.device.type == "meta"


def test_unknown_shape_and_a_device_map_are_one_line_errors():
    with pytest.raises(HarnessError, match="unknown model.random_init shape 'llama-9b'"):
        random_init.build("llama-9b", torch.float32, "meta")
    with pytest.raises(HarnessError, match="device_map"):
        random_init.build("tiny", torch.float32, "meta", device_map="auto")


def test_random_weights_are_seeded_and_named_apart():
    a, b = (random_init.build("tiny", torch.float32, "cpu") for _ in range(2))
    assert torch.equal(a.model.layers[0].mlp.up_proj.weight, b.model.layers[0].mlp.up_proj.weight)
    cfg = gpu_check.compose_config(["model.random_init=tiny"]).model
    assert random_init.label(cfg) == "smollm2-135m+random-tiny"  # its own AR references and T(n) curves


@pytest.mark.model
@pytest.mark.slow  # the tool end to end on a CPU; its shapes, seeds and evidence copy stay in make test
def test_small_check_writes_its_folder_and_table(tmp_path, capsys):
    out = tmp_path / "check"
    partial = tmp_path / "partial.json"  # rewritten after each part: what a lease that ends early leaves
    assert gpu_check.main(["--small", "--device", "cpu", "--out", str(out), "--partial", str(partial)]) == 0
    printed = capsys.readouterr().out
    assert json.loads(partial.read_text()) == json.loads((out / "results.json").read_text())
    assert {f.name for f in out.iterdir()} == {"results.json", "forward_cost.csv", "methods.csv", "graph_methods.csv",
                                                "table.md", "profiles"}
    assert printed.startswith((out / "table.md").read_text()) and f"results: {out}" in printed
    results = json.loads((out / "results.json").read_text())
    assert {"torch", "transformers", "accelerate", "cuda"} <= set(results["environment"])
    assert {(r["dtype"], r["context"], r["n"]) for r in results["forward_cost"]} == {
        (d, c, n) for d in ("float16", "bfloat16") for c in (32, 8) for n in (1, 2, 4)} | {
        (d, "prefill", n) for d in ("float16", "bfloat16") for n in (4, 16)}
    profile = Profile.read(out / "profiles" / "tiny-bfloat16.json")  # a cost profile of this node (bench.cost)
    assert (profile.source, profile.ns, profile.contexts) == ("gpu-check", [1, 2, 4], [8, 32])
    assert profile.prefill_ns == [4, 16] and len(profile.prefill_ms) == 2  # its prefills, one token scored
    rows = {(r["method"], r["batch"], r["temperature"]): r for r in results["methods"]}
    assert set(rows) == {(m, b, t) for m in REGISTRY for b in (1, 4) for t in (0.0, 0.6)}
    for name in REGISTRY:
        assert f"| {name} |" in printed
    assert not [k for k, r in rows.items() if r["status"].startswith("crash")]
    ran = [r for r in rows.values() if r["status"] == "ok"]
    assert len(ran) > 60 and all(r["host_waits_per_step"] > 0 for r in ran)
    # fp32 on a CPU: every greedy output is AR's, token for token (a mismatch here is a bug, not rounding)
    assert {g for r in ran if r["temperature"] == 0 for g in r["grades"]} == {"identical"}
    assert results["ar_vs_hf"]["identical"] == results["ar_vs_hf"]["prompts"]
    assert results["ar_vs_hf_shapes"]["tiny"]["prompts"] == 2  # the random shapes' AR vs HF (7B on a GPU)
    assert "AR vs HF generate, random tiny bf16" in printed
    assert [a["method"] for a in results["attention"]] == ["ar", "token_recycling"]
    for name in ("ar", "token_recycling", "pld"):  # taking turns, then one synced pass for the phases of a step
        ms = results["speedup"][name]["ms_per_step"]
        assert set(PHASES) - {"prefill"} <= set(ms) and "prefill" not in ms and ms["target_forward"] > 0
    assert "| ms per step, synced | preprocess |" in printed
    # the timed passes' own (unsynced) phases, and the bare forward probed beside them at their mean context
    assert results["speedup"]["token_recycling"]["ms_per_step_timed"]["target_forward"] > 0
    assert results["speedup"]["ar"]["mean_width"] == 1.0 < results["speedup"]["token_recycling"]["mean_width"]
    probe = results["speedup"]["forward_probe"]
    assert probe["context"] > 0 and {"1", "81"} <= set(map(str, probe["ms"])) and "T(n) ms beside the timed" in printed
    assert "its forward in its loop, ms a step" in printed and "token_recycling " in printed
    assert "| host ms inside aten ops per step (profiler) |" in printed  # on a CPU too: its ops run on the host
    assert "- token_recycling update: aten::topk" in printed  # the top-k of every slot's logits, its update's most
    low, high = results["speedup"]["token_recycling"]["speedup_interval"]  # over 3 prompts x 2 passes
    assert low <= results["speedup"]["token_recycling"]["speedup"] <= high and "| speedup [95%] (per pass) |" in printed
    graphs = results["graphs"]  # the engine's graph mode beside the eager one (on a CPU: no capture, same code)
    assert {(r["model"], r["n"]) for r in graphs["t_n"]} == {("tiny", n) for n in (1, 2, 4)}
    assert all(r["static_eager_ms"] > 0 and r["graph_ms"] > 0 for r in graphs["t_n"])
    for ar in graphs["ar"].values():  # fp32: graph AR and HF's static-cache generate are eager AR's tokens
        assert ar["graph_identical"] == ar["hf_static_identical"] == ar["prompts"] == 2
        assert ar["hf_static"] == "not CUDA: timed uncompiled"
    assert {g for name in ("token_recycling", "pld", "medusa", "token_recycling_auto")
            for g in graphs["speedup"][name]["grades"]} == {"identical"}
    assert graphs["tree_auto"]["size"] >= 1 and "token_recycling_auto: tree=auto on the graph T(n)" in printed
    assert len(graphs["tree_auto"]["paths"]) == graphs["tree_auto"]["size"]  # the tree, for pricing it later
    # one read of the outcome a step in graph mode (the rest: each prompt's transfers in)
    assert {name: w["reads_per_step"] for name, w in graphs["waits"].items()} == {
        "ar": 1.0, "token_recycling": 1.0, "medusa": 1.0}
    assert "| T(n) ms after 512 cached, static eager / graph / graph over 2048 columns |" in printed
    assert "graph mode, taking turns" in printed and all(r["graph_wide_ms"] > 0 for r in graphs["t_n"])
    # each static cache sized to what it serves (512 + 4 + 128 -> 704 for T(n)), the wide one 2048
    assert graphs["t_n"][0]["capacities"] == {"static_eager": 704, "graph": 704, "graph_wide": 2048}
    assert graphs["speedup"]["capacity"] < 704 and all(ar["capacities"]["graph"] < 704 for ar in graphs["ar"].values())
    compiled = results["compiled"]  # graph mode's forward through torch.compile (aot_eager off CUDA) beside it
    assert compiled["compile"] == {"backend": "aot_eager"} and not compiled["errors"]
    assert all(r["graph_compiled_ms"] > 0 for r in compiled["t_n"]) and compiled["ar"]["graph_compiled_identical"] == 2
    assert "| T(n) ms after 512 cached, graph / graph compiled (backend=aot_eager) |" in printed
    # first AR on the hf_shapes (the 7B on a GPU), graph against graph compiled, HF left out, one width (one graph);
    # then the methods' model from a clean slate: T(1) and AR (one graph more), the other widths (one more, dynamic)
    assert list(compiled["dynamo"]) == ["tiny", "t_1", "ar", "t_n"] and [r["n"] for r in compiled["t_n"]] == [1, 2, 4]
    assert [c["graphs"] for c in compiled["dynamo"].values()] == [1, 2, 2, 3]
    (recompile,) = compiled["dynamo"]["t_n"]["recompiles"]  # the width's, in our forward
    assert recompile.startswith("forward_eager: ") and "size mismatch at index 1" in recompile
    assert not compiled["dynamo"]["t_n"]["graph_breaks"]
    assert compiled["ar_shapes"]["tiny"]["graph_compiled_identical"] == 2 and "hf_static_tok_s" not in compiled[
        "ar_shapes"]["tiny"] and "AR on tiny: graph " in printed
    graph_profile = Profile.read(out / "profiles" / "tiny-float32-graphs.json")  # the graph regime's cost profile
    assert (graph_profile.ns, graph_profile.contexts) == ([1, 2, 4], [512])


@pytest.mark.model
@pytest.mark.slow
def test_graph_part_gets_the_untrained_parts_of_the_speedup_methods(tmp_path):
    """Speedup methods past the defaults reach the graph part with the untrained parts the speedup part gives them
    (REST's HumanEval store: its default store is not built on a lease), and only those methods run."""
    out = tmp_path / "check"
    assert gpu_check.main(["--small", "--device", "cpu", "--out", str(out), "--only", "graphs",
                           "--speedup-methods", "ar,rest,lookahead"]) == 0
    graphs = json.loads((out / "results.json").read_text())["graphs"]
    assert not graphs["errors"]
    assert {g for name in ("rest", "lookahead") for g in graphs["speedup"][name]["grades"]} == {"identical"}
    assert not {"pld", "token_recycling", "token_recycling_auto"} & set(graphs["speedup"])


def test_evidence_copies_every_check_folder(tmp_path):
    stamp = tmp_path / "results" / "gpu_check" / "node_H100-20261201-120000"
    stamp.mkdir(parents=True)
    (stamp / "results.json").write_text('{"a": 1}')
    (stamp / "methods.csv").write_bytes(b"method\r\nar\r\n")  # the csv module's rows end in CRLF
    (stamp / "scratch.npy").write_bytes(b"\0")
    (stamp / "profiles").mkdir()
    (stamp / "profiles" / "llama-7b-bfloat16.json").write_text("{}")
    copied = copy_checks(tmp_path / "results", tmp_path / "evidence")
    assert sorted(p.relative_to(tmp_path / "evidence" / "gpu_check").as_posix() for p in copied) == [
        "node_H100-20261201-120000/methods.csv", "node_H100-20261201-120000/profiles/llama-7b-bfloat16.json",
        "node_H100-20261201-120000/results.json"]
    assert (tmp_path / "evidence" / "gpu_check" / "node_H100-20261201-120000" / "methods.csv").read_bytes() == \
        b"method\r\nar\r\n"  # copied as written (a rebuilt evidence folder left them LF)


def test_a_batch_rows_steps_are_counted_once_per_batch():
    """Host waits per step divide by decode steps: a batch of rows shares its steps (its longest row's), and a
    record of two batches has both batches' steps (the first lease halved batch 4's count of steps)."""
    from types import SimpleNamespace

    from bench.check.method_check import summarise
    from bench.core.syncs import HostSyncCounter

    gens = [SimpleNamespace(accept_lengths=[1] * n, output_ids=[0] * n) for n in (3, 5, 4, 2)]
    assert summarise(gens, HostSyncCounter(), 2)["steps"] == 5 + 4
    assert summarise(gens, HostSyncCounter(), 1)["steps"] == 3 + 5 + 4 + 2


def test_the_committed_h200_curve_plots_beside_the_cpu_one(tmp_path, capsys):
    """docs/gpu_leases.md's figure from the committed evidence: every GPU line starts at 1; bad input is one line."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("plot_gpu_curve", PROJECT / "scripts" / "plot_gpu_curve.py")
    plot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot)
    check = PROJECT / "evidence" / "gpu_check" / "vm_NVIDIA_H200-20261127-112000"
    cpu = next((PROJECT / "evidence" / "cache" / "forward_cost").glob("smollm2-135m-float32-cpu-*.json"))
    lines = plot.curves(check, cpu)
    assert len(lines) == 7 and all(r[0] == 1.0 for _, r in lines.values())
    assert max(max(r) for label, (_, r) in lines.items() if "H200" in label) < 1.5  # launch-bound: flat
    assert plot.main([str(check), str(cpu), str(tmp_path / "t.png")]) == 0 and (tmp_path / "t.png").stat().st_size
    assert plot.main([str(tmp_path / "none"), str(cpu), str(tmp_path / "u.png")]) == 1
    assert capsys.readouterr().err.startswith("error: cannot read the curves")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_every_method_runs_in_half_precision_on_a_cpu(tmp_path, dtype):
    """What a GPU runs in bf16, rehearsed on a CPU: no method crashes, and each greedy output is AR's or departs
    from it at a near-tie (a bf16 rounding the grader measures), never at a mismatch."""
    out = tmp_path / "check"
    assert gpu_check.main(["--small", "--device", "cpu", "--method-dtype", dtype, "--only", "methods",
                           "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["sizes"]["method_dtype"] == dtype
    rows = results["methods"]
    assert {r["method"] for r in rows} == set(REGISTRY) and not [r for r in rows if r["status"].startswith("crash")]
    assert {g for r in rows if r["temperature"] == 0 and r["status"] == "ok" for g in r["grades"]} <= {
        "identical", "near-tie"}


def test_a_failed_profile_costs_only_its_own_tables(monkeypatch):
    from bench.check import speedup_check

    def no_cupti(*args):
        raise RuntimeError("no CUPTI")

    monkeypatch.setattr(speedup_check, "step_profile", no_cupti)
    failed = speedup_check.profiled(None, None, [], 4)
    assert failed == {"error": "RuntimeError: no CUPTI"}
    row = {"tok_s": 9.0, "mat": 1.0, "speedups": [1.0], "speedup": 1.0, "grades": ["identical"],
           "ms_per_step": {"draft": 0.1}, "ops_per_step": {"draft": 2}, "profile": failed}
    from bench.check.check_table import table

    text = table({"environment": {"cpu": "x", "torch": "2", "cuda": None, "transformers": "5",
                                            "accelerate": "1"},
                            "speedup": {"prompts": 1, "max_new_tokens": 4, "reps": 1, "baseline": "ar", "ar": row}})
    assert "| ms per step, synced | draft | all |" in text and "| ar | 0.10 | 0.10 |" in text
    assert "profile of ar failed: RuntimeError: no CUPTI" in text and "(profiler)" not in text


def test_a_lease_s_calls_merge_into_one_folder_and_a_part_in_two_is_an_error(tmp_path, capsys):
    """`--merge`: each call's results (partial or final) as one folder, which call ran what in
    environment.calls; a part run twice, or files from two machines, is a one-line error and writes nothing."""
    env = {"gpu": "H200", "gpu_memory_gib": 139, "torch": "2.11", "cuda": "13.0", "transformers": "5.17",
           "accelerate": "1.15", "machine": "vm/NVIDIA H200", "git_sha": "abc", "git_dirty": False}
    row = {"tok_s": 9.0, "mat": 1.0, "speedups": [1.0], "speedup": 1.0, "grades": ["identical"]}
    speedup = {"prompts": 1, "max_new_tokens": 4, "reps": 1, "baseline": "ar", "ar": row}
    first = {"sizes": {"method_dtype": "bfloat16"}, "environment": env, "seconds": {"speedup": 3.0},
             "speedup": speedup}
    second = {"sizes": {"method_dtype": "bfloat16"}, "environment": {**env, "git_sha": "def"},
              "seconds": {"attention": 2.0}, "attention": [{"method": "ar", "identical": 1, "prompts": 1,
                                                            "eager_ms_per_step": 20.0, "sdpa_ms_per_step": 19.0}]}
    files = []
    for i, data in enumerate((first, second, {**second, "environment": {**env, "machine": "vm/other"}})):
        files.append(tmp_path / f"call{i}.json")
        files[-1].write_text(json.dumps(data))
    out = tmp_path / "lease"
    assert gpu_check.main(["--merge", str(files[0]), str(files[1]), "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["speedup"] == speedup and results["attention"] == second["attention"]
    assert results["seconds"] == {"speedup": 3.0, "attention": 2.0}
    assert [(c["file"], c["parts"], c["git_sha"]) for c in results["environment"]["calls"]] == [
        ("call0.json", ["speedup"], "abc"), ("call1.json", ["attention"], "def")]
    assert "| ar | 9.0 |" in (out / "table.md").read_text() and f"results: {out}" in capsys.readouterr().out
    for bad, why in (([files[0], files[0]], "already in an earlier file"), ([files[1], files[2]], "machine"),
                     ([tmp_path / "none.json"], "not a results file")):
        assert gpu_check.main(["--merge", *map(str, bad), "--out", str(tmp_path / "no")]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: --merge") and why in err and err.count("\n") == 1
    assert not (tmp_path / "no").exists()


def test_the_methods_part_runs_them_in_the_order_named(monkeypatch):
    """A lease's cap cuts the last method: `--methods` names them in the order they run, not the registry's."""
    from types import SimpleNamespace

    from bench.check import method_check

    names = ("ar", "bpd", "pld", "token_recycling")
    monkeypatch.setattr(method_check, "method_configs", lambda shared, small: {
        n: SimpleNamespace(run=SimpleNamespace(), method=SimpleNamespace(name=n)) for n in names})

    def refused(cfg):
        raise HarnessError(cfg.method.name)

    monkeypatch.setattr(method_check, "check_method", refused)
    for name, stand_in in (("compose_config", lambda overrides: SimpleNamespace(method=None)),
                           ("build_method", lambda cfg, bundle: None), ("engine_for", lambda bundle, t: None),
                           ("run_rows", lambda *a: [SimpleNamespace(output_ids=[1])])):
        monkeypatch.setattr(method_check, name, stand_in)
    records = method_check.check_methods(None, [[1]], 4, [], True, batches=(1,), temperatures=(0.0,),
                                         only=["token_recycling", "ar", "pld"])
    assert [r["method"] for r in records] == ["token_recycling", "ar", "pld"]


def test_the_methods_rows_of_two_calls_merge_and_a_row_in_both_is_an_error(tmp_path, capsys):
    """The methods part over two calls of one lease (`--methods` a few at a time): its rows join, its seconds add."""
    env = {"machine": "vm/NVIDIA H200", "git_sha": "abc", "git_dirty": False}

    def rows(*names):
        return [{"method": n, "batch": 1, "temperature": 0.0, "status": "ok"} for n in names]

    files = []
    for i, names in enumerate((("ar", "token_recycling"), ("pld",), ("pld",))):
        files.append(tmp_path / f"call{i}.json")
        files[-1].write_text(json.dumps({"sizes": {}, "environment": env, "seconds": {"methods": 10.0 + i},
                                         "methods": rows(*names)}))
    from bench.check.lease_merge import merged

    joined = merged(files[:2])
    assert [r["method"] for r in joined["methods"]] == ["ar", "token_recycling", "pld"]
    assert joined["seconds"] == {"methods": 21.0}
    with pytest.raises(HarnessError, match=r"methods row\(s\) \[\('pld', 1, 0.0\)\] already in an earlier file"):
        merged(files[1:])


def test_a_failed_probe_is_a_line_of_the_table_not_its_end():
    """The speedup part keeps a forward probe that raised as its error (it costs only itself); the table says so."""
    from bench.check.check_table import table

    row = {"tok_s": 9.0, "mat": 1.0, "speedups": [1.0], "speedup": 1.0, "grades": ["identical"]}
    speedup = {"prompts": 1, "max_new_tokens": 4, "reps": 1, "baseline": "ar", "ar": row,
               "forward_probe": {"error": "RuntimeError: CUDA out of memory"}}
    env = {"gpu": "H200", "gpu_memory_gib": 139, "torch": "2.11", "cuda": "13.0", "transformers": "5.17",
           "accelerate": "1.15", "machine": "vm/NVIDIA H200", "git_sha": "abc", "git_dirty": False}
    text = table({"sizes": {"method_dtype": "bfloat16"}, "environment": env, "speedup": speedup})
    assert "T(n) beside the timed passes failed: RuntimeError: CUDA out of memory" in text and "| ar | 9.0 |" in text


def test_the_repeats_part_grades_each_way_s_later_decodes_against_its_first(tmp_path, monkeypatch):
    """`--only repeats`: two prompts decoded several times by AR and PLD taking turns on one engine, eager, graph
    mode's static code uncaptured and captured; on a CPU every way repeats. A way whose decode departs says so,
    graded, for its prompt, and the other ways and prompts stay identical (here a fake departure in the captured
    PLD's last decode of the second prompt)."""
    from collections import Counter
    from types import SimpleNamespace

    from bench.check import method_check, repeat_check

    out = tmp_path / "check"
    assert gpu_check.main(["--small", "--device", "cpu", "--only", "repeats", "--out", str(out)]) == 0
    got = json.loads((out / "results.json").read_text())["repeats"]
    assert {m: set(w) for m, w in got["ways"].items()} == {m: set(repeat_check.WAYS) for m in repeat_check.NAMES}
    assert len(got["prompt_tokens"]) == 2
    assert all(g == [["identical"] * (got["times"] - 1)] * 2 for w in got["ways"].values() for g in w.values())
    assert "repeats (prompts of" in (out / "table.md").read_text()
    calls, order = Counter(), []

    def run_rows(method, engine, rows, *args):
        key = (type(method).__name__, getattr(engine, "capture", None), tuple(rows[0]))
        calls[key] += 1
        order.append(key)
        odd = key == ("PromptLookup", True, (7, 8)) and calls[key] == 4
        return [SimpleNamespace(output_ids=[1, 2, 3] if odd else [1, 2, 4])]

    monkeypatch.setattr(method_check, "run_rows", run_rows)
    monkeypatch.setattr(method_check, "graded", lambda b, p, o, ref, where: "identical" if o == ref else "near-tie at 2")
    bundle = gpu_check.bundle_for("cpu", "float32", "tiny")
    saved = []  # after each way, what a lease's cap would keep
    ways = repeat_check.repeats(bundle, [[5, 6], [7, 8]], 3, names=("ar", "pld"), times=3,
                                progress=lambda r: saved.append({m: list(w) for m, w in r["ways"].items()}))["ways"]
    assert saved == [{"ar": list(repeat_check.WAYS[:k]), "pld": list(repeat_check.WAYS[:k])} for k in (1, 2, 3)]
    assert ways["pld"]["eager"] == ways["pld"]["static"] == ways["ar"]["captured"] == [["identical"] * 2] * 2
    assert ways["pld"]["captured"] == [["identical"] * 2, ["identical", "near-tie at 2"]]
    assert [(m, p) for m, _, p in order[:4]] == [("Autoregressive", (5, 6)), ("PromptLookup", (5, 6)),
                                                 ("Autoregressive", (7, 8)), ("PromptLookup", (7, 8))]  # taking turns
