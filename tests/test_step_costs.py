"""bench.perf.step_costs: each method's step costs outside the target forward (the data the step model prices a
step's rest with), here in the engine's graph mode (`--graphs`), where the forward phases are replays on CUDA."""

from __future__ import annotations

import json

import pytest

from bench.perf import step_costs


@pytest.mark.model
def test_graph_mode_step_costs_keep_the_widths_and_refuse_what_graph_mode_cannot_run(tmp_path, capsys):
    out = tmp_path / "g.json"
    assert step_costs.main(["--graphs", "--methods", "ar,pld,propd", "--max-new", "8", "--out", str(out)]) == 0
    got, _ = json.loads(out.read_text()), capsys.readouterr()
    assert got["graphs"] and len(got["prompt_tokens"]) == got["prompts"] == 1
    assert "brings its own" in got["refused"]["propd"]  # ProPD's pruning changes the width inside the forward
    ar, pld = got["methods"]["ar"], got["methods"]["pld"]
    assert set(ar["widths"]) == {"1"} and "step_graph" in ar["phases"]  # AR's whole step is one graph
    assert {"target_forward", "verify", "draft"} <= set(pld["phases"]) and sum(pld["widths"].values()) == pld["steps"]
    assert step_costs.main(["--graphs", "--temperature", "0.6", "--out", str(tmp_path / "t.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --graphs decodes greedily only") and not (tmp_path / "t.json").exists()


@pytest.mark.model
def test_the_tree_a_lease_chose_is_measured_under_the_name_of_its_speedup_row(tmp_path, capsys):
    """--auto-tree: Token Recycling at the graph part's tree=auto paths, as `token_recycling_auto` (graph_check's
    name for that row, which the graph rule pairs with its step costs by name); a results file without the paths
    is refused in one line, nothing written."""
    from bench.check.graph_check import AUTO

    paths = [[0], [1], [0, 0], [0, 1], [0, 0, 0]]
    results, out = tmp_path / "results.json", tmp_path / "g.json"
    results.write_text(json.dumps({"graphs": {"tree_auto": {"size": 5, "depth": 3, "paths": paths}}}))
    args = ["--graphs", "--methods", "ar", "--max-new", "6", "--out", str(out), "--auto-tree"]
    assert step_costs.main([*args, str(results)]) == 0
    got = json.loads(out.read_text())["methods"]
    assert set(got) == {"ar", AUTO} and set(got[AUTO]["widths"]) == {str(len(paths) + 1)}  # its static tree's width
    assert "step_graph" in got[AUTO]["phases"]
    out.unlink(), capsys.readouterr()
    results.write_text(json.dumps({"graphs": {"tree_auto": {"size": 5, "depth": 3}}}))
    assert step_costs.main([*args, str(results)]) == 1 and not out.exists()
    assert capsys.readouterr().err.startswith("error: --auto-tree: ")



def test_a_setting_the_methods_lack_or_refuse_is_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(step_costs, "bundle_for", lambda *a: pytest.fail("the model loaded before --set was checked"))
    out = tmp_path / "s.json"
    for args, expect in ((["--set", "tree_size_choices"], "error: --set 'tree_size_choices': expected KEY=VALUE"),
                         (["--methods", "propd,ar", "--set", "prune_topk=10"], "error: --set prune_topk: method ar "),
                         (["--methods", "propd", "--set", "prune_topk=-1"], "error: ")):
        assert step_costs.main([*args, "--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(expect) and err.count("\n") == 1 and not out.exists(), err


@pytest.mark.model
def test_a_setting_is_measured_and_recorded(tmp_path, capsys):
    """ProPD at one tree size (the evidence of how its step costs follow the tree it verifies): the file records
    the setting, and at size 4 no verification is wider than the tree and its root."""
    out = tmp_path / "s.json"
    assert step_costs.main(["--methods", "propd", "--max-new", "8", "--set", "tree_size_choices=[4]",
                            "--set", "warmup_sizes=[4]", "--out", str(out)]) == 0
    got, _ = json.loads(out.read_text()), capsys.readouterr()
    assert got["set"] == {"tree_size_choices": [4], "warmup_sizes": [4]}
    assert max(map(int, got["methods"]["propd"]["widths"])) <= 5


def test_a_batch_size_that_cannot_be_measured_is_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(step_costs, "bundle_for", lambda *a: pytest.fail("the model loaded before the batch size was checked"))
    out = tmp_path / "b.json"
    for args, expect in ((["--batch-size", "0"], "error: --batch-size and --prompts must be at least 1"),
                         (["--graphs", "--batch-size", "2"], "error: --graphs decodes batch 1 only")):
        assert step_costs.main([*args, "--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(expect) and err.count("\n") == 1 and not out.exists(), err


@pytest.mark.model
def test_a_batch_is_measured_per_step_of_the_batch_and_a_method_that_cannot_batch_is_refused(tmp_path, capsys):
    """--batch-size 2: the two prompts decoded as one batch, so AR takes one step a token of its longest row (not
    one a row's token: a batch's phases are timed together), a batch step's launches count both rows' per-row work,
    and HF's prompt lookup, which transformers cannot batch, is refused with why."""
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    assert step_costs.main(["--methods", "ar", "--prompts", "2", "--max-new", "6", "--out", str(one)]) == 0
    assert step_costs.main(["--methods", "ar,hf_pld", "--batch-size", "2", "--max-new", "6", "--out", str(two)]) == 0
    capsys.readouterr()
    alone, batched = (json.loads(p.read_text()) for p in (one, two))
    assert batched["batch_size"] == 2 and batched["prompts"] == 2 == len(batched["prompt_tokens"])
    assert "does not decode batches" in batched["refused"]["hf_pld"]
    ar, ar1 = batched["methods"]["ar"], alone["methods"]["ar"]
    assert ar["steps"] == 5 and ar1["steps"] == 10 and ar["mat"] == 1.0 and ar["widths"] == {"1": 5}
    assert ar["phases"]["update"]["ops"] > ar1["phases"]["update"]["ops"]  # each row's commit launches its own


def test_keeping_freed_blocks_serves_a_large_tensor_from_the_heap_not_a_mapping():
    """keep_freed_blocks (step costs' allocator, as a GPU's caching one: freeing a wide tree's logits unmaps nothing):
    after it, a 64 MB tensor adds no mmapped bytes (glibc's mallinfo2), where by default it is one mapping. In a
    process of its own, so the suite's allocator stays as it is."""
    import subprocess
    import sys

    probe = ("import ctypes, sys, torch\n"
             "from bench.perf.free_cost import keep_freed_blocks\n"
             "class Info(ctypes.Structure):\n"
             "    _fields_ = [(n, ctypes.c_size_t) for n in ('arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks'\n"
             "                                                ' fordblks keepcost').split()]\n"
             "libc = ctypes.CDLL('libc.so.6'); libc.mallinfo2.restype = Info\n"
             "kept = keep_freed_blocks() if sys.argv[1] == 'keep' else None\n"
             "before = libc.mallinfo2().hblkhd; x = torch.ones(16 * 2**20)\n"
             "print(kept, libc.mallinfo2().hblkhd - before)\n")
    got = {how: subprocess.run([sys.executable, "-c", probe, how], capture_output=True, text=True, check=True,
                               cwd=step_costs.project_path(".")).stdout.split() for how in ("keep", "default")}
    assert got["keep"] == ["True", "0"]
    assert got["default"][0] == "None" and int(got["default"][1]) >= 64 * 2**20
