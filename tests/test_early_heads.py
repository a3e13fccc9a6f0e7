"""ProPD's early heads (bench/train/early_heads.py, bench/train/heads.py): the normed early-layer states they
read, their top-k accuracy, and training with one input per head."""

from __future__ import annotations

import torch

from bench.models.heads import init_heads
from tests.conftest import tiny_llama

V = 64


def test_layer_states_are_the_normed_early_layer_states_at_response_positions():
    from bench.train.early_heads import layer_states

    model = tiny_llama(V)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
    responses = [[9, 10], [11, 12, 13]]
    tokens = torch.tensor(responses[0] + responses[1])
    offsets = torch.tensor([0, 2, 5])
    states = layer_states(model, prompts, tokens, offsets, [1, 2], batch_size=2, desc="", progress_bar=False)
    assert states.shape == (2, 5, model.config.hidden_size)
    with torch.inference_mode():
        for r, (p, resp) in enumerate(zip(prompts, responses)):
            out = model.get_decoder()(input_ids=torch.tensor([p + resp]), output_hidden_states=True).hidden_states
            for j, layer in enumerate([1, 2]):
                want = model.get_decoder().norm(out[layer][0, len(p) - 1 : len(p) - 1 + len(resp)])
                got = states[j, offsets[r] : offsets[r + 1]].float()
                assert torch.allclose(got, want, atol=2e-3), (r, layer)  # stored as float16


def test_topk_accuracy_counts_the_labels_rank():
    from bench.train.early_heads import topk_accuracy

    class Scores(torch.nn.Module):  # head i's logits are its input itself
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def head(self, i, x):
            return x

    logits = torch.tensor([[[0.0, 3.0, 2.0, 1.0], [4.0, 3.0, 2.0, 1.0]]])  # 1 head, 2 positions, 4 tokens
    labels = torch.tensor([1, 3])  # ranks 0 and 3
    assert topk_accuracy(Scores(), logits, labels, 4) == [[0.5, 0.5, 0.5, 1.0]]


def test_train_heads_takes_one_input_per_head():
    """Early heads: head i reads its own states (here: two different periodic codes for the same labels)."""
    from bench.train.heads import train_heads

    model = tiny_llama(V)
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, V, (7,), generator=g).repeat(12)
    codes = torch.randn(2, 7, model.config.hidden_size, generator=g)
    hidden = codes[:, torch.arange(84) % 7]  # [2 heads, 84 positions, H]: head 1's inputs differ from head 0's
    heads = init_heads(model.get_output_embeddings(), 2)
    recipe = {"batch_positions": 32, "lr": 3e-2, "max_minutes": 5, "max_steps": 150, "warmup_steps": 5,
              "log_every": 50, "seed": 0}
    result = train_heads(heads, hidden, labels.expand(2, -1), recipe, progress_bar=False)
    assert result["loss_curve"][-1]["loss"] < 0.1 * result["loss_curve"][0]["loss"]
    with torch.inference_mode():
        for i in range(2):
            assert torch.equal(heads.head(i, hidden[i]).argmax(-1), labels), f"head {i}"
