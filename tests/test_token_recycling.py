"""methods.token_recycling.proposer: vectorized tree fill, adjacency-matrix updates, hot/cold start, config checks."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from methods.token_recycling.proposer import TokenRecycling

CONF = Path(__file__).resolve().parents[1] / "conf"
V = 50


def make(tree_paths=None, **overrides):
    cfg = OmegaConf.load(CONF / "method" / "token_recycling.yaml")
    cfg.tree = (
        OmegaConf.load(CONF / "tree" / "tr_2_2_2.yaml") if tree_paths is None else {"paths": tree_paths}
    )
    for k, v in overrides.items():
        cfg[k] = v
    return TokenRecycling(cfg, SimpleNamespace(device="cpu", vocab_size=V))


SMALL = [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 2]]


@pytest.mark.parametrize("paths", [None, SMALL], ids=["tr_2_2_2", "small"])
def test_fill_matches_naive_loop(paths):
    tr = make(paths)
    g = torch.Generator().manual_seed(0)
    tr.adj.copy_(torch.randint(0, V, (V, tr.k), generator=g))
    seq = torch.tensor([4, 17, 23, 0, 0])
    draft = tr.propose(seq, 3)
    tree = tr.tree
    expect = [23]
    for node in range(1, tree.size + 1):
        expect.append(int(tr.adj[expect[int(tree.parents[node])], int(tree.choice[node])]))
    assert draft.tree is tree
    assert draft.tokens.tolist() == expect[1:]
    assert len(set(expect)) > 3  # the random matrix really spreads the tokens


def test_zero_matrix_drafts_token_zero():
    draft = make(SMALL).propose(torch.tensor([7, 8]), 2)
    assert draft.tokens.tolist() == [0] * 6


def test_update_parallel_writes_topk_rows():
    tr = make(SMALL, topk=3)
    inputs = torch.tensor([5, 7, 9, 11, 13, 2, 40])
    logits = torch.randn(len(inputs), V, generator=torch.Generator().manual_seed(1))
    tr.update(inputs, logits, logits.argmax(-1), None)
    top = logits.topk(3, dim=-1).indices
    for i, tok in enumerate(inputs.tolist()):
        assert tr.adj[tok].tolist() == top[i].tolist()
    untouched = torch.ones(V, dtype=torch.bool)
    untouched[inputs] = False
    assert int(tr.adj[untouched].abs().sum()) == 0


@pytest.mark.parametrize("strategy,row", [("first", 0), ("last", 4)])
def test_update_first_last_duplicate(strategy, row):
    tr = make(SMALL, topk=3, update_strategy=strategy)
    inputs = torch.tensor([5, 7, 9, 11, 5, 2, 9])  # 5 at slots 0 and 4, 9 at slots 2 and 6
    logits = torch.randn(len(inputs), V, generator=torch.Generator().manual_seed(2))
    tr.update(inputs, logits, logits.argmax(-1), None)
    top = logits.topk(3, dim=-1).indices
    assert tr.adj[5].tolist() == top[row].tolist()
    assert tr.adj[9].tolist() == top[2 if strategy == "first" else 6].tolist()
    assert tr.adj[7].tolist() == top[1].tolist() and tr.adj[2].tolist() == top[5].tolist()
    assert top[0].tolist() != top[4].tolist()


@pytest.mark.parametrize("start", ["hot", "cold"])
def test_start_hot_keeps_cold_resets(start):
    tr = make(SMALL, start=start)
    tr.start([1, 2, 3])
    inputs = torch.arange(7)
    logits = torch.randn(7, V, generator=torch.Generator().manual_seed(3))
    tr.update(inputs, logits, logits.argmax(-1), None)
    before = tr.adj.clone()
    assert int(before.abs().sum()) > 0
    tr.start([4, 5])
    if start == "hot":
        assert torch.equal(tr.adj, before)
    else:
        assert int(tr.adj.abs().sum()) == 0


def test_config_checks():
    with pytest.raises(ValueError):
        make(None, topk=7)  # the 2.2.2 tree uses rank 7
    assert make(None, topk=8).k == 8
    with pytest.raises(ValueError):
        make(SMALL, topk=2)  # SMALL uses rank 2
    with pytest.raises(ValueError):
        make(SMALL, update_strategy="random")
    with pytest.raises(ValueError):
        make(SMALL, start="warm")


def test_the_proposer_does_not_import_its_calibration():
    """Calibration is a step above the method (make tree-stats): it imports the proposer, never the reverse."""
    import ast

    from methods.token_recycling import proposer

    tree = ast.parse(Path(proposer.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and "calibration" in m}


@pytest.mark.parametrize("train", ["tree", "path"])
def test_calibration_trains_the_matrix_with_every_node_or_the_accepted_path(train):
    """`make tree-stats` counts the whole calibration tree either way; with train="path" only the rows of the
    root and the accepted drafts are written (what any tree writes), so p can be taken for trees of any size."""
    from bench.core.verify import greedy_accept
    from methods.shared.trees.static import AcceptanceStats
    from methods.token_recycling.calibration import Calibrating

    cfg = OmegaConf.load(CONF / "method" / "token_recycling.yaml")
    cfg.tree, cfg.topk = {"paths": SMALL}, 3  # slots: root, [0], [1], [0,0], [0,1], [1,0], [0,0,2]
    stats = AcceptanceStats(3, 3)
    cal = Calibrating(cfg, SimpleNamespace(device="cpu", vocab_size=V), stats, train)
    inputs = torch.tensor([5, 7, 9, 11, 13, 2, 40])  # distinct, so no row is written twice
    logits = torch.randn(len(inputs), V, generator=torch.Generator().manual_seed(4))
    logits[0, 7] = logits[1, 11] = 100.0  # [0] and [0, 0] are right, the rest wrong
    logits[3, 40] = -100.0
    target = logits.argmax(-1)
    acc = greedy_accept(cal.tree, inputs[None], target[None])
    assert acc.path[0].nonzero().flatten().tolist() == [0, 1, 3]
    cal.update(inputs, logits, target, acc)
    assert stats.hits.sum() == 2 and stats.trials.tolist() == [[1, 1, 0], [1, 1, 0], [0, 0, 1]]  # either way
    top = logits.topk(3, dim=-1).indices
    written = {0, 1, 3} if train == "path" else set(range(len(inputs)))
    for slot, tok in enumerate(inputs.tolist()):
        if slot in written:
            assert cal.adj[tok].tolist() == top[slot].tolist()
    untouched = torch.ones(V, dtype=torch.bool)
    untouched[inputs[sorted(written)]] = False
    assert int(cal.adj[untouched].abs().sum()) == 0
    with pytest.raises(ValueError):
        Calibrating(cfg, SimpleNamespace(device="cpu", vocab_size=V), stats, "warm")


def test_replay_starts_every_repeat_of_a_prompt_from_its_first_state(smollm, prompts):
    """A hot matrix that has decoded a prompt once drafts its continuation the second time (a timing loop's repeats
    would overstate MAT); bench.core.proposer.Replay restores the state the prompt's first generation started from."""
    from bench.core.engine import Engine
    from bench.core.proposer import Replay
    from bench.core.timing import PhaseTimer
    from bench.run.compose import compose_config
    from methods import build_method

    engine = Engine(smollm.model, smollm.eos_token_ids, smollm.max_context, device=smollm.device)
    method = build_method(compose_config(["method=token_recycling", "tree=tr_2_2_2"]).method, smollm)  # hot

    def accepted(replay=None):
        if replay:
            replay.start(method, 0)
        return method.generate(engine, prompts[0], 16, PhaseTimer(sync=False)).accept_lengths

    first, again = accepted(replay := Replay()), accepted()
    assert sum(again) / len(again) > sum(first) / len(first)  # it has seen this prompt's continuation
    assert accepted(replay) == first
