"""methods.pld.find_candidates (original and HF settings) and the PromptLookup proposer's drafts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch
from omegaconf import OmegaConf

from methods.pld import PromptLookup, find_candidates


def cands(seq, max_ngram=3, num_tokens=10, full=True):
    return find_candidates(torch.tensor(seq), max_ngram, num_tokens, full).tolist()


def test_original_picks_earliest_match():
    seq = [1, 2, 3, 4, 5, 6, 9, 1, 2, 3, 4, 5, 6, 8, 1, 2, 3]
    assert cands(seq, num_tokens=4) == [4, 5, 6, 9]
    assert cands(seq, num_tokens=10) == [4, 5, 6, 9, 1, 2, 3, 4, 5, 6]


def test_original_requires_full_continuation():
    seq = [1, 2, 3, 7, 1, 2, 3]
    assert cands(seq, num_tokens=3) == [7, 1, 2]
    assert cands(seq, num_tokens=5) == []  # only 4 tokens follow the match at any n


def test_never_returns_own_trailing_ngram():
    assert cands([5, 6, 7]) == []
    assert cands([5, 6, 7], full=False) == []
    assert cands([4]) == [] and cands([4], full=False) == []


def test_falls_back_to_smaller_ngram():
    # no earlier [0, 6, 2]; [6, 2] at 3 wins over the earlier 1-gram [2] at 0.
    assert cands([2, 9, 1, 6, 2, 3, 4, 0, 6, 2], num_tokens=3) == [3, 4, 0]
    # only the 1-gram [2] matches
    assert cands([8, 2, 5, 5, 5, 5, 5, 6, 2], num_tokens=3) == [5, 5, 5]


def test_no_match_is_empty():
    assert cands([1, 2, 3, 4, 5, 6]) == []
    assert cands([1, 2, 3, 4, 5, 6], max_ngram=2, full=False) == []


def test_hf_setting_allows_partial_continuation():
    seq = [1, 2, 3, 4, 1, 2]
    assert cands(seq, max_ngram=2, full=False) == [3, 4, 1, 2]
    assert cands(seq, max_ngram=2, num_tokens=2, full=False) == [3, 4]
    assert cands(seq, max_ngram=3, full=True) == []
    # HF also takes the earliest match: [9, 9] at 0 -> continuation starts at 2.
    assert cands([9, 9, 1, 9, 9], max_ngram=2, full=False) == [1, 9, 9]


def test_proposer_drafts_chain():
    cfg = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "method" / "pld.yaml")
    cfg.num_draft_tokens = 3
    pld = PromptLookup(cfg, SimpleNamespace(device="cpu", vocab_size=20))
    seq = torch.tensor([1, 2, 3, 7, 8, 1, 2, 3, 0, 0, 0])  # tail past `length` must be ignored
    draft = pld.propose(seq, 8)
    assert draft.tree.is_chain and draft.tree.size == 3 and draft.tokens.tolist() == [7, 8, 1]
    empty = pld.propose(torch.tensor([1, 2, 3, 4]), 4)
    assert empty.tree.size == 0 and empty.tokens.numel() == 0
