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

import json
import statistics
import time
from itertools import pairwise
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from bench.cachefile import READ_ERRORS, atomic_dir, report_corrupt
from bench.core.forward import cache_kw
from bench.core.timing import device_sync
from bench.errors import HarnessError
from bench.models.eagle import WEIGHTS, EagleHead
from bench.train.heads_data import Positions, heads_data
from bench.train.loop import train_loop
from bench.train.recipes import plain

REPORT = "eagle_report.json"


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


def losses(head: EagleHead, b: dict, noise: float = 0.0, generator=None,
           token_pairs: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(feature regression, soft token cross-entropy), each a mean over real pairs; the cross-entropy over a random
    `token_pairs` of them when given (None: all)."""
    f_in = b["f_in"]
    if noise:
        f_in = f_in + (torch.rand(f_in.shape, generator=generator, dtype=f_in.dtype) - 0.5) * 2 * noise
    pos = torch.arange(f_in.shape[1])[None].expand(f_in.shape[0], -1)
    pred = head(b["tokens"], f_in, pos, None)
    m = b["mask"]
    pred, f_out = pred[m], b["f_out"][m]
    reg = torch.nn.functional.smooth_l1_loss(pred, f_out)
    if token_pairs is not None and token_pairs < len(pred):
        # The two full-vocabulary projections cost ~7x the head's own layer per pair (49152 x 576 against ~4M
        # weights): an unbiased estimate of the mean over a subset keeps a training step a few times cheaper.
        pick = torch.randperm(len(pred), generator=generator)[:token_pairs]
        pred, f_out = pred[pick], f_out[pick]
    with torch.no_grad():
        p = torch.softmax(head.logits(f_out).float(), -1)
    cls = -(p * torch.log_softmax(head.logits(pred).float(), -1)).sum(-1).mean()
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
    token_pairs = recipe.get("token_pairs")
    token_pairs = None if token_pairs is None else int(token_pairs)
    curve, window = [], []

    def step_loss() -> float:
        pick = torch.randint(len(spans), (per_batch,), generator=g).tolist()
        reg, cls = losses(head, batch(pos, [spans[i] for i in pick], dtype), noise, g, token_pairs)
        loss = reg + p_weight * cls
        loss.backward()
        window.append((float(reg.detach()), float(cls.detach())))
        return float(loss.detach())

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
def agreement(head: EagleHead, pos: Positions, depths: int = 6, max_responses: int = 64, k: int = 1) -> list[float]:
    """Held-out top-k agreement at depth 1..depths (see the module docstring): the target's token among the head's
    k most likely."""
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
        right = (head.logits(pred[:, :-1]).topk(k, dim=-1).indices == b["tokens"][:, 1:, None]).any(-1)
        valid = b["mask"][:, 1:].clone()
        valid[:, : d - 1] = False  # the first pairs' inputs went through fewer than d - 1 of the head's own steps
        out.append(float((right & valid).sum()) / max(int(valid.sum()), 1))
        feats = torch.cat([feats[:, :1], pred[:, :-1]], dim=1)  # pair j now reads the head's own f^_j
    return out


def head_cost(target, head, reps: int = 20, warmup: int = 3, prefix: int = 64, layers=None,
              with_logits: bool = False) -> dict:
    """Median seconds of one head step (one pair, KV of `prefix` pairs; with its logits and top-10 if
    `with_logits`) and of one target decode step (one token, KV of `prefix` tokens), timed alternately in this
    process; both caches cropped back after every step. The head reads the final hidden state (EAGLE-1), or the
    input states of `layers` concatenated (EAGLE-3)."""
    from transformers import DynamicCache

    ids = torch.randint(0, target.config.vocab_size, (1, prefix), generator=torch.Generator().manual_seed(0))
    ids = ids.to(target.device)
    cache, head_cache = DynamicCache(config=target.config), head.new_cache()
    with torch.inference_mode():
        out = target(input_ids=ids, **cache_kw(target, cache), use_cache=True, output_hidden_states=True,
                     logits_to_keep=1)
        hs = out.hidden_states
        feats = (hs[-1] if layers is None else torch.cat([hs[i] for i in layers], -1)).to(next(head.parameters()).dtype)
        head(ids, feats, torch.arange(prefix, device=ids.device)[None], None, head_cache)
        token, pos = ids[:, -1:], torch.tensor([[prefix]], device=ids.device)
        times: dict[str, list[float]] = {"target": [], "head": []}
        for rep in range(warmup + reps):
            t0 = now(target.device)
            target(input_ids=token, **cache_kw(target, cache), use_cache=True)
            t1 = now(target.device)
            f = head(token, feats[:, -1:], pos, None, head_cache)
            if with_logits:
                head.logits(f).topk(10)
            t2 = now(target.device)
            cache.crop(-1)
            head_cache.crop(-1)
            if rep >= warmup:
                times["target"].append(t1 - t0)
                times["head"].append(t2 - t1)
    target_s, head_s = statistics.median(times["target"]), statistics.median(times["head"])
    return {"head_s": head_s, "target_step_s": target_s, "ratio": head_s / target_s, "reps": reps, "kv_tokens": prefix,
            "with_logits": with_logits}


def now(device) -> float:
    device_sync(device)
    return time.perf_counter()


def build_eagle(target, tokenizer, model_cfg, out_dir: Path, data_root: Path, mirror_dir: str | None, cache_dir: str,
                progress_bar: bool = True) -> dict:
    """Everything `make eagle` does for one target: the heads' self-distillation data (cached under `data_root`,
    shared with `make heads`), held-out agreement untrained and trained, training, relative cost, atomic write of
    head.safetensors and eagle_report.json. Returns the report."""
    if target.dtype != torch.float32:
        raise HarnessError(f"EAGLE training needs a float32 target for now (model '{model_cfg.name}' is "
                           f"{str(target.dtype).replace('torch.', '')}); official heads load with model.eagle.source=hub")
    t0 = time.perf_counter()
    cfg = model_cfg.eagle
    recipe = plain(cfg.train)
    torch.manual_seed(int(recipe.get("seed", 0)))
    data, data_path = heads_data(target, tokenizer, model_cfg, plain(model_cfg.heads.train), Path(data_root),
                                 mirror_dir, cache_dir, progress_bar)
    head = EagleHead(target, bias=bool(cfg.get("bias", True))).to(target.device)
    depths = int(recipe.get("eval_depths", 6))
    before = agreement(head, data.heldout, depths)
    result = train(head, data.train, recipe, progress_bar)
    after = agreement(head, data.heldout, depths)
    topk = int(recipe.get("eval_topk", 5))
    report = {
        "eagle": str(cfg.get("name") or cfg.id), "target": str(model_cfg.name),
        "target_source": f"{model_cfg.target.source}:{model_cfg.target.id}",
        "agreement": after, "agreement_untrained": before,
        "agreement_topk": {"k": topk, "by_depth": agreement(head, data.heldout, depths, k=topk)},
        "cost": head_cost(target, head, reps=int(recipe.get("cost_reps", 20))),
        **result, "train_minutes": round(result["train_seconds"] / 60, 2),
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "data": {"cache": str(data_path), "train_positions": int(data.train.tokens.numel()),
                 "heldout_positions": int(data.heldout.tokens.numel()), "heads_recipe": plain(model_cfg.heads.train)},
        "dtype": "float32", "threads": torch.get_num_threads(), "torch": torch.__version__, "recipe": recipe,
    }
    with atomic_dir(out_dir) as tmp:
        save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(tmp / WEIGHTS))
        (tmp / REPORT).write_text(json.dumps(report, indent=2) + "\n")
    return report


def read_report(out_dir: Path) -> dict | None:
    """The report of a whole head folder, or None (a damaged one is reported in one line and built again)."""
    out_dir = Path(out_dir)
    if not (out_dir / WEIGHTS).is_file() or not (out_dir / REPORT).is_file():
        return None
    try:
        load_file(str(out_dir / WEIGHTS))
        return json.loads((out_dir / REPORT).read_text())
    except READ_ERRORS as err:
        report_corrupt(f"trained EAGLE head {out_dir}", err)
        return None


def summary(report: dict) -> str:
    """A few lines: what was trained, held-out agreement per depth (untrained in brackets), training, cost."""
    depth = "  ".join(f"d{d} {a:.1%} ({b:.1%})" for d, (a, b) in
                      enumerate(zip(report["agreement"], report["agreement_untrained"], strict=True), start=1))
    c = report["cost"]
    return "\n".join([
        (f"EAGLE head {report['eagle']} for {report['target']}: {report['data']['train_positions']} training / "
         f"{report['data']['heldout_positions']} held-out positions"),
        f"held-out top-1 agreement by depth: {depth}",
        *([f"held-out top-{report['agreement_topk']['k']} agreement by depth: "
           + "  ".join(f"d{d} {a:.1%}" for d, a in enumerate(report["agreement_topk"]["by_depth"], start=1))]
          if "agreement_topk" in report else []),
        (f"training: {report['steps']} steps in {report['train_minutes']} min; cost {c['ratio']:.3f} of a target "
         f"step ({c['head_s'] * 1e3:.2f} ms vs {c['target_step_s'] * 1e3:.2f} ms)"),
    ])
