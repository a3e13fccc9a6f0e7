"""Distil a small draft from its target (`make draft`, scripts/train_draft.py): data, training loop, report.

Recipe: the model config's `draft.train` block (conf/model/smollm2-135m.yaml documents every key), so
`make draft MODEL=<any>` works for any target config. The draft starts as `init_draft_from_target` (a few of
the target's layers) and learns to match the target's next-token distribution: loss = KL(target || draft)
over the full vocabulary at every position of teacher-forced text, the target run per batch under
inference_mode. Embeddings and lm_head stay frozen (they are the target's, and most of a small draft's
parameters); AdamW trains the decoder layers and the final norm. Training stops at `max_minutes` of training
or `max_tokens`, whichever comes first; the learning rate follows warm-up then cosine decay over that budget.

Data: text that no benchmark evaluates. Each source is read like a REST corpus source (data/corpus.py:
mirror, package file or hub, in that order) and split by row into training and held-out rows; documents that
share a 12-word window with an evaluation prompt or answer (`disjoint_from`) are dropped from training, as
for the REST datastores. Plain-text sources are tokenized as the tokenizer does by default; chat sources
(`chat: {user: ..., assistant: ...}`) are rendered with the target's chat template (bench.prompts), the
answer appended, then EOS. Documents are packed into `seq_len` windows, EOS between them.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from bench.cachefile import READ_ERRORS, atomic_dir, report_corrupt
from bench.errors import HarnessError
from bench.models.chat import prompt_ids
from bench.models.drafts import agreement_rate, decode_step_seconds, init_draft_from_target, top1
from bench.models.loading import check_model_dir
from data.corpus import OverlapIndex, eval_texts, source_rows

REPORT = "draft_report.json"


@dataclass
class DraftData:
    train: list[list[int]]  # tokenized training documents, shuffled
    heldout: dict[str, list[list[int]]]  # source name -> tokenized held-out documents
    stats: dict = field(default_factory=dict)  # per source: rows read, train/held-out/dropped documents, tokens


def plain(cfg) -> dict:
    return OmegaConf.to_container(OmegaConf.create(cfg), resolve=True) if not isinstance(cfg, dict) else cfg


def row_split(src: dict, index: int) -> str | None:
    """'train', 'heldout' or None (unused) for row `index` of a source."""
    held = src.get("heldout_rows")
    if held and held[0] <= index < held[1]:
        return "heldout"
    every = src.get("heldout_every")
    train = src.get("train_rows")
    in_train = train is None or train[0] <= index < train[1]
    if in_train and every and index % int(every) == 0:
        return "heldout"
    return "train" if in_train else None


def rows_needed(src: dict) -> int | None:
    stops = [r[1] for r in (src.get("train_rows"), src.get("heldout_rows")) if r]
    if src.get("train_rows") is None:
        return None
    return max(stops)


def document_ids(row: dict, src: dict, tokenizer, chat_template: str, eos: int) -> tuple[str, list[int]]:
    """(text for decontamination, token ids) of one row."""
    if src.get("chat"):
        user = src["chat"]["user"].format(**row)
        answer = src["chat"]["assistant"].format(**row)
        ids = prompt_ids(tokenizer, chat_template, [], user)
        ids = list(ids) + tokenizer(answer, add_special_tokens=False).input_ids + [eos]
        return f"{user}\n{answer}", ids
    text = src["text"].format(**row)
    return text, tokenizer(text).input_ids + [eos]


def load_draft_data(train_cfg, tokenizer, chat_template: str, eos: int, mirror_dir: str | None,
                    cache_dir: str) -> DraftData:
    recipe = plain(train_cfg)
    sources = recipe.get("sources") or []
    if not sources:
        raise HarnessError("draft.train.sources is empty: nothing to train on")
    rows_by_source = {}
    for src in sources:  # every source is found before the (slower) evaluation sets are loaded
        window = {**src, "skip_rows": 0, "max_rows": rows_needed(src)}
        rows, where = source_rows(f"draft:{src['name']}", window, mirror_dir)
        rows_by_source[src["name"]] = (list(rows), where)
    overlap = None
    if recipe.get("disjoint_from"):
        overlap = OverlapIndex(eval_texts(recipe["disjoint_from"], mirror_dir, cache_dir),
                               int(recipe.get("window_words", 12)))
    train, heldout, stats = [], {}, {}
    for src in sources:
        rows, where = rows_by_source[src["name"]]
        st = stats[src["name"]] = {"where": where, "rows": len(rows), "train_documents": 0, "train_tokens": 0,
                                   "heldout_documents": 0, "dropped_overlapping_eval": 0}
        for i, row in enumerate(rows):
            split = row_split(src, i)
            if split is None:
                continue
            text, ids = document_ids(row, src, tokenizer, chat_template, eos)
            if split == "heldout":
                heldout.setdefault(src["name"], []).append(ids)
                st["heldout_documents"] += 1
            elif overlap is not None and overlap.hits(text):
                st["dropped_overlapping_eval"] += 1
            else:
                train.append(ids)
                st["train_documents"] += 1
                st["train_tokens"] += len(ids)
    if not train:
        raise HarnessError("no training documents left (all sources empty or dropped)")
    random.Random(int(recipe.get("seed", 0))).shuffle(train)
    return DraftData(train, heldout, stats)


def pack(documents: list[list[int]], seq_len: int) -> torch.Tensor:
    """[N, seq_len] windows of the concatenated documents (the tail shorter than a window is dropped)."""
    flat = [t for doc in documents for t in doc]
    n = len(flat) // seq_len
    if n == 0:
        raise HarnessError(f"fewer than seq_len={seq_len} tokens to train on ({len(flat)})")
    return torch.tensor(flat[: n * seq_len], dtype=torch.long).view(n, seq_len)


def heldout_batches(data: DraftData, seq_len: int, tokens: int, batch_size: int) -> dict[str, list[torch.Tensor]]:
    """Per held-out source, about `tokens` tokens as [batch, seq_len] windows (fewer if the source is small)."""
    out = {}
    for name, docs in data.heldout.items():
        flat = [t for doc in docs for t in doc][:tokens]
        length = min(seq_len, len(flat))
        if length < 2:
            continue
        windows = torch.tensor(flat[: len(flat) // length * length], dtype=torch.long).view(-1, length)
        out[name] = list(windows.split(batch_size))
    return out


def distill_loss(target_logits: torch.Tensor, draft_logits: torch.Tensor) -> torch.Tensor:
    """Mean over positions of KL(target || draft) over the full vocabulary (float32)."""
    v = target_logits.shape[-1]
    log_p = F.log_softmax(target_logits.float().reshape(-1, v), dim=-1)
    log_q = F.log_softmax(draft_logits.float().reshape(-1, v), dim=-1)
    return F.kl_div(log_q, log_p, log_target=True, reduction="batchmean")


def trainable_parameters(draft) -> list[torch.nn.Parameter]:
    """Freeze input embeddings and lm_head (tied or not); everything else (layers, norm) trains."""
    frozen = {id(draft.get_input_embeddings().weight), id(draft.get_output_embeddings().weight)}
    params = []
    for p in draft.parameters():
        p.requires_grad_(id(p) not in frozen)
        if p.requires_grad:
            params.append(p)
    return params


def lr_at(step: int, progress: float, base: float, warmup: int, floor: float = 0.1) -> float:
    """Linear warm-up over `warmup` steps, then cosine from base to floor*base over the budget (progress 0..1)."""
    if step < warmup:
        return base * (step + 1) / warmup
    return base * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def train(target, draft, windows: torch.Tensor, recipe: dict, log=None, progress_bar: bool = True) -> dict:
    """Distil `draft` from `target` on `windows` ([N, seq_len]) until max_minutes or max_tokens. Returns the
    loss curve and counters. Deterministic order (recipe seed); batches cycle through the windows."""
    from tqdm import tqdm

    batch_size = int(recipe["batch_size"])
    max_tokens = int(recipe["max_tokens"])
    max_seconds = 60.0 * float(recipe["max_minutes"])
    max_steps = recipe.get("max_steps")
    params = trainable_parameters(draft)
    opt = torch.optim.AdamW(params, lr=float(recipe["lr"]), weight_decay=float(recipe.get("weight_decay", 0.0)),
                            betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(int(recipe.get("seed", 0)))
    order = torch.randperm(len(windows), generator=g)
    target.eval()
    draft.train()
    curve, tokens, step, start = [], 0, 0, time.perf_counter()
    bar = tqdm(total=max_tokens, unit="tok", unit_scale=True, disable=not progress_bar, desc="distil")
    while True:
        elapsed = time.perf_counter() - start
        progress = max(elapsed / max_seconds, tokens / max_tokens)
        if progress >= 1.0 or (max_steps is not None and step >= int(max_steps)):
            break
        idx = order[(step * batch_size + torch.arange(batch_size)) % len(windows)]
        batch = windows[idx].to(target.device)
        with torch.inference_mode():
            t_logits = target(input_ids=batch, use_cache=False).logits
        t_logits = t_logits.clone()  # an inference tensor cannot enter autograd's graph; a clone can
        d_logits = draft(input_ids=batch, use_cache=False).logits
        loss = distill_loss(t_logits, d_logits)
        lr = lr_at(step, progress, float(recipe["lr"]), int(recipe.get("warmup_steps", 0)))
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if recipe.get("grad_clip"):
            torch.nn.utils.clip_grad_norm_(params, float(recipe["grad_clip"]))
        opt.step()
        step += 1
        tokens += batch.numel()
        value = loss.detach().item()
        curve.append({"step": step, "tokens": tokens, "seconds": round(time.perf_counter() - start, 2),
                      "loss": round(value, 5), "lr": lr})
        bar.update(batch.numel())
        bar.set_postfix(loss=f"{value:.3f}")
        if log is not None:
            log(curve[-1])
    bar.close()
    draft.eval()
    for p in draft.parameters():
        p.requires_grad_(False)
    return {"steps": step, "trained_tokens": tokens, "train_seconds": round(time.perf_counter() - start, 2),
            "loss_curve": curve}


def write_draft(draft, tokenizer, report: dict, out_dir: Path) -> None:
    """Write the draft and its report into a temporary folder, then swap it in (bench.cachefile.atomic_dir):
    never a half-written draft folder. `make draft` calls it holding the folder's lock, so two builds do not race."""
    with atomic_dir(out_dir) as tmp:
        draft.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        (tmp / REPORT).write_text(json.dumps(report, indent=2) + "\n")


def read_report(out_dir: Path) -> dict | None:
    """The report of a whole draft folder; None if there is none, or if the folder is damaged (reported in one
    line, so that `make draft` builds it again)."""
    out_dir = Path(out_dir)
    if not (out_dir / "config.json").is_file() or not (out_dir / REPORT).is_file():
        return None
    try:
        check_model_dir(out_dir)
        return json.loads((out_dir / REPORT).read_text())
    except READ_ERRORS as err:
        report_corrupt(f"trained draft {out_dir}", err)
        return None


def summary_line(report: dict) -> str:
    agree = ", ".join(f"{k} {v:.1%}" for k, v in report["agreement"].items())
    before = ", ".join(f"{k} {v:.1%}" for k, v in report["agreement_untrained"].items())
    return (f"draft {report['draft']}: {report['layers']} layers from target layers {report['init_layer_ids']}, "
            f"top-1 agreement with {report['target']} on held-out text: {agree} (untrained: {before}); "
            f"cost per token {report['cost_ratio']:.2f}x the target's "
            f"({1e3 * report['draft_step_s']:.1f} vs {1e3 * report['target_step_s']:.1f} ms); "
            f"{report['trained_tokens']} tokens in {report['train_seconds'] / 60:.1f} min")


def build_draft(target, tokenizer, model_cfg, out_dir: Path, mirror_dir: str | None, cache_dir: str,
                progress_bar: bool = True, log=None) -> dict:
    """Everything `make draft` does for one target: data, init, untrained and trained agreement, training,
    relative cost, atomic write. Returns the report (also in <out_dir>/draft_report.json)."""
    t0 = time.perf_counter()
    recipe = plain(model_cfg.draft.train)
    torch.manual_seed(int(recipe.get("seed", 0)))
    eos = target.generation_config.eos_token_id
    eos = eos if isinstance(eos, int) else (next(iter(eos)) if eos is not None else tokenizer.eos_token_id)
    data = load_draft_data(recipe, tokenizer, str(model_cfg.chat_template), int(eos), mirror_dir, cache_dir)
    windows = pack(data.train, int(recipe["seq_len"]))
    held = heldout_batches(data, int(recipe["seq_len"]), int(recipe["eval_tokens"]), int(recipe["batch_size"]))
    target_top1 = {name: top1(target, batches) for name, batches in held.items()}
    draft = init_draft_from_target(target, int(recipe["layers"]), recipe.get("init_layers"))
    before = {name: agreement_rate(target_top1[name], top1(draft, held[name])) for name in held}
    result = train(target, draft, windows, recipe, log=log, progress_bar=progress_bar)
    after = {name: agreement_rate(target_top1[name], top1(draft, held[name])) for name in held}
    steps = decode_step_seconds({"target": target, "draft": draft}, steps=int(recipe.get("cost_steps", 32)))
    report = {
        "draft": str(model_cfg.draft.get("name") or model_cfg.draft.id),
        "target": str(model_cfg.name),
        "target_source": f"{model_cfg.target.source}:{model_cfg.target.id}",
        "layers": draft.config.num_hidden_layers,
        "target_layers": target.config.num_hidden_layers,
        "init_layer_ids": list(draft.config.draft_layer_ids),
        "agreement": after,
        "agreement_untrained": before,
        "agreement_tokens": {name: sum(b.numel() for b in held[name]) for name in held},
        "cost_ratio": steps["draft"] / steps["target"],
        "target_step_s": steps["target"],
        "draft_step_s": steps["draft"],
        "trained_tokens": result["trained_tokens"],
        "steps": result["steps"],
        "train_seconds": result["train_seconds"],
        "wall_seconds": round(time.perf_counter() - t0, 2),
        "data": data.stats,
        "train_windows": int(windows.shape[0]),
        "device": str(target.device),
        "dtype": str(target.dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "recipe": recipe,
        "loss_curve": result["loss_curve"],
    }
    write_draft(draft, tokenizer, report, out_dir)
    return report

