"""gpu-check's speedup part (bench.check.speedup_check): AR and the methods taking turns prompt by prompt, with
intervals, each method's fastest pass, the ops that queued copies and waits in its table, and its arguments checked
in one line. The rest of the tool: tests/test_gpu_check.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.check import gpu_check


def test_the_speedup_part_takes_turns_prompt_by_prompt_with_an_interval(monkeypatch):
    """Methods alternate on each prompt (a drifting machine slows them alike); a method's speedup is all its tokens
    over all its timed seconds against the baseline's, inside its paired bootstrap interval; one ratio per pass."""
    from types import SimpleNamespace

    from bench.check import speedup_check

    calls = []
    seconds = {"ar": 2.0, "token_recycling": 1.0}

    def one_pass(method, engine, rows, max_new):
        (prompt,) = rows
        calls.append((method, prompt[0]))
        drift = 1 + 0.1 * len(calls)  # the machine slows as it goes
        # AR's second timed pass of the second prompt decodes otherwise
        token = int((method, prompt[0]) == ("ar", 2) and calls.count(("ar", 2)) == 2)
        return [SimpleNamespace(output_ids=[token] * max_new, accept_lengths=[1] * max_new, verified_nodes=[80] * 7,
                                phase_times={"target_forward": 0.7, "update": 0.07})], seconds[method] * drift

    monkeypatch.setattr(speedup_check, "one_pass", one_pass)
    monkeypatch.setattr(speedup_check, "engine_for", lambda bundle, t: None)

    class Stateless(str):  # a method named as its config
        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    monkeypatch.setattr(speedup_check, "build_method", lambda cfg, bundle: Stateless(cfg.name))

    def synced_generation(method, engine, prompt, max_new):
        calls.append(("synced", method, prompt[0]))
        return SimpleNamespace(phase_times={"target_forward": 0.5}, accept_lengths=[1] * 3)

    monkeypatch.setattr(speedup_check, "synced_generation", synced_generation)
    monkeypatch.setattr(speedup_check, "ops_per_step", lambda *a, **k: {})
    monkeypatch.setattr(speedup_check, "graded", lambda *a, where=False: "near-tie at 3" if where else "identical")
    profiles, probes = [], []
    monkeypatch.setattr(speedup_check, "profiled", lambda method, engine, rows, n: profiles.append((method, n)) or {})
    monkeypatch.setattr(speedup_check, "forward_probe", lambda bundle, context: probes.append(context) or {"ms": {}})
    early = []  # what progress() got: the speedups, before any diagnostic
    out = speedup_check.interleaved_speedup(None, [[1], [2], [3]], [[7], [8]], ("ar", "token_recycling"), 8, 2,
                                           progress=lambda sp: early.append((len(calls), json.loads(json.dumps(sp)))))
    # after each timed pass (a lease's cap may fall in the next), after the probe, and after each diagnostic stage
    (first_pass, one), (second, two), (calls_then, sp), *staged = early
    assert first_pass == 2 * 2 + 3 * 2 and one["reps"] == 1 and len(one["token_recycling"]["speedups"]) == 1
    assert "forward_probe" not in one and [t for t, _ in one["token_recycling"]["timed"]] == [8] * 3
    assert second == calls_then and two["reps"] == 2 and "forward_probe" not in two
    assert [sorted(set(s["seconds"]) - {"timed", "probe"}) for _, s in staged] == [
        ["synced"], ["ops", "synced"], ["ops", "profile", "synced"]]
    assert calls_then == 2 * 2 + 3 * 2 * 2 and "speedup_interval" in sp["token_recycling"] and "forward_probe" in sp
    assert "ms_per_step" not in sp["ar"]
    # the untimed pass over the warm-up prompts, then the timed passes over the others
    assert calls[:4] == [("ar", 7), ("token_recycling", 7), ("ar", 8), ("token_recycling", 8)]
    # the first of each timed turn rotates: AR goes first on half of them
    assert calls[4:10] == [("ar", 1), ("token_recycling", 1), ("token_recycling", 2), ("ar", 2), ("ar", 3),
                           ("token_recycling", 3)] and len(calls) == 2 * 2 + 3 * 2 * 2 + 2 * 2
    assert calls[10:16] == [("token_recycling", 1), ("ar", 1), ("ar", 2), ("token_recycling", 2),
                            ("token_recycling", 3), ("ar", 3)] and sp["order"] == "rotated"
    del calls[:4]
    # the synced pass takes turns too, on the first DIAGNOSED_PROMPTS prompts: 2 steps of 0.5 s -> 250 ms a step
    assert calls[12:] == [("synced", "ar", 1), ("synced", "token_recycling", 1), ("synced", "ar", 2),
                          ("synced", "token_recycling", 2)]
    assert out["ar"]["ms_per_step"] == {"target_forward": 250.0}
    # a short profile thrown away first (CUPTI's start), then each method's own
    assert profiles == [("ar", 2), ("ar", 8), ("token_recycling", 8)]
    tr, timed = out["token_recycling"], calls[:12]  # the i-th timed call came after 4 + i others
    t_ar = sum(seconds["ar"] * (1 + 0.1 * (5 + i)) for i, (m, _) in enumerate(timed) if m == "ar")
    t_tr = sum(seconds["token_recycling"] * (1 + 0.1 * (5 + i)) for i, (m, _) in enumerate(timed) if m != "ar")
    assert tr["speedup"] == pytest.approx(t_ar / t_tr, abs=1e-3) and len(tr["speedups"]) == 2
    low, high = tr["speedup_interval"]
    assert low <= tr["speedup"] <= high and high - low < 0.5
    assert out["ar"]["speedup"] == 1.0
    assert out["ar"]["same_every_pass"] == [True, False, True] and tr["same_every_pass"] == [True] * 3
    # the tables say so where a prompt decoded otherwise (older results have no such key)
    # the later pass graded against the first, with where it departs (a near-tie: the device summed otherwise)
    assert out["ar"]["pass_departures"] == {"1": ["near-tie at 3"]} and tr["pass_departures"] == {}
    assert [speedup_check.alike(r) for r in (out["ar"], tr, {})] == [
        "; alike in every pass 2/3 (prompt 1: near-tie at 3)", "", ""]
    assert [t for t, _ in tr["timed"]] == [8] * 6 and set(out["seconds"]) == {"timed", "synced", "ops", "profile",
                                                                             "probe"}
    # the timed passes' own phases: 6 generations of 7 decode steps, 0.7 s of forward each; 80 nodes + the root
    assert tr["ms_per_step_timed"] == {"target_forward": 100.0, "update": 10.0} and tr["mean_width"] == 81.0
    assert tr["widths"] == {81: 6 * 7}
    # per generation: its decode steps and ms in all, in the prefill (none here) and outside every phase
    per = tr["per_generation"]
    assert per["decode_steps"] == 7 and per["prefill_ms"] == 0 and per["untimed_ms"] == pytest.approx(
        per["wall_ms"] - 770, abs=0.01) and per["wall_ms"] == pytest.approx(1000 * t_tr / 6, abs=0.01)
    assert sp["prompt_tokens"] == [1, 1, 1]
    # the bare forward probed once, after the timed passes, at the timed prompts' mean context (1 + 8 / 2)
    assert probes == [5] and out["forward_probe"] == {"ms": {}}
    # fastest passes: every prompt's first timed pass (the machine only slows), each method's own
    first = {m: sum(seconds[m] * (1 + 0.1 * (5 + i)) for i, (n, _) in enumerate(timed[:6]) if n == m) for m in seconds}
    assert tr["best_speedup"] == pytest.approx(first["ar"] / first["token_recycling"], abs=1e-3)


def test_going_first_costs_every_method_alike():
    """A turn's first run pays a toll (a cold cache, say): with the first rotating, three methods of equal cost
    measure equal over three turns; in a fixed order the first would measure slower."""
    from bench.check.speedup_check import turn_order

    methods = {"ar": 0, "a": 1, "b": 2}
    cost = dict.fromkeys(methods, 0.0)
    for turn in range(6):
        for place, (name, _) in enumerate(turn_order(methods, turn)):
            cost[name] += 1.0 + (0.5 if place == 0 else 0.0)
    assert cost == {"ar": 7.0, "a": 7.0, "b": 7.0}
    assert [n for n, _ in turn_order(methods, 4)] == ["a", "b", "ar"]


def test_the_table_names_the_ops_that_queued_copies_and_waits():
    from bench.check.check_table import table

    profile = {"host_ms": {"target_forward": 20.0}, "copy_ops": {"target_forward": {
        "scaled_dot_product_attention > fill_": 30.0}, "update": {}}, "wait_ops": {"update": {"item": 1.0}}}
    row = {"tok_s": 9.0, "mat": 1.0, "speedups": [1.0], "speedup": 1.0, "grades": ["identical"], "profile": profile}
    text = table({"environment": {"cpu": "x", "torch": "2", "cuda": None, "transformers": "5", "accelerate": "1"},
                  "speedup": {"prompts": 1, "max_new_tokens": 4, "reps": 1, "baseline": "ar", "ar": row}})
    assert "- ar target_forward: scaled_dot_product_attention > fill_ 30" in text
    assert "- ar update: item 1" in text and "- ar update: \n" not in text


def test_fastest_pass_picks_each_methods_own_fastest_pass_per_prompt():
    from bench.check.speedup_check import fastest_pass

    # 2 passes x 2 prompts, pass-major: (tokens, seconds, base tokens, base seconds)
    pairs = np.array([[8, 8, 8, 8], [1.0, 3.0, 2.0, 1.5], [8, 8, 8, 8], [4.0, 5.0, 6.0, 2.0]])
    best = fastest_pass(pairs, 2)
    assert best[1].tolist() == [1.0, 1.5] and best[3].tolist() == [4.0, 2.0]


def test_the_speedup_part_s_methods_are_registered_ones_with_ar_first(tmp_path, capsys):
    for bad in ("pld,ar", "ar,nope"):
        assert gpu_check.main(["--small", "--device", "cpu", "--only", "speedup", "--speedup-methods", bad,
                               "--out", str(tmp_path / "o")]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: --speedup-methods") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()
    assert gpu_check.main(["--small", "--device", "cpu", "--only", "speedup", "--speedup-reps", "0",
                           "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --speedup-reps 0: at least 1") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()
    assert gpu_check.main(["--small", "--device", "cpu", "--only", "methods", "--max-new", "0",
                           "--out", str(tmp_path / "o")]) == 1
    assert capsys.readouterr().err == "error: --max-new 0: at least 1\n" and not (tmp_path / "o").exists()
