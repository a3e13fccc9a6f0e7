"""bench.core.tree: tree construction (paths / parents / chain), the TR 2.2.2 tree, attention bias and names."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from bench.core.tree import chain, device_key, tree_from_parents, tree_from_paths

TR_YAML = Path(__file__).resolve().parents[1] / "conf" / "tree" / "tr_2_2_2.yaml"


def tr_tree():
    return tree_from_paths([list(p) for p in OmegaConf.load(TR_YAML).paths])


def test_small_tree_from_paths():
    # Given out of order on purpose: slots are sorted by (depth, lexicographic).
    t = tree_from_paths([[1, 0], [0], [0, 0], [1], [0, 0, 0]])
    assert t.paths == ((0,), (1,), (0, 0), (1, 0), (0, 0, 0))
    assert t.parents.tolist() == [-1, 0, 0, 1, 2, 3]
    assert t.depth.tolist() == [0, 1, 1, 2, 2, 3]
    assert t.choice.tolist() == [0, 0, 1, 0, 0, 0]
    assert t.level_slices == ((1, 3), (3, 5), (5, 6))
    assert t.size == 5 and t.max_depth == 3 and not t.is_chain
    # ancestors[i, j]: j is i or an ancestor of i.
    assert t.ancestors[5].nonzero().flatten().tolist() == [0, 1, 3, 5]
    assert t.ancestors[4].nonzero().flatten().tolist() == [0, 2, 4]
    assert t.ancestors[0].nonzero().flatten().tolist() == [0]
    assert not bool(t.ancestors[3, 2])


def test_position_depth_matches_hand_count():
    # root -> a (1), b (2); a -> c (3); b -> d (4), e (5); d -> f (6)
    t = tree_from_parents([-1, 0, 0, 1, 2, 2, 4])
    assert t.depth.tolist() == [0, 1, 1, 2, 2, 2, 3]
    prefix = 17
    assert (prefix + t.depth).tolist() == [17, 18, 18, 19, 19, 19, 20]


def test_chain():
    c = chain(4)
    assert c.is_chain and c.size == 4 and c.max_depth == 4
    assert c.parents.tolist() == [-1, 0, 1, 2, 3]
    assert c.level_slices == ((1, 2), (2, 3), (3, 4), (4, 5))
    assert torch.equal(c.ancestors, torch.ones(5, 5, dtype=torch.bool).tril())
    assert chain(0).size == 0 and chain(0).is_chain and chain(0).level_slices == ()
    assert tree_from_paths([[0], [0, 0], [0, 0, 0]]).is_chain
    assert not tree_from_paths([[0], [1]]).is_chain


def test_tr_2_2_2():
    t = tr_tree()
    assert t.size == 80 and t.max_depth == 6
    assert [b - a for a, b in t.level_slices] == [8, 21, 25, 15, 8, 3]
    n_children = torch.bincount(t.parents[1:], minlength=t.size + 1)
    assert int(n_children[0]) == 8
    assert int((n_children == 0).sum()) == 40  # leaves
    assert int(t.choice.max()) == 7
    # Parents precede children and every node's depth is its parent's + 1.
    assert bool((t.parents[1:] < torch.arange(1, 81)).all())
    assert torch.equal(t.depth[1:], t.depth[t.parents[1:]] + 1)


def test_invalid_trees():
    with pytest.raises(ValueError):
        tree_from_paths([[0], [1, 0]])  # parent path [1] missing
    with pytest.raises(ValueError):
        tree_from_paths([[0], [0, 0], [0]])  # duplicate
    with pytest.raises(ValueError):
        tree_from_parents([0, 0])  # slot 0 is not a root
    with pytest.raises(ValueError):
        tree_from_parents([-1, 2, 0])  # parent after child
    with pytest.raises(ValueError):
        tree_from_parents([-1, 0, 1, 0])  # depth decreases: not breadth first


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_attention_bias(dtype):
    t = tree_from_paths([[0], [1], [0, 0], [1, 0], [0, 0, 0]])
    bias = t.attention_bias(dtype, "cpu")
    assert bias.dtype == dtype and bias.shape == (6, 6)
    assert bool((bias[t.ancestors] == 0).all())
    assert bool((bias[~t.ancestors] == torch.finfo(dtype).min).all())
    assert int((~t.ancestors).sum()) > 0


def test_name_is_content_hash():
    a = tree_from_paths([[0], [1], [0, 0]])
    b = tree_from_paths([[0, 0], [1], [0]])  # same tree, other input order
    c = tree_from_paths([[0], [1], [1, 0]])
    assert a.name == b.name
    assert a.name != c.name
    assert a.name.startswith("n3-d2-")
    assert tr_tree().name == tr_tree().name
    assert chain(3).name == tree_from_parents([-1, 0, 1, 2]).name != chain(4).name


def test_a_device_and_its_tensors_device_share_one_cache_entry(monkeypatch):
    """A model on `cuda` computes on `cuda:0`: the engine asks for the tree on the one, the verifier on the other.
    Keyed apart, a dynamic tree went to the GPU twice a step (Sequoia and Ouroboros on the H200: 126 copies over 64
    steps, 64 here, where both are `cpu`)."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert device_key("cuda") == device_key(torch.device("cuda", 0)) == "cuda:0" != device_key("cuda:1")
    assert device_key("cpu") == "cpu" and device_key(torch.device("cpu", 1)) == "cpu:1"  # (virtual devices)
    tree, sent = chain(3), []
    monkeypatch.setattr(type(tree), "pack", lambda self, device, extra: sent.append(str(device)) or (object(), None))
    tree.tokens_on([1, 2, 3], torch.device("cuda"))  # the engine's device, with the draft's tokens
    tree.on(torch.device("cuda", 0))  # the verifier's: its logits' device
    assert sent == ["cuda"]
