"""ProPD's early prediction heads: one next-token head per early decoder layer n, for pruning draft trees inside
the target forward (methods/propd) and for the paper's Figure 3(a) (top-k accuracy of early layers).

Head n reads the hidden state after layer n passed through the target's final norm and predicts the next token:
a residual SiLU block (zero-initialised: untrained, it is the "logit lens" of that layer) and the target's frozen
lm_head, i.e. Medusa's head design (bench/models/heads.py) with one head per layer instead of one per offset.

Data: the Medusa heads' self-distillation set (bench/train/heads_data.py: the target's greedy responses to
decontaminated AlpacaEval instructions; same prompts, same order, cached once) re-read with one teacher-forced
forward per batch to get every early layer's states at the response positions; labels are the target's greedy
tokens. Trained and written by `make heads` after the Medusa heads (scripts/train_heads.py) into
data/cache/heads/<id>/ with `early_heads_report.json`: held-out top-k accuracy for k = 1..max_k per layer, trained
and untrained, and the loss curve. The recipe is the model config's `early_heads.train` block.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from bench.errors import HarnessError
from bench.models.heads import EARLY_REPORT, init_heads
from bench.train.heads import as_dtype_of, float32_copy, train_heads, write_heads
from bench.train.heads_data import heads_data
from bench.train.recipes import plain
from bench.train.selfdistill import collect_prompts

REPORT = EARLY_REPORT


@torch.inference_mode()
def layer_states(target, prompts: list[list[int]], tokens: torch.Tensor, offsets: torch.Tensor, layers: list[int],
                 batch_size: int, desc: str, progress_bar: bool = True) -> torch.Tensor:
    """[len(layers), N, H] float16: norm(state after layer n) at every response position (position 0 of a
    response is the prompt's last token), one right-padded teacher-forced forward per batch."""
    from tqdm import tqdm

    base, out = target.get_decoder(), []
    pad = 0  # right padding sits after every sequence: causal attention never lets a real position see it
    for start in tqdm(range(0, len(prompts), batch_size), desc=desc, unit="batch", disable=not progress_bar):
        rows = range(start, min(start + batch_size, len(prompts)))
        seqs = [prompts[r] + tokens[offsets[r] : offsets[r + 1]].tolist() for r in rows]
        width = max(map(len, seqs))
        ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs], device=target.device)
        states = base(input_ids=ids, use_cache=False, output_hidden_states=True).hidden_states
        for b, r in enumerate(rows):
            first, n = len(prompts[r]) - 1, int(offsets[r + 1] - offsets[r])
            out.append(torch.stack([base.norm(states[layer][b, first : first + n]) for layer in layers]).half().cpu())
    return torch.cat(out, dim=1)


@torch.inference_mode()
def topk_accuracy(heads, states: torch.Tensor, labels: torch.Tensor, max_k: int, chunk: int = 512) -> list[list[float]]:
    """Per head: the share of positions whose label is in the head's top-k, for k = 1..max_k (the label's rank
    is the number of tokens scored higher)."""
    param = next(iter(heads.parameters()))
    out = []
    for i in range(states.shape[0]):
        ranks = []
        for s in range(0, labels.shape[0], chunk):
            logits = heads.head(i, states[i, s : s + chunk].to(param.device, param.dtype)).float()
            y = labels[s : s + chunk].to(param.device)
            ranks.append((logits > logits.gather(1, y[:, None])).sum(1).cpu())
        rank = torch.cat(ranks)
        out.append([round(float((rank < k).float().mean()), 4) for k in range(1, max_k + 1)])
    return out


def subset(positions, prompts: list[list[int]], count: int):
    """The first `count` responses of a split: (prompts, tokens, offsets)."""
    count = min(count, len(prompts))
    end = int(positions.offsets[count])
    return prompts[:count], positions.tokens[:end], positions.offsets[: count + 1]


def build_early_heads(target, tokenizer, model_cfg, out_dir: Path, mirror_dir: str | None, cache_dir: str,
                      progress_bar: bool = True, log=None) -> dict:
    """Everything `make heads` does for the early heads: states (one teacher-forced pass over the Medusa heads'
    data), untrained and trained held-out top-k accuracy, training, atomic write. Returns the report."""
    t0 = time.perf_counter()
    cfg, data_recipe = model_cfg.early_heads, plain(model_cfg.heads.train)
    recipe = plain(cfg.train)
    layers = [int(n) for n in cfg.layers]
    n_layers = target.config.num_hidden_layers
    if not layers or any(not 1 <= n < n_layers for n in layers):
        raise HarnessError(f"early_heads.layers {layers}: each must be between 1 and {n_layers - 1}")
    torch.manual_seed(int(recipe.get("seed", 0)))
    data, data_path = heads_data(target, tokenizer, model_cfg, data_recipe, Path(out_dir).parent, mirror_dir,
                                  cache_dir, progress_bar)
    prompts, _ = collect_prompts(data_recipe, tokenizer, str(model_cfg.chat_template), mirror_dir, cache_dir)
    batch = int(recipe.get("forward_batch_size", 8))
    split = {}
    for name, count in (("train", recipe["max_train_prompts"]), ("heldout", recipe["max_heldout_prompts"])):
        p, tokens, offsets = subset(getattr(data, name), prompts[name], int(count))
        split[name] = (layer_states(target, p, tokens, offsets, layers, batch, f"early states ({name})",
                                    progress_bar), tokens)
    lm_head = target.get_output_embeddings()
    work = lm_head if lm_head.weight.dtype == torch.float32 else float32_copy(lm_head)
    heads = init_heads(work, len(layers))
    max_k = int(recipe.get("max_k", 200))
    held_states, held_labels = split["heldout"]
    before = topk_accuracy(heads, held_states, held_labels, max_k)
    train_states, train_labels = split["train"]
    result = train_heads(heads, train_states, train_labels.expand(len(layers), -1), recipe, log=log,
                         progress_bar=progress_bar)
    after = topk_accuracy(heads, held_states, held_labels, max_k)
    if work is not lm_head:
        heads = as_dtype_of(heads, lm_head)
    report = {
        "heads": str(cfg.id), "target": str(model_cfg.name),
        "target_source": f"{model_cfg.target.source}:{model_cfg.target.id}",
        "layers": layers, "k": list(range(1, max_k + 1)),
        "accuracy": {str(n): acc for n, acc in zip(layers, after, strict=True)},
        "accuracy_untrained": {str(n): acc for n, acc in zip(layers, before, strict=True)},
        "positions": {"train": int(train_labels.numel()), "heldout": int(held_labels.numel())},
        **result,
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "data": {"cache": str(data_path), "train_prompts": len(prompts["train"]), "recipe": data_recipe},
        "recipe": recipe,
        "dtype": str(target.dtype).replace("torch.", ""),
    }
    write_heads(heads, report, out_dir, REPORT, {"layers": layers})
    return report


def read_early_report(out_dir: Path) -> dict | None:
    path = Path(out_dir) / REPORT
    try:
        return json.loads(path.read_text()) if path.is_file() and (Path(out_dir) / "heads.json").is_file() else None
    except (OSError, ValueError):
        return None


def summary(report: dict) -> str:
    lines = [(f"early heads {report['heads']} for {report['target']}: layers {report['layers']}, "
             f"{report['positions']['train']} training / {report['positions']['heldout']} held-out positions, "
             f"{report['steps']} steps in {report['train_seconds'] / 60:.1f} min")]
    for n in report["layers"]:
        acc, raw = report["accuracy"][str(n)], report["accuracy_untrained"][str(n)]
        lines.append(f"  layer {n}: " + "  ".join(f"top-{k} {acc[k - 1]:.1%} ({raw[k - 1]:.1%})"
                                                  for k in (1, 10, 50, 200) if k <= len(acc)))
    return "\n".join(lines)
