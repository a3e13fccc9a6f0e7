"""A multi-turn prompt carries the model's earlier answers as their text (bench.models.chat.answer_text)."""

from __future__ import annotations

import pytest

from bench.models.chat import answer_text

pytestmark = pytest.mark.model

TEXT = "Hello , world ! a .b"  # spaces before punctuation: what clean_up_tokenization_spaces would remove


def test_an_answer_goes_into_the_next_turn_verbatim(smol_tokenizer):
    assert answer_text(smol_tokenizer, smol_tokenizer(TEXT).input_ids) == TEXT


def test_an_answer_stays_verbatim_where_the_tokenizer_would_clean_it_up(smol_tokenizer, monkeypatch):
    """transformers 5.6 cleaned up a BPE tokenizer's output when its config asks (the embedded GGUF's does), so the
    second turn's prompt depended on the release; this flag restores that rule under later releases."""
    monkeypatch.setattr(smol_tokenizer, "clean_up_tokenization_spaces", True, raising=False)
    monkeypatch.setattr(smol_tokenizer, "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output",
                        True, raising=False)
    ids = smol_tokenizer(TEXT).input_ids
    assert smol_tokenizer.decode(ids, skip_special_tokens=True) == "Hello, world! a.b"  # the rule is in force
    assert answer_text(smol_tokenizer, ids) == TEXT
