"""Graded losslessness: is a method's divergence from greedy AR a numerical near-tie or a wrong token?

In fp16/bf16 two forwards of the same tokens that differ only in shape (a tree of 60 tokens against one token, a
batch of 4 against 1) run other kernels, which sum in another order, so their logits differ by rounding. Where the
reference's two best tokens are that close, a lossless method may pick the other one: a near-tie, not a bug.

At the first divergence i, `grade` runs one forward of the target over prompt + the common prefix (output[:i] ==
reference[:i]), outside any timed region and with no cache (it never touches the engine's), and reads the last
position's logits:
- ref_margin: top-1 minus top-2 logit (how close the reference's choice was);
- method_gap: logit of the reference's token minus logit of the method's token;
- near-tie when |method_gap| <= tolerance(dtype, top logit), else mismatch. The gap is >= 0 when the fresh
  forward agrees with the reference's choice; below 0 it prefers the method's token, which rounding explains only
  as far as the tolerance (a reference several logits worse than the method's token is itself suspect).
A float32 run is graded the same way, but its divergences are never excused: bench.metrics counts any
non-identical float32 row as a failure (docs/metrics.md).
"""

from __future__ import annotations

import torch

from bench.metrics import first_divergence

# The tolerance is ROUNDINGS_ALLOWED roundings of the logit scale: u * max(1, |top logit|), u the dtype's unit
# roundoff (finfo.eps / 2: bf16 2^-8, fp16 2^-11, fp32 2^-24). Why 8: the two forwards' hidden states differ by
# an independent rounding of the residual stream at each of its two adds per layer (attention and MLP outputs
# accumulated in another order), which add up like a random walk, sqrt(2 * layers) roundings: 8 for the papers'
# 32-layer 7B targets, 9-10 for 40-48 layers. The final norm rescales the residual to the scale the logits are
# read at, hence the top logit as the scale. A gap above it (a planted or wrongly verified token is typically
# several logits below the top) is a mismatch. The record keeps ref_margin and method_gap, so a reader can regrade.
ROUNDINGS_ALLOWED = 8


def tolerance(dtype: torch.dtype, top_logit: float) -> float:
    """The largest logit gap that the dtype's rounding explains at this logit scale."""
    return ROUNDINGS_ALLOWED * torch.finfo(dtype).eps / 2 * max(1.0, abs(top_logit))


def next_token_logits(model, ids: list[int], device=None) -> torch.Tensor:
    """The last position's logits (in float32) of one fresh forward over `ids`; no cache is kept."""
    device = torch.device(device) if device is not None else model.device
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids], device=device), use_cache=False, logits_to_keep=1)
    return out.logits[0, -1].float()


def grade(model, prompt_ids: list[int], output_ids: list[int], reference_ids: list[int], *, device=None) -> dict:
    """{"grade", "first_divergence", "ref_margin", "method_gap", "tolerance"} of a method's output against greedy
    AR's; runs the target only when the two differ. A length difference (one side stopped early) is a divergence
    at the shorter length and a mismatch: both outputs keep their EOS, so equal tokens up to there mean one side
    stopped without one or went on past one, which no rounding explains (method_gap is then None)."""
    div = first_divergence(list(output_ids), list(reference_ids))
    if div is None:
        return {"grade": "identical", "first_divergence": None, "ref_margin": None, "method_gap": None,
                "tolerance": None}
    logits = next_token_logits(model, list(prompt_ids) + list(reference_ids[:div]), device)
    top = logits.topk(2).values.tolist()
    tol = tolerance(model.dtype, top[0])
    gap = None
    if div < len(output_ids) and div < len(reference_ids):
        gap = float(logits[reference_ids[div]] - logits[output_ids[div]])
    near = gap is not None and abs(gap) <= tol
    return {"grade": "near-tie" if near else "mismatch", "first_divergence": div, "ref_margin": top[0] - top[1],
            "method_gap": gap, "tolerance": tol}
