"""Train Medusa-1 heads by self-distillation (`make heads`, scripts/train_heads.py): labels, loop, evaluation, report.

Recipe: the model config's `heads.train` block (conf/model/smollm2-135m.yaml documents every key). The data are the
target's own greedy responses and its final hidden states (bench/train/heads_data.py, cached), so training never
runs the target: the backbone is frozen by construction and only the heads' residual blocks (and their projections
when not shared) learn. Loss (Medusa's `medusa/train/train.py`): sum over heads of `loss_weights[i]` x the mean
cross-entropy of head i at position t against the target's greedy token t+2+i, wherever t+2+i is still inside the
response (`head_labels`). Each step draws `batch_positions` positions (without replacement, epoch after epoch), as
the shared 576 x 49152 lm_head makes every position cost a full vocabulary matmul per head. AdamW, linear warm-up,
then cosine decay over the budget (`max_minutes` of wall time, or `max_steps` when set; bench/train/loop.py).

The report (`heads_report.json` beside the weights) holds per-head top-1/5/10 accuracy on the held-out prompts'
responses, trained and untrained, the loss curve, the data statistics, the training time, and the cost of one heads
forward relative to one target decode step (KV cache of `cost_prefix` tokens), measured side by side.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bench.cachefile import READ_ERRORS, atomic_dir, report_corrupt
from bench.core.forward import cache_kw
from bench.core.kv import cut
from bench.core.timing import device_sync
from bench.errors import HarnessError
from bench.models.heads import (
    CONFIG,
    REPORT,
    MedusaHeads,
    from_state_dict,
    init_heads,
    read_heads_dir,
    save_heads,
)
from bench.train.heads_data import heads_data
from bench.train.loop import train_loop
from bench.train.recipes import plain

IGNORE = -100
TOPK = (1, 5, 10)


def head_labels(tokens: torch.Tensor, offsets: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[num_heads, N] labels. `tokens[n]` is the target's greedy token after position n (the token at t+1 for the
    hidden state at t), so head i at position n learns tokens[n + 1 + i], the token at t+2+i, if that position is
    still in the same response; else IGNORE."""
    n = tokens.shape[0]
    ends = torch.repeat_interleave(offsets[1:], offsets[1:] - offsets[:-1])  # each position's response end
    labels = torch.full((num_heads, n), IGNORE, dtype=torch.long)
    for i in range(num_heads):
        source = torch.arange(n) + 1 + i
        inside = source < ends
        labels[i, inside] = tokens[source[inside]]
    return labels


@contextlib.contextmanager
def frozen(module: nn.Module | None):
    """No gradients for `module` (the target's shared lm_head) inside the block; its flags restored after."""
    params = list(module.parameters()) if module is not None else []
    flags = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in zip(params, flags, strict=True):
            p.requires_grad_(flag)


def loss_weights(recipe: dict, num_heads: int) -> list[float]:
    weights = recipe.get("loss_weights")
    weights = [1.0] * num_heads if weights is None else [float(w) for w in weights]
    if len(weights) < num_heads:
        raise HarnessError(f"heads.train.loss_weights has {len(weights)} weights for {num_heads} heads")
    return weights[:num_heads]


def train_heads(heads: MedusaHeads, hidden: torch.Tensor, labels: torch.Tensor, recipe: dict, log=None,
                progress_bar: bool = True) -> dict:
    """Train `heads` on cached hidden states [N, H] (or [num_heads, N, H]: one input per head, e.g. early-layer
    heads) and head_labels [num_heads, N] until max_minutes of wall time (or max_steps; bench/train/loop.py).
    Returns the loss curve (every `log_every` steps: mean total and per-head losses) and counters."""
    weights = loss_weights(recipe, heads.num_heads)
    usable = (labels[0] != IGNORE).nonzero().squeeze(1)  # positions where at least head 0 has a target
    if usable.numel() == 0:
        raise HarnessError("no training positions: every response is shorter than 2 tokens")
    batch = min(int(recipe["batch_positions"]), usable.numel())
    every = int(recipe.get("log_every", 10))
    params = list(heads.parameters())
    for p in params:
        p.requires_grad_(True)
    g = torch.Generator().manual_seed(int(recipe.get("seed", 0)))
    device, dtype = params[0].device, params[0].dtype
    per_head = hidden.dim() == 3
    draw = {"order": usable[torch.randperm(usable.numel(), generator=g)], "cursor": 0, "seen": 0}
    curve, window = [], []

    def step_loss() -> float:
        if draw["cursor"] + batch > draw["order"].numel():
            draw["order"], draw["cursor"] = usable[torch.randperm(usable.numel(), generator=g)], 0
        idx = draw["order"][draw["cursor"] : draw["cursor"] + batch]
        draw["cursor"] += batch
        x, y = (hidden[:, idx] if per_head else hidden[idx]).to(device, dtype), labels[:, idx].to(device)
        losses = []
        for i in range(heads.num_heads):  # one head at a time: one [batch, vocab] logits tensor alive
            keep = y[i] != IGNORE
            if not keep.any():
                losses.append(0.0)
                continue
            xi = x[i] if per_head else x
            loss = F.cross_entropy(heads.head(i, xi[keep]).float(), y[i, keep])
            (weights[i] * loss).backward()
            losses.append(loss.item())
        draw["seen"] += idx.numel()
        window.append(losses)
        return sum(w * v for w, v in zip(weights, losses))

    def after_step(clock, loss: float) -> None:
        if clock.step % every == 0:
            curve.append(curve_point(window, weights, clock.step, draw["seen"], clock.seconds, clock.lr, log))
            window.clear()

    heads.train()
    with frozen(heads.lm_head if heads.shared else None):
        clock = train_loop(params, recipe, step_loss, after_step, floor=float(recipe.get("min_lr", 0.1)),
                           wall_clock=True, schedule_by_steps=True, desc="heads", progress_bar=progress_bar)
        if window:
            curve.append(curve_point(window, weights, clock.step, draw["seen"], clock.elapsed(), clock.lr, log))
    heads.eval().requires_grad_(False)
    return {"steps": clock.step, "trained_positions": draw["seen"], "epochs": round(draw["seen"] / usable.numel(), 2),
            "train_seconds": round(clock.elapsed(), 1), "loss_curve": curve}


def curve_point(window: list[list[float]], weights: list[float], step: int, seen: int, seconds: float, lr: float,
                log=None) -> dict:
    """One loss-curve entry: per-head and weighted total losses averaged over the steps since the last one."""
    per_head = [round(sum(col) / len(window), 4) for col in zip(*window)]
    point = {"step": step, "positions": seen, "seconds": round(seconds, 1), "lr": lr,
             "loss": round(sum(w * v for w, v in zip(weights, per_head)), 4), "head_losses": per_head}
    if log is not None:
        log(point)
    return point


def eval_positions(labels: torch.Tensor, limit: int | None, seed: int = 0) -> torch.Tensor:
    """Held-out positions to score (where head 0 has a target): all, or a seeded sample of `limit` of them."""
    usable = (labels[0] != IGNORE).nonzero().squeeze(1)
    if limit is None or usable.numel() <= int(limit):
        return usable
    pick = torch.randperm(usable.numel(), generator=torch.Generator().manual_seed(seed))[: int(limit)]
    return usable[pick.sort().values]


@torch.inference_mode()
def head_accuracy(heads: MedusaHeads, hidden: torch.Tensor, labels: torch.Tensor, chunk: int = 1024) -> list[dict]:
    """Per head: the share of positions whose target token t+2+i is in the head's top-1/5/10."""
    param = next(iter(heads.parameters()))
    hits = torch.zeros(heads.num_heads, len(TOPK), dtype=torch.long)
    counts = torch.zeros(heads.num_heads, dtype=torch.long)
    for s in range(0, hidden.shape[0], chunk):
        x = hidden[s : s + chunk].to(param.device, param.dtype)
        y = labels[:, s : s + chunk].to(param.device)
        for i in range(heads.num_heads):
            keep = y[i] != IGNORE
            if not keep.any():
                continue
            top = heads.head(i, x[keep]).topk(max(TOPK), dim=-1).indices
            match = (top == y[i, keep, None]).cumsum(-1).clamp(max=1)
            hits[i] += torch.stack([match[:, k - 1].sum() for k in TOPK]).cpu()
            counts[i] += int(keep.sum())
    return [{"head": i, "predicts": f"t+{i + 2}", "positions": int(counts[i]),
             **{f"top{k}": round(float(hits[i, j]) / max(int(counts[i]), 1), 4) for j, k in enumerate(TOPK)}}
            for i in range(heads.num_heads)]


def now(device: torch.device) -> float:
    device_sync(device)
    return time.perf_counter()


@torch.inference_mode()
def heads_cost(target, heads: MedusaHeads, reps: int = 20, warmup: int = 3, prefix: int = 64,
               seed: int = 0) -> dict:
    """Median seconds of one heads forward on one hidden vector and of one target decode step of one token with
    a KV cache of `prefix` tokens (cropped back after every step), timed alternately in this process."""
    from transformers import DynamicCache

    ids = torch.randint(0, target.config.vocab_size, (1, prefix), generator=torch.Generator().manual_seed(seed))
    cache = DynamicCache(config=target.config)
    out = target(input_ids=ids.to(target.device), **cache_kw(target, cache), use_cache=True, output_hidden_states=True,
                 logits_to_keep=1)
    hidden, token = out.hidden_states[-1][:, -1], out.logits[:, -1:].argmax(-1)
    times: dict[str, list[float]] = {"target": [], "heads": []}
    for rep in range(warmup + reps):
        t0 = now(target.device)
        target(input_ids=token, **cache_kw(target, cache), use_cache=True)
        t1 = now(target.device)
        cut(cache, prefix)
        t2 = now(target.device)
        heads(hidden)
        t3 = now(target.device)
        if rep >= warmup:
            times["target"].append(t1 - t0)
            times["heads"].append(t3 - t2)
    target_s, heads_s = statistics.median(times["target"]), statistics.median(times["heads"])
    return {"heads_s": heads_s, "target_step_s": target_s, "ratio": heads_s / target_s, "reps": reps,
            "kv_tokens": prefix}


def write_heads(heads: MedusaHeads, report: dict, out_dir: Path, report_name: str = REPORT,
                extra: dict | None = None) -> None:
    """Weights, config and report into a temporary folder swapped in whole (bench.cachefile.atomic_dir)."""
    with atomic_dir(out_dir) as tmp:
        save_heads(heads, tmp, {"target": report["target_source"], **(extra or {})})
        (tmp / report_name).write_text(json.dumps(report, indent=2) + "\n")


def read_report(out_dir: Path) -> dict | None:
    """The report of a whole heads folder; None if there is none or the folder is damaged (reported in one line,
    so that `make heads` builds it again). The weights are checked against a stand-in lm_head on the meta device."""
    out_dir = Path(out_dir)
    if not (out_dir / CONFIG).is_file() or not (out_dir / REPORT).is_file():
        return None
    try:
        config = json.loads((out_dir / CONFIG).read_text())
        stand_in = nn.Linear(int(config["hidden"]), int(config["vocab"]), bias=False, device="meta")
        read_heads_dir(out_dir, stand_in)
        return json.loads((out_dir / REPORT).read_text())
    except READ_ERRORS as err:
        report_corrupt(f"trained heads {out_dir}", err)
        return None


def summary(report: dict) -> str:
    """A few lines: what was trained on what, held-out accuracy per head, training, cost."""
    d, cost = report["data"], report["cost"]
    kind = "shared lm_head" if report["shared_lm_head"] else "own projections"
    head = (f"heads {report['heads']} for {report['target']}: {report['num_heads']} heads, {kind}, "
            f"{report['num_layers']} block(s) each")
    lines = [head]
    lines.append(f"data: {d['train']['responses']} training / {d['heldout']['responses']} held-out prompts "
                 f"({d['dropped_overlapping_eval']} dropped for overlap with evaluation sets), "
                 f"{d['train']['response_tokens']} / {d['heldout']['response_tokens']} response tokens, "
                 f"generated at {d['train']['tokens_per_second']} tok/s")
    lines.append(f"held-out accuracy over {report['accuracy'][0]['positions']} positions (untrained in brackets):")
    for after, before in zip(report["accuracy"], report["accuracy_untrained"], strict=True):
        lines.append(f"  head {after['head']} ({after['predicts']}): " + "  ".join(
            f"top-{k} {after[f'top{k}']:.1%} ({before[f'top{k}']:.1%})" for k in TOPK))
    curve = report["loss_curve"]
    first, last = (curve[0]["loss"], curve[-1]["loss"]) if curve else (float("nan"), float("nan"))
    lines.append(f"training: {report['steps']} steps x {report['recipe']['batch_positions']} positions "
                 f"({report['epochs']} epochs) in {report['train_seconds'] / 60:.1f} min, loss {first:.3f} -> "
                 f"{last:.3f}")
    lines.append(f"cost: one heads forward {1e3 * cost['heads_s']:.2f} ms = {cost['ratio']:.2f}x a target decode "
                 f"step ({1e3 * cost['target_step_s']:.2f} ms, KV {cost['kv_tokens']} tokens); "
                 f"whole build {report['wall_seconds'] / 60:.1f} min")
    return "\n".join(lines)


def float32_copy(lm_head: nn.Linear) -> nn.Linear:
    copy = nn.Linear(lm_head.in_features, lm_head.out_features, bias=False, device="meta")
    copy.load_state_dict({"weight": lm_head.weight.detach().float()}, assign=True)
    return copy.requires_grad_(False)


def as_dtype_of(heads: MedusaHeads, lm_head: nn.Linear) -> MedusaHeads:
    """The heads in `lm_head`'s dtype, sharing that lm_head if they share one."""
    state = {k: v.to(lm_head.weight.dtype) for k, v in heads.state_dict().items()}
    hidden, vocab = lm_head.in_features, lm_head.out_features
    return from_state_dict(state, hidden, vocab, heads.num_heads, heads.num_layers,
                           lm_head if heads.shared else None).eval()


def build_heads(target, tokenizer, model_cfg, out_dir: Path, mirror_dir: str | None, cache_dir: str,
                progress_bar: bool = True, log=None) -> dict:
    """Everything `make heads` does for one target: data (cached), untrained and trained held-out accuracy,
    training, relative cost, atomic write. Returns the report (also <out_dir>/heads_report.json)."""
    t0 = time.perf_counter()
    cfg = model_cfg.heads
    recipe = plain(cfg.train)
    seed = int(recipe.get("seed", 0))
    torch.manual_seed(seed)
    data, data_path = heads_data(target, tokenizer, model_cfg, recipe, Path(out_dir).parent, mirror_dir,
                                  cache_dir, progress_bar)
    num_heads = int(cfg.get("num_heads", 5))
    lm_head = target.get_output_embeddings()
    # Heads train in float32 (AdamW on float16 weights loses small updates): a low-precision target's lm_head is
    # copied to float32 for training, and the heads are cast back to the target's dtype for the cost and the file.
    work = lm_head if lm_head.weight.dtype == torch.float32 else float32_copy(lm_head)
    heads = init_heads(work, num_heads, bool(cfg.get("shared_lm_head", True)), int(cfg.get("num_layers", 1)))
    held_labels = head_labels(data.heldout.tokens, data.heldout.offsets, num_heads)
    pick = eval_positions(held_labels, recipe.get("eval_positions"), seed)
    held_hidden, held_labels = data.heldout.hidden[pick], held_labels[:, pick]
    before = head_accuracy(heads, held_hidden, held_labels)
    train_labels = head_labels(data.train.tokens, data.train.offsets, num_heads)
    result = train_heads(heads, data.train.hidden, train_labels, recipe, log=log, progress_bar=progress_bar)
    after = head_accuracy(heads, held_hidden, held_labels)
    if work is not lm_head:
        heads = as_dtype_of(heads, lm_head)
    cost = heads_cost(target, heads, reps=int(recipe.get("cost_reps", 20)), prefix=int(recipe.get("cost_prefix", 64)))
    stats = data.stats
    report = {
        "heads": str(cfg.get("name") or cfg.id),
        "target": str(model_cfg.name),
        "target_source": f"{model_cfg.target.source}:{model_cfg.target.id}",
        "num_heads": num_heads,
        "num_layers": heads.num_layers,
        "shared_lm_head": heads.shared,
        "accuracy": after,
        "accuracy_untrained": before,
        "cost": cost,
        **result,
        "train_minutes": round(result["train_seconds"] / 60, 2),
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "data": {**stats, "cache": str(data_path),
                 "dropped_overlapping_eval": sum(s["dropped_overlapping_eval"] for s in stats["sources"].values()),
                 "train_positions": int(data.train.tokens.numel()),
                 "heldout_positions": int(data.heldout.tokens.numel())},
        "device": str(target.device),
        "dtype": str(target.dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "recipe": recipe,
    }
    write_heads(heads, report, out_dir)
    return report
