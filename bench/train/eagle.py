"""EAGLE-1 head training (bench/models/eagle.py) on the target's self-distilled answers.

Data: the Medusa heads' self-distillation positions (bench/train/heads_data.py, cached): per response, the target's
final normed hidden state h_n at every position and its greedy token after it, tokens[n]. Position 0 is the
prompt's last token, so tokens[n] is response token n. EAGLE's pairs within a response are (f_i, t_{i+1}) =
(h_i, tokens[i]) with targets f_{i+1} = h_{i+1} and the target's distribution softmax(lm_head(h_{i+1})) of the token
after it. The head attends over the response's earlier pairs only (the prompt's features are not cached); at
inference it also sees the prompt's pairs, which it may use or ignore (RoPE is relative).

Losses as EAGLE-1: SmoothL1 between f^_{i+1} and f_{i+1} plus `p_weight` (0.1) x the soft cross-entropy between the
target's and the head's next-token distributions, over real (unpadded) pairs; the input features get uniform noise
of `noise` (0.1) amplitude. AdamW through bench/train/loop.py. The embedding and lm_head are the target's, frozen.

Evaluation (`agreement`): held-out top-1 agreement at depth d = 1..`depths`: the head's argmax at pair j against
the target's token after position j + 1. Depth 1 reads the target's features; at depth d every input feature is the
head's own output of depth d - 1 for that position, so it went through d - 1 of the head's own steps (EAGLE's
n-alpha, with the earlier context approximated the same way: a lower bound).
"""

from __future__ import annotations

from itertools import pairwise

import torch

from bench.models.eagle import EagleHead
from bench.train.heads_data import Positions
from bench.train.loop import train_loop


def responses(pos: Positions, min_pairs: int = 2) -> list[tuple[int, int]]:
    """(start, stop) position ranges of the responses with at least `min_pairs` pairs."""
    offsets = pos.offsets.tolist()
    return [(a, b) for a, b in pairwise(offsets) if b - a - 1 >= min_pairs]


def batch(pos: Positions, spans: list[tuple[int, int]], dtype) -> dict[str, torch.Tensor]:
    """Right-padded pairs of the responses `spans`: tokens [B, T], features in/out [B, T, H], mask [B, T]."""
    width = max(b - a - 1 for a, b in spans)
    n, h = len(spans), pos.hidden.shape[1]
    out = {"tokens": torch.zeros(n, width, dtype=torch.long), "f_in": torch.zeros(n, width, h, dtype=dtype),
           "f_out": torch.zeros(n, width, h, dtype=dtype), "mask": torch.zeros(n, width, dtype=torch.bool)}
    for r, (a, b) in enumerate(spans):
        t = b - a - 1
        out["tokens"][r, :t] = pos.tokens[a : b - 1]
        out["f_in"][r, :t] = pos.hidden[a : b - 1].to(dtype)
        out["f_out"][r, :t] = pos.hidden[a + 1 : b].to(dtype)
        out["mask"][r, :t] = True
    return out


def losses(head: EagleHead, b: dict, noise: float = 0.0, generator=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(feature regression, soft token cross-entropy), each a mean over real pairs."""
    f_in = b["f_in"]
    if noise:
        f_in = f_in + (torch.rand(f_in.shape, generator=generator, dtype=f_in.dtype) - 0.5) * 2 * noise
    pos = torch.arange(f_in.shape[1])[None].expand(f_in.shape[0], -1)
    pred = head(b["tokens"], f_in, pos, None)
    m = b["mask"]
    reg = torch.nn.functional.smooth_l1_loss(pred[m], b["f_out"][m])
    with torch.no_grad():
        p = torch.softmax(head.logits(b["f_out"][m]).float(), -1)
    cls = -(p * torch.log_softmax(head.logits(pred[m]).float(), -1)).sum(-1).mean()
    return reg, cls


def train(head: EagleHead, pos: Positions, recipe: dict, progress_bar: bool = True) -> dict:
    """Train `head` in place on the positions; returns steps, time and the loss curve."""
    spans = responses(pos)
    if not spans:
        raise ValueError("no response with two pairs to train on")
    g = torch.Generator().manual_seed(int(recipe.get("seed", 0)))
    per_batch = max(1, int(recipe["batch_tokens"]) // max(b - a for a, b in spans))
    dtype = next(head.parameters()).dtype
    p_weight, noise = float(recipe.get("p_weight", 0.1)), float(recipe.get("noise", 0.1))
    curve, window = [], []

    def step_loss() -> float:
        pick = torch.randint(len(spans), (per_batch,), generator=g).tolist()
        reg, cls = losses(head, batch(pos, [spans[i] for i in pick], dtype), noise, g)
        loss = reg + p_weight * cls
        loss.backward()
        window.append((float(reg.detach()), float(cls.detach())))
        return float(loss)

    def after_step(clock, loss) -> None:
        if len(window) >= int(recipe.get("log_every", 10)):
            reg, cls = (sum(x) / len(window) for x in zip(*window))
            curve.append({"step": clock.step, "seconds": round(clock.seconds, 1), "reg": round(reg, 4),
                          "cls": round(cls, 4)})
            window.clear()

    params = [p for p in head.parameters() if p.requires_grad]
    head.train()
    clock = train_loop(params, recipe, step_loss, after_step, betas=(0.9, 0.95), desc="eagle",
                       progress_bar=progress_bar)
    head.eval()
    return {"steps": clock.step, "train_seconds": round(clock.seconds, 1), "loss_curve": curve}


@torch.inference_mode()
def agreement(head: EagleHead, pos: Positions, depths: int = 6, max_responses: int = 64) -> list[float]:
    """Held-out top-1 agreement at depth 1..depths (see the module docstring)."""
    spans = responses(pos, min_pairs=depths + 1)[:max_responses]
    if not spans:
        return []
    dtype = next(head.parameters()).dtype
    b = batch(pos, spans, dtype)
    n, width = b["tokens"].shape
    posn = torch.arange(width)[None].expand(n, -1)
    feats, out = b["f_in"], []
    for d in range(1, depths + 1):
        pred = head(b["tokens"], feats, posn, None)  # pair j's output predicts the token after position j + 1
        right = head.logits(pred[:, :-1]).argmax(-1) == b["tokens"][:, 1:]
        valid = b["mask"][:, 1:].clone()
        valid[:, : d - 1] = False  # the first pairs' inputs went through fewer than d - 1 of the head's own steps
        out.append(float((right & valid).sum()) / max(int(valid.sum()), 1))
        feats = torch.cat([feats[:, :1], pred[:, :-1]], dim=1)  # pair j now reads the head's own f^_j
    return out
