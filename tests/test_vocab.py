"""Vocabulary-trimmed drafts (bench.models.vocab) and the predicted speedups that choose a draft
(bench.train.draft_choice). Tiny random Llamas."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from transformers import DynamicCache

from bench.errors import HarnessError
from bench.models.drafts import init_draft_from_target
from bench.models.loading import ModelBundle, drafts_dir
from bench.models.vocab import TrimmedDraft, coverage, rank_tokens, read_ranking, trim, write_ranking
from bench.train.draft_choice import chain_accepted, chain_speedup, tree_speedup
from tests.test_draft import V, llama, tokens


def test_ranking_is_by_frequency_with_forced_tokens_first():
    ranking = rank_tokens([[5, 5, 5, 7, 7, 2], [7, 9]], 12, always=(11,))
    assert ranking[:5] == [11, 5, 7, 2, 9]  # 5 and 7 tie at 3: the smaller id first
    assert sorted(ranking) == list(range(12))  # every id, once


def test_coverage_counts_tokens_inside_each_prefix():
    ranking = [3, 1, 0, 2]
    cov = coverage(ranking, torch.tensor([3, 3, 1, 2]), [1, 2, 4])
    assert cov == {1: 0.5, 2: 0.75, 4: 1.0}
    with pytest.raises(HarnessError):
        coverage(ranking, torch.tensor([], dtype=torch.long), [1])


def test_trimmed_logits_are_the_full_ones_inside_v_and_minus_inf_outside():
    model = llama(2)
    keep = [7, 3, 40, 0, 63]
    draft = TrimmedDraft(model, keep)
    x = tokens(2, 9)
    with torch.inference_mode():
        full = model(input_ids=x).logits
        got = draft(input_ids=x).logits
    inside = torch.zeros(V, dtype=torch.bool)
    inside[keep] = True
    assert torch.allclose(got[..., inside], full[..., inside], atol=1e-5)
    assert torch.isneginf(got[..., ~inside]).all()
    probs = torch.softmax(got, -1)
    assert (probs[..., ~inside] == 0).all() and torch.allclose(probs.sum(-1), torch.ones(2, 9))
    assert draft.config is model.config and draft.device == model.device and draft.dtype == model.dtype


def test_trimmed_draft_decodes_with_a_kv_cache():
    model = llama(2)
    draft = TrimmedDraft(model, list(range(0, V, 2)))
    x = tokens(1, 10)
    cache = DynamicCache(config=draft.config)
    with torch.inference_mode():
        whole = draft(input_ids=x).logits
        first = draft(input_ids=x[:, :6], past_key_values=cache, use_cache=True, logits_to_keep=1)
        rest = draft(input_ids=x[:, 6:], past_key_values=first.past_key_values, use_cache=True)
    assert cache.get_seq_length() == 10
    assert torch.allclose(rest.logits, whole[:, 6:], atol=1e-5)


def test_trim_keeps_the_model_for_the_whole_vocabulary_and_checks_its_input():
    model = llama(1)
    assert trim(model, None, None) is model and trim(model, list(range(V)), V) is model
    assert isinstance(trim(model, list(range(V)), 8), TrimmedDraft)
    with pytest.raises(HarnessError, match="needs the draft's token ranking"):
        trim(model, None, 8)
    for bad in ([], [0, 0], [V]):
        with pytest.raises(HarnessError):
            TrimmedDraft(model, bad)


def test_a_trained_draft_loads_trimmed_when_its_config_says_so(tmp_path):
    target = llama(3)
    cache = tmp_path / "models"
    folder = drafts_dir(cache) / "tiny-draft"
    init_draft_from_target(target, 1).save_pretrained(folder)
    ranking = list(reversed(range(V)))
    write_ranking(folder, ranking, counted_tokens=100)
    assert read_ranking(folder) == ranking

    def bundle(vocab):
        cfg = {"name": "tiny-draft", "source": "trained", "id": "tiny-draft", "vocab": vocab}
        return ModelBundle(name="tiny", model=target, tokenizer=None, device=torch.device("cpu"),
                           dtype=torch.float32, vocab_size=V, eos_token_ids=[0], pad_token_id=0, max_context=256,
                           source="test", draft_cfg=OmegaConf.create(cfg), model_cache=str(cache))

    trimmed = bundle(16).load_draft()
    assert isinstance(trimmed, TrimmedDraft) and trimmed.vocab_ids.tolist() == ranking[:16]
    assert not isinstance(bundle(None).load_draft(), TrimmedDraft)
    assert bundle(16).draft_label() == "tiny-draft-1l-v16" and bundle(None).draft_label() == "tiny-draft-1l"


# -- predicted speedups --------------------------------------------------------------------------------------


def test_chain_accepted_length():
    assert chain_accepted(0.0, 5) == 1.0
    assert chain_accepted(1.0, 5) == 6.0
    assert chain_accepted(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_chain_speedup_picks_the_best_length():
    # Free drafts that are always right: the longest chain wins; drafts as costly as the target never pay.
    assert chain_speedup(0.999, 0.0, max_k=8) == (pytest.approx(chain_accepted(0.999, 8)), 8)
    speed, k = chain_speedup(0.6, 1.0)
    assert speed < 1.0 and k == 1
    # A verification forward that grows with width (a CPU) shortens the best chain.
    _, flat_k = chain_speedup(0.8, 0.1)
    _, cpu_k = chain_speedup(0.8, 0.1, verify=lambda n: 1 + 0.3 * (n - 1))
    assert cpu_k < flat_k


def test_tree_speedup_from_rank_hit_rates():
    # A draft whose top-1 is always right: the best 64-node tree is a chain as deep as allowed.
    speed, depth = tree_speedup([1.0, 0.0], c=0.0, size=64, max_depth=16)
    assert depth == 16 and speed == pytest.approx(17.0)
    # Second choices that are sometimes right make the tree wider than a chain and beat it.
    speed_wide, _ = tree_speedup([0.5, 0.3, 0.1], c=0.05, size=32, max_depth=8)
    speed_chain, _ = tree_speedup([0.5, 0.0, 0.0], c=0.05, size=8, max_depth=8)
    assert speed_wide > speed_chain
