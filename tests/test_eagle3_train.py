"""EAGLE-3 training (bench/train/eagle3.py): the training-time test's unroll computes exactly what the drafting
proposer computes along one chain of its tree (so what is trained is what is drafted), with every row or a share
of them; the loss falls and a head trained with it on a tiny target agrees with the target at depths 1 and 2; the
data's spans, the draft vocabulary and the pooled agreement add up."""

from __future__ import annotations

import pytest
import torch

from bench.models.eagle import causal_mask
from bench.models.eagle3 import Eagle3Head
from bench.train import eagle3 as train3
from bench.train.eagle3_data import Split
from tests.test_eagle3 import V, continuations, fused, per_token_target


def split_of(target, seqs: torch.Tensor, layers, loss_from: int = 3) -> Split:
    """A data split of the tiny target's sequences, as eagle3_data stores it (float32)."""
    with torch.no_grad():
        hs = target(seqs, output_hidden_states=True).hidden_states
    n, width = seqs.shape
    return Split(seqs.flatten(), fused(target, seqs, layers).flatten(0, 1), hs[-1].flatten(0, 1),
                 torch.arange(n + 1) * width, torch.full((n,), loss_from), torch.zeros(n, dtype=torch.long))


@pytest.fixture(scope="module")
def tiny():
    target = per_token_target()
    seqs = continuations(target, 48, 0)
    head = Eagle3Head.from_target(target, tokens=seqs[:, 4:].unique(), seed=0)
    return target, seqs, head


def chain(head, b, row: int, depth: int) -> list[torch.Tensor]:
    """What the proposer computes: the accepted pairs 0..row, then `depth - 1` drafts of one chain fed back with the
    text's tokens (FeatureHeadProposer.catch_up and level: positions row + d, each seeing the context and its
    chain)."""
    cache, n = head.new_cache(), row + 1
    tokens, states = b["ids"][:1, 1 : n + 1], b["fused"][:1, :n]
    out = head(tokens, states, torch.arange(n)[None], causal_mask(n, 0, states.dtype, states.device), cache)
    outs, state = [out[0, -1]], out[:, -1:]
    for d in range(1, depth):
        mask = torch.zeros(1, 1, 1, n + d)  # the context and the chain's entries: all visible
        state = head(b["ids"][:1, row + d + 1 : row + d + 2], state, torch.tensor([[row + d]]), mask, cache)
        outs.append(state[0, 0])
    return outs


@pytest.mark.parametrize("share", [None, "half"])
def test_unroll_is_the_proposers_chain(tiny, share):
    target, seqs, head = tiny
    split = split_of(target, seqs[:1], head.layers)
    b = train3.batch(split, split.spans(), torch.float32)
    width = b["ids"].shape[1]
    rows = None if share is None else torch.arange(0, width, 2)
    depth = 4
    with torch.no_grad():
        steps = [out for out, _, _ in train3.unroll(head, b, depth, rows)]
        for row in (0, 6, 12, width - depth - 2):
            expected = chain(head, b, row, depth)
            for j, want in enumerate(expected):
                index = row if j == 0 or rows is None else int((rows == row).nonzero())
                torch.testing.assert_close(steps[j][0, index], want, rtol=1e-4, atol=1e-5)


def test_training_time_test_learns_the_tiny_target(tiny):
    """A head trained with tt_loss on the tiny per-token target's continuations agrees with it at depths 1-2 on
    held-out continuations (the untrained one does not)."""
    target, seqs, head = tiny
    train_split, held = split_of(target, seqs, head.layers), split_of(target, continuations(target, 16, 1), head.layers)
    lm_head = target.get_output_embeddings().weight.detach()
    before = train3.agreement(head, lm_head, held, depths=2)["1"]
    recipe = {"lr": 3e-3, "max_minutes": 5, "max_steps": 200, "batch_tokens": 16 * 32, "ttt_steps": 3,
              "ttt_rows": 0.5, "log_every": 50}
    result = train3.train(head, lm_head, train_split, recipe, progress_bar=False)
    after = train3.agreement(head, lm_head, held, depths=2)
    assert result["steps"] == 200 and len(result["loss_curve"]) == 4
    first, last = result["loss_curve"][0]["ce_by_step"], result["loss_curve"][-1]["ce_by_step"]
    assert last[0] < first[0] and last[1] < first[1]
    assert after["1"][0] > 0.9 and after["1"][1] > 0.8 and before[0] < 0.5, (before, after)
    assert after["positions"][0] >= after["positions"][1] > 0
    assert head.embed.weight.requires_grad  # the target's own embedding: frozen while training, given back


def test_spans_vocabulary_and_pooled_agreement():
    seqs = torch.tensor([[1, 2, 3, 4, 5], [6, 6, 6, 7, 8]])
    split = Split(seqs.flatten(), torch.zeros(10, 3), torch.zeros(10, 1), torch.tensor([0, 5, 10]),
                  torch.tensor([1, 0]), torch.tensor([0, 1]))
    assert split.spans() == [(0, 5, 1), (5, 10, 0)] and split.spans(source=1) == [(5, 10, 0)]
    # learnt tokens: 3, 4, 5 (from position 1 on: its next token) and 6, 6, 7, 8; EOS (9) always kept
    assert train3.draft_vocabulary(split, V, 3, [9]).tolist() == [3, 6, 9]
    pooled = train3.pooled({"a": {"positions": [10, 4], "1": [0.5, 0.25]}, "b": {"positions": [30, 0], "1": [1.0, 0.0]}})
    assert pooled == {"positions": [40, 4], "1": [0.875, 0.25]}


def test_eagle1_is_scored_as_its_own_evaluation_scores_it_on_greedy_text():
    """On sequences that are the target's greedy text from their second token on, `eagle1_agreement` (EAGLE-1 on an
    EAGLE-3 split, against the target's greedy token) equals EAGLE-1's own evaluation (against the text's next token)
    at every depth, in batches of any size; the trained head agrees far more than an untrained one."""
    from bench.models.eagle import EagleHead
    from bench.train import eagle as train1
    from bench.train.heads_data import Positions
    from tests.test_eagle import per_token_target as eagle1_target
    from tests.test_eagle import train_head as train_eagle1

    target = eagle1_target()
    head = train_eagle1(target)
    first = torch.randint(0, V, (6, 1), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        seqs = target.generate(first, attention_mask=torch.ones_like(first), max_new_tokens=28, do_sample=False,
                               pad_token_id=0)
        final = target(seqs, output_hidden_states=True).hidden_states[-1]
    # EAGLE-1's evaluation scores pair j against the text's token after position j + 1 of its positions; the split
    # scores wherever the target's state there is known: two positions fewer give both the same pairs.
    n, width = seqs.shape[0], seqs.shape[1] - 2
    split = Split(seqs[:, :width].flatten(), torch.zeros(n * width, 3), final[:, :width].flatten(0, 1),
                  torch.arange(n + 1) * width, torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long))
    own = Positions(final[:, :-1].flatten(0, 1), seqs[:, 1:].flatten(), torch.arange(n + 1) * (width + 1))
    lm_head = target.get_output_embeddings().weight.detach()
    scored = train3.eagle1_agreement(head, lm_head, split, depths=3)
    assert scored["1"] == pytest.approx(train1.agreement(head, own, 3), abs=1e-9)
    assert scored["positions"] == [n * (width - 1 - d) for d in range(3)]
    assert train3.eagle1_agreement(head, lm_head, split, depths=3, batch_tokens=2 * width) == scored
    assert scored["1"][0] > 0.75 > train3.eagle1_agreement(EagleHead(target), lm_head, split, depths=1)["1"][0] + 0.3
