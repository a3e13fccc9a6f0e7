"""The step model (bench/cost/host.py): a step's rest priced for a GPU's host, its fit on AR, and its validation
against the GPU leases recomputed from the committed evidence (bench/cost/gpu_validation.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.cost.host import HostCost, StepCosts, fit_host, priced_rest_s, step_costs
from bench.cost.profiles import Hardware, Profile, hardware_of
from bench.cost.replay import Setting, priced, replay_s

COSTS = StepCosts("here", {"1": 100, "n": 110}, {
    "tr": {"multi_token_share": 1.0, "phases": {
        "draft": {"python_share": 0.5, "ops": 20}, "update": {"python_share": 0.25, "ops": 40},
        "target_forward": {"python_share": 0.1, "ops": 130}}},
    "pld": {"multi_token_share": 0.5, "phases": {"target_forward": {"python_share": 0.1, "ops": 125}}},
    "hf": {"phases": {"generate": {"python_share": 0.2, "ops": 150}}}})
HOST = HostCost(launch_us=20.0, host_factor=2.0, source="test")


def test_a_phase_costs_its_python_times_the_factor_and_its_ops_times_the_launch():
    phases = {"prefill": 1.0, "target_forward": 5.0, "draft": 0.2, "update": 0.4}
    # 10 steps; 0.1 s untimed (all Python); draft 0.2 x 0.5 + update 0.4 x 0.25 of Python; (20 + 40 + 20 extra
    # forward ops beyond the 4D-mask forward's 110) x 10 steps launched
    got = priced_rest_s(phases, 6.7, 10, "tr", COSTS, HOST)
    assert got == pytest.approx(2.0 * (0.1 + 0.1 + 0.1) + 20e-6 * (20 + 40 + 20) * 10)


def test_a_phase_the_step_costs_lack_is_python_and_draft_forwards_replayed_elsewhere_drop_out():
    phases = {"target_forward": 1.0, "tree": 0.3, "draft_forward": 0.5}
    assert priced_rest_s(phases, 1.8, 4, "tr", COSTS, HOST) == pytest.approx(2.0 * 0.8 + 20e-6 * 20 * 4)
    assert priced_rest_s(phases, 1.8, 4, "tr", COSTS, HOST, draft_replayed=True) == pytest.approx(
        2.0 * 0.3 + 20e-6 * 20 * 4)


def test_a_chains_forward_pays_its_ops_beyond_the_profiles_forward_of_the_same_widths():
    # half its steps one token (100 ops bare), half a chain (110 bare): 125 - 105 = 20 extra a step
    assert COSTS.forward_extra_ops("pld") == pytest.approx(20)
    assert priced_rest_s({"target_forward": 1.0}, 1.0, 3, "pld", COSTS, HOST) == pytest.approx(20e-6 * 20 * 3)


def test_hf_s_loop_is_its_time_outside_the_priced_forwards_and_its_ops_beyond_a_bare_forward():
    phases = {"generate": 2.0, "prefill": 0.2, "target_forward": 1.5}  # forwards priced in (forwards_priced)
    assert priced_rest_s(phases, 2.0, 5, "hf", COSTS, HOST) == pytest.approx(2.0 * 0.2 * 0.3 + 20e-6 * 50 * 5)


def test_the_fit_recovers_a_launch_cost_and_host_factor():
    python, ops = np.array([0.1, 0.3, 0.05, 0.2]), np.array([6, 22, 0, 15])
    gpu = 1.5 * python + 0.03 * ops
    assert fit_host(python, ops, gpu) == pytest.approx((30.0, 1.5), rel=1e-6)


def test_hardware_of_a_profile_name_and_of_a_gpu_check_profile(tmp_path):
    assert hardware_of("llama-2-7b@a100-80gb:float16").name == "A100 80GB"
    assert hardware_of("llama-2-70b@a100-40gb:bfloat16+offloaded").name == "A100 40GB"
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"name": "x", "source": "gpu-check", "model": "m", "hardware": "NVIDIA H200",
                                "dtype": "bfloat16", "ns": [1], "contexts": [0], "ms": [[1.0]]}))
    assert hardware_of(str(path)).name == "H200"
    path.write_text(path.read_text().replace("NVIDIA H200", "Some TPU"))
    assert hardware_of(str(path)) is None


def test_every_gpu_entry_has_a_host_price_and_says_where_it_is_from():
    from bench.cost.profiles import HERE

    for name in sorted(p.stem for p in (HERE / "hardware").glob("*.yaml")):
        hw = Hardware.load(name)
        assert hw.launch_us and hw.host_factor is not None and hw.host_source, name


def test_a_setting_prices_the_rest_of_a_method_with_step_costs_and_keeps_the_others(monkeypatch):
    record = {"prompt_tokens": 10, "accept_lengths": [1, 3, 3], "verified_nodes": [9, 9], "wall_time": 1.0,
              "phase_times": {"prefill": 0.1, "target_forward": 0.5, "draft": 0.2, "update": 0.2}}
    monkeypatch.setattr("bench.cost.replay.step_costs_at", lambda *args: COSTS)
    setting = Setting("test", "llama-2-7b@a100-80gb")
    rule = priced("tr", setting.host, COSTS)
    forwards = replay_s(record, setting_profile(setting), rest=False)
    assert setting.replayed([record], method="tr")[0]["wall_time"] == pytest.approx(
        forwards + rule(record["phase_times"], 1.0, 2, False))
    assert setting.replayed([record], method="other")[0]["wall_time"] == pytest.approx(forwards + 0.4)
    assert setting.replayed([record])[0]["wall_time"] == pytest.approx(forwards + 0.4)


def setting_profile(setting):
    from bench.cost.profiles import load_profile

    return load_profile(setting.target)


# -- the committed validation (make validate-projection-gpu) ------------------------------------------------------


def test_the_committed_gpu_validation_is_what_the_step_model_gives():
    from bench.cost.gpu_validation import OUT, validate

    stored = json.loads(OUT.read_text())
    assert validate() == stored


def test_each_lease_is_priced_with_the_step_costs_of_the_code_it_ran(monkeypatch):
    """gpu_validation.EAGER_COSTS: the leases of 2026-11-27/28 ran the engine before a drafted chain at batch 1 got its
    own mask, and keep the step costs measured then; a lease not named takes this tree's. One lease's costs move its
    own rows only (where its AR's stay the same: the H200 borrows the H100's host price, fitted on its AR's costs)."""
    import dataclasses

    from bench.cost import gpu_validation as gv

    assert set(gv.validate()["step_costs"].values()) == {"step_costs-a482579.json"}
    mine = step_costs()
    assert gv.costs_of("a later lease", mine) is mine
    base = gv.validate()
    theirs = gv.named_costs("step_costs-a482579.json")
    heavier = dataclasses.replace(theirs, methods=json.loads(json.dumps(theirs.methods)))
    heavier.methods["pld"]["phases"]["target_forward"]["ops"] += 500  # a forward that launches 500 more a step
    monkeypatch.delitem(gv.EAGER_COSTS, "H100")
    got = gv.validate(heavier)
    assert got["step_costs"]["H100"] == "the caller's"
    pld = {g: got["gpus"][g]["rows"]["mbpp_tr"]["pld"]["step_ratio"] for g in ("H200", "H100")}
    assert pld["H100"] > base["gpus"]["H100"]["rows"]["mbpp_tr"]["pld"]["step_ratio"]
    assert pld["H200"] == base["gpus"]["H200"]["rows"]["mbpp_tr"]["pld"]["step_ratio"]


def test_the_hardware_entries_carry_the_fitted_host_prices():
    from bench.cost.gpu_validation import OUT

    stored = json.loads(OUT.read_text())["gpus"]
    for gpu, entry in (("H100", "h100-sxm"), ("H200", "h200")):
        hw, fitted = Hardware.load(entry), stored[gpu]["host"]
        assert (hw.launch_us, hw.host_factor) == (fitted["launch_us"], fitted["host_factor"]), gpu
    h100 = stored["H100"]["host"]
    for entry in ("a100-40gb", "a100-80gb", "a6000", "rtx3090"):  # no lease: the nearest measured GPU's
        hw = Hardware.load(entry)
        assert (hw.launch_us, hw.host_factor) == (h100["launch_us"], h100["host_factor"]) and "H100" in hw.host_source


def test_project_on_a_gpu_check_profile_prices_hf_generate_s_loop_for_its_host(tmp_path):
    """HF's own loop, which times no forward apart, as fast as AR here: on the H200's profile its forwards cost what
    AR's do and its loop what its launches and Python cost there, not this CPU's forward (which made it 0.30x)."""
    from pathlib import Path

    from bench.report.runs import project_table
    from bench.report.select import RunSet
    from bench.run.store import Run

    steps = 20
    ar = {"question_id": 1, "turn": 0, "prompt_tokens": 50, "new_tokens": steps + 1, "accept_lengths": [1] * (steps + 1),
          "verified_nodes": [0] * steps, "wall_time": 1.5,
          "phase_times": {"prefill": 0.05, "target_forward": 1.4, "update": 0.03, "verify": 0.02}}
    hf = {**ar, "phase_times": {"generate": 1.5}}
    meta = {"model": "smollm2-135m", "dataset": "d", "machine": "here", "max_new_tokens": steps + 1}
    runs = RunSet([Run.of({**meta, "run_id": "a", "method": "ar", "created": "2026-01-01T00:00:01"}, [ar]),
                   Run.of({**meta, "run_id": "h", "method": "hf_generate", "created": "2026-01-01T00:00:02"}, [hf])],
                  Path("mem"))
    profile = tmp_path / "h200.json"
    profile.write_text(json.dumps({"name": "p", "source": "gpu-check", "model": "smollm2-135m", "hardware": "NVIDIA H200",
                                   "dtype": "bfloat16", "ns": [1, 2], "contexts": [0, 1000], "ms": [[20.0, 20.5]] * 2}))
    md = project_table(runs, str(profile)).markdown
    assert "µs a launch" in md and "H100" in md  # the H200's host price, borrowed from the H100's fit
    row = [c.strip() for c in next(x for x in md.splitlines() if "| hf_generate" in x).split("|")[1:-1]]
    assert 0.9 < float(row[-1].split(" [")[0]) < 1.15  # the rule before: ~0.3 on a GPU profile


def test_the_graph_regime_check_verifies_the_tree_token_recycling_ran():
    """The graph regime's check prices Token Recycling's whole step at its tree's width: the default tree's nodes and
    its root (the lease ran `method=token_recycling` with the default tree group), as its graph-mode step costs
    recorded it; every method the lease timed in graph mode is priced, AR held out too."""
    import yaml

    from bench.cost.gpu_validation import EVIDENCE, GRAPH_COSTS, graph_regime
    from bench.paths import PROJECT

    default_tree = next(d["tree"] for d in yaml.safe_load((PROJECT / "conf" / "config.yaml").read_text())["defaults"]
                        if isinstance(d, dict) and "tree" in d)
    paths = yaml.safe_load((PROJECT / "conf" / "tree" / f"{default_tree}.yaml").read_text())["paths"]
    sitting = json.loads((EVIDENCE / "projection" / GRAPH_COSTS["H200 11-28"]).read_text())
    assert sitting["graphs"] and set(sitting["methods"]["token_recycling"]["widths"]) == {str(len(paths) + 1)}
    g = graph_regime("H200 11-28", HostCost(3.76, 1.516, "test"))
    assert set(g["methods"]) == {"ar", "token_recycling", "pld"} and g["prefill_ms"] > 0
    assert g["methods"]["token_recycling"]["measured_step_ratio"] > 1 and g["methods"]["ar"]["rest_ms"] > 0


def test_a_graph_step_is_its_replayed_forward_at_its_bucket_plus_its_priced_host_phases():
    """bench.cost.graph_projection: a whole step at its width, a bucket forward at its bucket; the
    host phases priced as the eager rule prices them, the forward phases (replays) left out; the prefill shared
    over a generation's forwards; the lease's own widths where it recorded them."""
    from bench.cost.graph_projection import project

    flat = Profile("t", "test", "tiny", "h", "bfloat16", [1, 16, 64], [512], [[1.0, 2.0, 3.0]], [50, 150], [6.0, 10.0])
    phases = {"preprocess": {"ms": 1.0, "ops": 10, "python_share": 0.5}, "step_graph": {"ms": 50, "ops": 900,
                                                                                         "python_share": 0.1}}
    sitting = {"prompt_tokens": [100, 100], "max_new_tokens": 8, "methods": {
        "ar": {"mat": 1.0, "widths": {"1": 10}, "phases": phases},
        "tr": {"mat": 2.0, "widths": {"64": 5}, "phases": phases},
        "pld": {"mat": 1.0, "widths": {"1": 1, "11": 1}, "phases": {**{k: v for k, v in phases.items() if k != "step_graph"},
                                                         "target_forward": {"ms": 9, "ops": 900, "python_share": 0.1},
                                                         "draft": {"ms": 2.0, "ops": 0, "python_share": 1.0},
                                                         "verify": {"ms": 0.5, "ops": 50, "python_share": 0.5}}}}}
    speedup = {"max_new_tokens": 8, "ar": {"tok_s": 250.0, "mat": 1.0, "speedup": 1.0},
               "tr": {"tok_s": 400.0, "mat": 2.0, "speedup": 1.6, "speedups": [1.5, 1.7], "widths": {"16": 3}},
               "pld": {"tok_s": 300.0, "mat": 1.0, "speedup": 1.2}}
    g = project(speedup, sitting, HostCost(10.0, 2.0, "test"), flat, flat)
    rest = 2.0 * 1.0 * 0.5 + 0.01 * 10  # preprocess only: the step graph is a replay
    assert g["prefill_ms"] == 8.0 and g["methods"]["ar"]["rest_ms"] == pytest.approx(rest)
    assert g["methods"]["ar"]["projected_ms"] == pytest.approx((8.0 + 7 * (1.0 + rest)) / 8, abs=1e-3)
    tr = g["methods"]["tr"]  # the lease's widths (16) over the sitting's (64): a whole step at its own width
    assert tr["forward_ms"] == 2.0 and tr["widths_from"] == "the lease's"
    assert tr["measured_step_ratio"] == pytest.approx(2.0 * 250 / 400) and tr["measured_passes"] == [1.176, 1.333]
    pld = g["methods"]["pld"]  # widths 1 and 11: T(1) and T(16), its draft's Python on top, and its verify
    # (2 x 0.25 + 0.5 = 1.0 ms, queued behind a 1.5 ms replay) costing nothing
    assert pld["forward_ms"] == 1.5 and pld["rest_ms"] == pytest.approx(rest + 2.0 * 2.0)
    sitting["methods"]["pld"]["widest"] = 11  # recorded since 2026-11-30: its 11 slots are a bucket of their own
    capped = project(speedup, sitting, HostCost(10.0, 2.0, "test"), flat, flat)["methods"]["pld"]
    assert capped["forward_ms"] == pytest.approx((1.0 + float(flat.cost(11, 512))) / 2, abs=1e-3)
    assert capped["forward_ms"] < 1.5
    del sitting["methods"]["pld"]["widest"]
    slow = project(speedup, sitting, HostCost(40.0, 2.0, "test"), flat, flat)["methods"]["pld"]
    assert slow["rest_ms"] == pytest.approx(2.0 * 0.5 + 0.04 * 10 + 2.0 * 2.0 + (2.0 * 0.25 + 0.04 * 50 - 1.5))
    assert "CPU sitting" in pld["widths_from"]
    ahead = project({}, sitting, HostCost(10.0, 2.0, "test"), flat, flat)["methods"]  # before a lease: nothing beside
    assert ahead["tr"]["forward_ms"] == 3.0 and "measured_step_ratio" not in ahead["tr"] and "error" not in ahead["ar"]


def test_a_lease_with_timed_phases_fits_on_them_and_sets_the_forward_in_the_run_beside_the_probe(monkeypatch):
    """A lease that kept its timed passes' own phases fits AR's host price on them (not the synced pass's), and
    each method's forward as the timed passes ran it is set beside the bare forward probed at its mean width."""
    from bench.cost import gpu_validation as gv

    synced = {"preprocess": 0.2, "draft": 0.03, "update": 0.9, "verify": 0.5, "target_forward": 24.0}
    timed = {k: v / 2 for k, v in synced.items()}
    lease = {"speedup": {"ar": {"ms_per_step": synced, "ms_per_step_timed": timed, "mean_width": 1.0},
                         "token_recycling": {"ms_per_step": synced, "mean_width": 61.0,
                                             "ms_per_step_timed": {**timed, "target_forward": 26.4}},
                         "pld": {"ms_per_step": synced, "mean_width": 22.0, "widths": {"1": 2, "64": 1},
                                 "ms_per_step_timed": {**timed, "target_forward": 21.0}},
                         "forward_probe": {"context": 300, "ms": {"1": 20.0, "32": 21.0, "64": 22.0}}}}
    monkeypatch.setattr(gv, "lease", lambda label: lease)
    costs = step_costs()
    ar = [r for d in gv.cpu_runs().values() for r in d["ar"]]
    host = gv.own_host("H100", costs, gv.phase_ms(ar))
    assert "timed phases" in host.source
    without = {"speedup": {"ar": {"ms_per_step": synced}}}
    monkeypatch.setattr(gv, "lease", lambda label: without)
    slower = gv.own_host("H100", costs, gv.phase_ms(ar))  # the synced phases took twice as long: a host twice as slow
    assert "synced phases" in slower.source
    assert (slower.launch_us, slower.host_factor) == pytest.approx((2 * host.launch_us, 2 * host.host_factor), rel=0.01)
    assert gv.forward_in_run("H100") == {}  # no probe, no comparison
    monkeypatch.setattr(gv, "lease", lambda label: lease)
    got = gv.forward_in_run("H100")  # T(61) on the probe: 21.9 ms; AR's forward at T(1) but timed 12 ms
    assert got["token_recycling"] == {"width": 61.0, "in_run_ms": 26.4, "alone_ms": 21.906, "ratio": 1.205,
                                      "over_ar": round(1.205 / 0.6, 3)}
    assert got["ar"]["ratio"] == pytest.approx(12.0 / 20.0, abs=1e-3)
    # mixed widths: T averaged over the steps (2 x T(1) + T(64)) / 3 = 20.667 ms, not T(22) = 20.677
    assert got["pld"]["alone_ms"] == pytest.approx(62 / 3, abs=1e-3)


def test_a_lease_of_the_graph_parts_alone_is_validated_in_graph_mode_only(monkeypatch):
    """A lease that ran gpu-check's graph part but no eager speedup part and no eager T(n) (what a short lease's
    compiled and graph calls leave) has no eager rows to check: it is priced with its nearest GPU's host and checked
    in graph mode, and the lease-pass projection leaves it out, where both used to fail on its missing AR."""
    from bench.cost import gpu_validation as gv
    from bench.cost import pass_projection

    real = gv.lease
    graphs_only = {k: v for k, v in real("H200 11-28").items() if k != "speedup"}
    monkeypatch.setattr(gv, "lease", lambda label: graphs_only if label == "graphs only" else real(label))
    monkeypatch.setitem(gv.GPUS, "graphs only", (gv.GPUS["H200 11-28"][0], "h200", "H200"))
    monkeypatch.setitem(gv.GRAPH_COSTS, "graphs only", gv.GRAPH_COSTS["H200 11-28"])
    assert not gv.timed_eagerly("graphs only") and gv.timed_eagerly("H200 11-28")
    out = gv.validate()
    entry = out["gpus"]["graphs only"]
    assert entry["rows"] == {} and "graph mode only" in entry["note"]
    assert "the H100's" in entry["host"]["source"]  # its nearest, the H200, has no host price: the H200's nearest's
    assert out["graph_regime"]["graphs only"]["methods"].keys() == out["graph_regime"]["H200 11-28"]["methods"].keys()
    assert "graphs only" not in pass_projection.project()["gpus"]
    # named nearest the last H200 lease (a host price of its own, no eager T(n)): the eager prefill's curve is
    # looked up along the chain of nearest GPUs, as the host price is, where it used to be a missing file
    monkeypatch.setitem(gv.GPUS, "graphs only", (gv.GPUS["H200 11-28"][0], "h200", "H200 11-28"))
    assert gv.eager_profile("graphs only")[0] == "H200"
    host = gv.HostCost(**entry["host"])
    assert gv.graph_regime("graphs only", host)["methods"].keys() == out["graph_regime"]["graphs only"]["methods"].keys()
    monkeypatch.setitem(gv.GPUS, "H200 11-28", (gv.GPUS["H200 11-28"][0], "h200", "graphs only"))  # a loop
    with pytest.raises(ValueError, match="no GPU near graphs only has an eager T"):
        gv.eager_profile("graphs only")


def test_a_batch_run_is_priced_with_the_step_costs_of_its_batch_size_where_they_hold_its_method(tmp_path, monkeypatch):
    """step_costs_at, greedy: the costs measured at the run's B where they hold the method (for a run recorded before
    batched drafting, those measured then at B > 1, and every method's batch-1 ones at B = 1); else batch 1's (the
    page says so); sampled runs keep the T = 0.6 costs."""
    from bench.cost import host

    def write(name: str, methods: list[str], batch: int = 1):
        (tmp_path / name).write_text(json.dumps({"machine": name, "batch_size": batch, "bare_forward_ops": {},
                                                 "methods": {m: {"phases": {}} for m in methods}}))
        return tmp_path / name

    monkeypatch.setattr(host, "STEP_COSTS", write("greedy.json", ["ar", "propd", "tr"]))
    monkeypatch.setattr(host, "SAMPLED_COSTS", write("sampled.json", ["ar"]))
    monkeypatch.setattr(host, "BATCH_COSTS", str(tmp_path / "b{}.json"))
    monkeypatch.setattr(host, "ROW_BY_ROW_COSTS", str(tmp_path / "rows-b{}.json"))
    write("b4.json", ["ar", "propd"], batch=4)
    write("b1.json", ["ar", "propd"])
    write("rows-b4.json", ["ar", "propd"], batch=4)
    got = {args: host.step_costs_at(*args) for args in ((0, "propd", 4), (0, "tr", 4), (0, "propd", 8),
                                                        (0.6, "ar", 4), (0, "propd", 1), (0, "tr", 1),
                                                        (0, "propd", 4, True), (0, "tr", 4, True),
                                                        (0, "propd", 1, True), (0.6, "propd", 1))}
    assert {args: c.machine for args, c in got.items()} == {
        (0, "propd", 4): "b4.json", (0, "tr", 4): "greedy.json", (0, "propd", 8): "greedy.json",
        (0.6, "ar", 4): "sampled.json", (0, "propd", 1): "b1.json", (0, "tr", 1): "greedy.json",
        (0, "propd", 4, True): "rows-b4.json", (0, "tr", 4, True): "greedy.json",
        (0, "propd", 1, True): "greedy.json", (0.6, "propd", 1): "greedy.json"}
    assert got[0, "propd", 4].batch_size == 4 and got[0, "tr", 4].batch_size == 1


def test_a_run_is_replayed_with_the_step_costs_of_its_temperature_and_batch_size(monkeypatch):
    """Setting.run_replayed, which both the page's projected tables and its summary's projected verdicts use: the
    rest of a run at batch 4 and T = 0.6 is priced with the step costs step_costs_at gives for (0.6, method, 4)."""
    from types import SimpleNamespace

    asked = []
    monkeypatch.setattr("bench.cost.replay.step_costs_at", lambda *args: asked.append(args) or COSTS)
    record = {"prompt_tokens": 10, "accept_lengths": [1, 3, 3], "verified_nodes": [9, 9], "wall_time": 1.0,
              "phase_times": {"prefill": 0.1, "target_forward": 0.5, "draft": 0.2, "update": 0.2}}
    run = SimpleNamespace(records=[record], method="tr", temperature=0.6, batch_size=4, before_batched_drafting=True)
    setting = Setting("test", "llama-2-7b@a100-80gb")
    assert setting.run_replayed(run) == setting.replayed([record], method="tr", temperature=0.6, batch_size=4,
                                                         before_batched_drafting=True)
    assert asked == [(0.6, "tr", 4, True)] * 2
