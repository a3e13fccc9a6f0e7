"""A lease's own speedup part recorded on a CPU, projected onto a GPU (bench/cost/pass_projection.py): the step
arithmetic on a made-up part, and the committed check recomputed from evidence/."""

from __future__ import annotations

import json

import pytest

from bench.cost import gpu_validation
from bench.cost import pass_projection as pp
from bench.cost.host import STEP_COSTS, HostCost, StepCosts
from bench.cost.profiles import Profile
from bench.perf import step_costs

COSTS = StepCosts("here", {"1": 100, "n": 110}, {
    "ar": {"phases": {"update": {"python_share": 0.5, "ops": 20}, "target_forward": {"python_share": 0.1, "ops": 100}}},
    "tr": {"multi_token_share": 1.0, "phases": {
        "update": {"python_share": 0.25, "ops": 40}, "target_forward": {"python_share": 0.1, "ops": 130}}}})
HOST = HostCost(launch_us=10.0, host_factor=2.0, source="test")
# T(n) = 20 ms + 0.1 ms a token past the first, at any context; a prefill 30 ms
PROFILE = Profile(name="p", model="m", hardware="h", dtype="bfloat16", source="test", ns=[1, 101], contexts=[0],
                  ms=[[20.0, 30.0]], prefill_ns=[1, 1000], prefill_ms=[30.0, 30.0])


def part(tr_widths: dict) -> dict:
    def row(mat, steps, untimed, phases, widths):
        return {"mat": mat, "widths": widths, "ms_per_step_timed": phases,
                "per_generation": {"decode_steps": steps, "wall_ms": 0.0, "prefill_ms": 5.0, "untimed_ms": untimed}}

    return {"prompt_tokens": [100, 200], "forward_probe": {"context": 300},
            "ar": row(1.0, 9, 9.0, {"target_forward": 30.0, "update": 2.0}, {"1": 9}),
            "tr": row(2.5, 3, 3.0, {"target_forward": 60.0, "update": 8.0}, tr_widths)}


def test_a_step_is_its_forward_at_its_widths_and_its_rest_priced_with_the_prefill_shared():
    sp = part({"81": 3})
    # AR: rest = 2 x (1 untimed + 2 x 0.5) + 0.01 x 20 = 4.2 ms; 9 steps of 20 + 4.2, one 30 ms prefill, 10 forwards
    assert pp.rest_ms("ar", sp["ar"], HOST, COSTS) == pytest.approx(4.2)
    assert pp.step_ms("ar", sp, PROFILE, HOST, COSTS) == pytest.approx((30 + 9 * 24.2) / 10)
    # Token Recycling: rest = 2 x (1 + 8 x 0.25) + 0.01 x (40 + 20 forward ops past the 4D mask's 110) = 6.6 ms
    assert pp.rest_ms("tr", sp["tr"], HOST, COSTS) == pytest.approx(6.6)
    assert pp.step_ms("tr", sp, PROFILE, HOST, COSTS) == pytest.approx((30 + 3 * (28.0 + 6.6)) / 4)
    # mixed widths: the forward averaged over the steps
    assert pp.forward_ms(part({"1": 2, "81": 1})["tr"], PROFILE, 300) == pytest.approx((2 * 20 + 28) / 3)


def test_the_forward_factor_makes_ar_s_projected_step_the_lease_s():
    sp = part({"81": 3})
    factor = pp.forward_factor(sp, PROFILE, HOST, COSTS, ar_tok_s=40.0)
    assert pp.step_ms("ar", sp, PROFILE, HOST, COSTS, factor) == pytest.approx(25.0)


def test_the_committed_lease_pass_validation_is_what_the_step_model_gives():
    stored = json.loads(pp.OUT.read_text())
    assert pp.validation() == stored
    # every lease that timed the eager regime (a lease of the graph and compiled parts alone is not projected here),
    # each from the sitting of its own code; ahead of the next lease, the newest sitting on every GPU
    eager = {g for g in gpu_validation.GPUS if gpu_validation.timed_eagerly(g)}
    assert set(stored["gpus"]) == set(stored["ahead"]["gpus"]) == eager >= {"H200", "H100", "H200 11-28"}
    assert all(g["sitting"] == pp.SITTINGS.get(gpu, pp.NEWEST) for gpu, g in stored["gpus"].items())
    assert {g["sitting"] for g in stored["ahead"]["gpus"].values()} == {pp.NEWEST} != set(pp.SITTINGS.values())
    assert not any("error" in r for g in stored["ahead"]["gpus"].values() for r in g["rows"].values())


def test_a_lease_added_later_is_projected_as_it_was_ahead_of_it(monkeypatch):
    """A lease not yet named in SITTINGS and EAGER_COSTS (the next one, once its folder is added to GPUS) is priced
    from the newest sitting with this tree's step costs: the projection committed ahead of it, but for the host
    price, which is then fitted on its own AR."""
    monkeypatch.setitem(gpu_validation.GPUS, "next", gpu_validation.GPUS["H200"])
    now, ahead = pp.project(), pp.project(ahead=True)
    assert now["gpus"]["next"]["sitting"] == ahead["gpus"]["H200"]["sitting"] == pp.NEWEST
    assert now["gpus"]["next"]["rows"].keys() == ahead["gpus"]["H200"]["rows"].keys()
    assert now["gpus"]["H200"]["sitting"] == pp.SITTINGS["H200"]
    # with the same host price the two are the same projection
    host = gpu_validation.HostCost(**ahead["gpus"]["H200"]["host"])
    monkeypatch.setattr(gpu_validation, "own_host", lambda *a: host)
    same = pp.project()["gpus"]["next"]["rows"]
    assert {m: r.get("step_ratio") for m, r in same.items()} == {
        m: r.get("step_ratio") for m, r in ahead["gpus"]["H200"]["rows"].items()}


@pytest.mark.slow
@pytest.mark.model
def test_the_next_lease_s_methods_launch_at_this_tree_the_ops_ahead_priced(tmp_path, capsys):
    """`ahead` projects the next lease's speedup part (docs/gpu.md, call 4) with step_costs.json, measured at an
    older commit: at this tree the part's methods must launch the ops a step the file records, phase by phase (the
    forward too), or the held-out check would price code the lease does not run. After a change that fails here,
    measure again (`make step-costs` and the sitting NEWEST, in a worktree of the new commit)."""
    committed = json.loads(STEP_COSTS.read_text())
    names = sorted(pp.methods(pp.sitting()[1]))
    assert len(names) >= 6
    out = tmp_path / "now.json"
    assert step_costs.main(["--methods", ",".join(names), "--prompts", str(committed["prompts"]),
                            "--max-new", str(committed["max_new_tokens"]), "--out", str(out)]) == 0
    now, _ = json.loads(out.read_text()), capsys.readouterr()
    assert now["bare_forward_ops"] == committed["bare_forward_ops"]
    for name in names:
        was, got = committed["methods"][name], now["methods"][name]
        assert (got["steps"], got["mat"]) == (was["steps"], was["mat"]), name
        ops = {phase: p["ops"] for phase, p in got["phases"].items()}
        assert ops == pytest.approx({phase: p["ops"] for phase, p in was["phases"].items()}, abs=0.05), name
