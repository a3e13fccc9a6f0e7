"""bench.verify.greedy_accept on hand-made token / target arrays."""

from __future__ import annotations

import torch

from bench.core.tree import chain, tree_from_parents, tree_from_paths
from bench.core.verify import greedy_accept


def accept(tree, tokens, target):
    return greedy_accept(tree, torch.tensor([tokens]), torch.tensor([target]))


def test_nothing_accepted():
    a = accept(chain(3), [9, 1, 2, 3], [7, 2, 3, 4])
    assert a.best.tolist() == [0] and a.accept_len.tolist() == [1] and a.bonus.tolist() == [7]
    assert a.path.tolist() == [[True, False, False, False]]


def test_full_chain_accepted():
    a = accept(chain(3), [9, 1, 2, 3], [1, 2, 3, 4])
    assert a.best.tolist() == [3] and a.accept_len.tolist() == [4] and a.bonus.tolist() == [4]
    assert a.path.tolist() == [[True] * 4]


def test_partial_chain():
    a = accept(chain(3), [9, 1, 2, 3], [1, 2, 5, 4])
    assert a.best.tolist() == [2] and a.accept_len.tolist() == [3] and a.bonus.tolist() == [5]


def test_second_child_correct():
    t = tree_from_paths([[0], [1], [0, 0], [1, 0]])  # slots: 1=[0], 2=[1], 3=[0,0], 4=[1,0]
    a = accept(t, [9, 5, 6, 1, 2], [6, 0, 2, 0, 8])
    assert a.best.tolist() == [4] and a.accept_len.tolist() == [3] and a.bonus.tolist() == [8]
    assert a.path.tolist() == [[True, False, True, False, True]]


def test_deeper_match_under_wrong_parent_is_rejected():
    t = tree_from_paths([[0], [1], [0, 0]])  # slot 3 is the child of slot 1
    # slot 1 (5) is wrong (target says 6); slot 3 (7) equals slot 1's target but must not count.
    a = accept(t, [9, 5, 6, 7], [6, 7, 1, 2])
    assert a.best.tolist() == [2] and a.accept_len.tolist() == [2] and a.bonus.tolist() == [1]
    # Root wrong too: only the root survives even though slot 3 matches its parent's target.
    a = accept(t, [9, 5, 4, 7], [6, 7, 1, 2])
    assert a.best.tolist() == [0] and a.accept_len.tolist() == [1] and a.bonus.tolist() == [6]


def test_tie_goes_to_lowest_slot():
    t = tree_from_paths([[0], [1], [0, 0], [1, 0]])
    a = accept(t, [9, 6, 6, 3, 4], [6, 3, 4, 1, 2])
    assert a.best.tolist() == [3] and a.accept_len.tolist() == [3] and a.bonus.tolist() == [1]
    a = accept(tree_from_paths([[0], [1]]), [9, 6, 6], [6, 3, 4])
    assert a.best.tolist() == [1] and a.bonus.tolist() == [3]


def test_batch_rows_differ():
    tokens = torch.tensor([[9, 1, 2, 3], [9, 1, 2, 3]])
    target = torch.tensor([[1, 2, 3, 4], [1, 7, 3, 4]])
    a = greedy_accept(chain(3), tokens, target)
    assert a.best.tolist() == [3, 1]
    assert a.accept_len.tolist() == [4, 2]
    assert a.bonus.tolist() == [4, 7]
    assert a.path.tolist() == [[True] * 4, [True, True, False, False]]


def test_input_only_slots_are_never_accepted():
    # root -> a -> b and root -> c -> d; c is input-only (e.g. a Lookahead window slot), so even when
    # c and d match the target neither may be accepted.
    tree = tree_from_parents([-1, 0, 0, 1, 2])  # slots: root, a, c, b, d
    tokens = torch.tensor([[5, 7, 7, 8, 9]])
    target = torch.tensor([[7, 1, 9, 0, 2]])
    assert int(greedy_accept(tree, tokens, target).best[0]) == 4
    cand = torch.tensor([True, True, False, True, True])
    acc = greedy_accept(tree, tokens, target, cand)
    assert int(acc.best[0]) == 1 and int(acc.accept_len[0]) == 2 and int(acc.bonus[0]) == 1
