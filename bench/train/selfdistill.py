"""Self-distillation, shared by the draft (bench/train/draft_data.py) and the heads (bench/train/heads_data.py):
prompts no benchmark evaluates, the target's own answers to them, and the cache that keeps both.

Prompts (`collect_prompts`): read like the draft's sources (data/corpus.py `source_rows`: mirror, package file or
hub; rows split by bench/train/recipes.py `row_split`, e.g. every 8th AlpacaEval row held out) and rendered with the
target's chat template (a source with `chat: false` is raw text instead: its first `prompt_tokens` tokens, for the
target to continue). A prompt sharing a `window_words` window with a prompt or answer of the `disjoint_from`
evaluation sets is dropped, as for the REST datastores.

Answers (`answer`): transformers' `generate` on left-padded batches of `generate_batch_size` prompts (sorted by
length, so similar lengths share a batch), up to `max_new_tokens`, each response cut after its first EOS; the caller
keeps what it needs of each batch's output (the draft: top-k log-probabilities; the heads: hidden states).

Cache (`cached`): one folder per recipe under <root>/selfdistill/<model>-<hash of the key>/, a safetensors file and
a JSON file holding the key (bench.cachefile: built under a lock, written atomically; a damaged or foreign one is
reported in one line and rebuilt), so retraining never runs the target again.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path

import torch

from bench.cachefile import load_or_build
from bench.errors import HarnessError
from bench.models.chat import prompt_ids
from bench.train.recipes import row_split, rows_needed
from data.corpus import OverlapIndex, eval_texts, source_rows

SPLITS = ("train", "heldout")
COUNTS = ("responses", "response_tokens", "ended_by_eos")  # answer()'s counters that both datasets report


def collect_prompts(recipe: dict, tokenizer, chat_template: str, mirror_dir: str | None,
                    cache_dir: str) -> tuple[dict[str, list[list[int]]], dict]:
    """({'train': [prompt ids], 'heldout': [...]}, per-source counts): split by row, decontaminated, at most
    `max_prompt_tokens` long, shuffled (recipe seed) and capped at max_train_prompts / max_heldout_prompts (a cap
    of 0 leaves that split empty: an evaluation-only source)."""
    sources = recipe.get("sources") or []
    if not sources:
        raise HarnessError("heads.train.sources is empty: no prompts to distil from")
    read = {}
    for src in sources:  # every source is found before the (slower) evaluation sets are loaded
        if not src.get("prompt"):
            raise HarnessError(f"heads.train source '{src.get('name')}' has no `prompt` template")
        rows, where = source_rows(f"heads:{src['name']}", {**src, "skip_rows": 0, "max_rows": rows_needed(src)},
                                  mirror_dir)
        read[src["name"]] = (list(rows), where)
    overlap = None
    if recipe.get("disjoint_from"):
        overlap = OverlapIndex(eval_texts(recipe["disjoint_from"], mirror_dir, cache_dir),
                               int(recipe.get("window_words", 12)))
    longest = recipe.get("max_prompt_tokens")
    found: dict[str, list[list[int]]] = {s: [] for s in SPLITS}
    stats: dict = {"sources": {}}
    for src in sources:
        rows, where = read[src["name"]]
        counts = {"where": where, "rows": len(rows), "train": 0, "heldout": 0, "dropped_overlapping_eval": 0,
                  "dropped_too_long": 0}
        stats["sources"][src["name"]] = counts
        for i, row in enumerate(rows):
            split = row_split(src, i)
            if split is None:
                continue
            text = src["prompt"].format(**row)
            if overlap is not None and overlap.hits(text):
                counts["dropped_overlapping_eval"] += 1
                continue
            if src.get("chat", True):
                ids = prompt_ids(tokenizer, chat_template, [], text)
            else:  # raw text: its first `prompt_tokens` tokens, continued by the target (DySpec's C4 prompts)
                ids = tokenizer(text).input_ids
                if len(ids) < int(src["prompt_tokens"]) + 1:
                    counts["dropped_too_short"] = counts.get("dropped_too_short", 0) + 1
                    continue
                ids = ids[: int(src["prompt_tokens"])]
            if longest is not None and len(ids) > int(longest):
                counts["dropped_too_long"] += 1
                continue
            found[split].append(ids)
            counts[split] += 1
    rng = random.Random(int(recipe.get("seed", 0)))
    for split in SPLITS:
        rng.shuffle(found[split])
        cap = recipe.get(f"max_{split}_prompts")
        stats[f"{split}_prompts_available"] = len(found[split])
        found[split] = found[split][: None if cap is None else int(cap)]
    wanted = [s for s in SPLITS if recipe.get(f"max_{s}_prompts") != 0]  # a cap of 0: that split on purpose empty
    if not wanted or any(not found[s] for s in wanted):
        raise HarnessError(f"no prompts left to distil from ({len(found['train'])} training, "
                           f"{len(found['heldout'])} held out, after dropping overlaps)")
    return found, stats


def end_tokens(target, tokenizer) -> tuple[list[int], int]:
    """(EOS ids, pad id) of the target: its generation config, else the tokenizer's."""
    eos = target.generation_config.eos_token_id
    eos = tokenizer.eos_token_id if eos is None else eos
    eos_ids = [int(eos)] if isinstance(eos, int) else [int(e) for e in eos]
    pad = target.generation_config.pad_token_id
    pad = tokenizer.pad_token_id if pad is None else pad
    return eos_ids, int(eos_ids[0] if pad is None else pad)


def response_lengths(new: torch.Tensor, eos_ids: list[int]) -> tuple[list[int], list[bool]]:
    """Per row of generated tokens [B, T]: (tokens up to and including the first EOS, or T; whether it has one)."""
    is_eos = torch.isin(new, torch.tensor(eos_ids, device=new.device))
    ended = is_eos.any(1)
    return torch.where(ended, is_eos.int().argmax(1) + 1, new.shape[1]).tolist(), ended.tolist()


def answer(target, prompts: list[list[int]], recipe: dict, eos_ids: list[int], pad: int, keep, desc: str,
           progress_bar: bool, **generate_args) -> tuple[list, dict]:
    """(one item per prompt, in prompt order; counters): the target's answers to `prompts` (see the module
    docstring), `generate_args` (sampling, what to output) passed to `generate`. `keep(rows, out, new, lengths)`
    turns one batch into its items: `rows` the batch's prompt indices, `out` generate's output, `new` [B, T] the
    generated tokens, `lengths` each row's response length. Counters: responses, response_tokens, ended_by_eos,
    generate_seconds (in `generate`) and keep_seconds (in `keep`)."""
    from tqdm import tqdm

    max_new = int(recipe["max_new_tokens"])
    batch_size = int(recipe.get("generate_batch_size", 16))
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths share a batch
    items: list = [None] * len(prompts)
    st = {"responses": len(prompts), "response_tokens": 0, "ended_by_eos": 0, "generate_seconds": 0.0,
          "keep_seconds": 0.0}
    bar = tqdm(total=len(prompts), unit="prompt", desc=desc, disable=not progress_bar)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = max(len(prompts[i]) for i in rows)
        ids = torch.tensor([[pad] * (width - len(prompts[i])) + prompts[i] for i in rows], device=target.device)
        mask = torch.tensor([[0] * (width - len(prompts[i])) + [1] * len(prompts[i]) for i in rows],
                            device=target.device)
        t0 = time.perf_counter()
        out = target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, eos_token_id=eos_ids,
                              pad_token_id=pad, return_dict_in_generate=True, **generate_args)
        new = out.sequences[:, width:]
        lengths, ended = response_lengths(new, eos_ids)
        t1 = time.perf_counter()
        for i, item in zip(rows, keep(rows, out, new, lengths), strict=True):
            items[i] = item
        st["response_tokens"] += sum(lengths)
        st["ended_by_eos"] += sum(ended)
        st["generate_seconds"] += t1 - t0
        st["keep_seconds"] += time.perf_counter() - t1
        bar.update(len(rows))
        bar.set_postfix(tok_s=f"{st['response_tokens'] / max(st['generate_seconds'], 1e-9):.0f}")
    bar.close()
    return items, st


def target_key(model_cfg) -> dict:
    """What every self-distillation cache key holds of the target: name, weights, dtype and chat template."""
    target = model_cfg.target
    return {"model": str(model_cfg.name), "target": f"{target.source}:{target.id}", "dtype": str(model_cfg.dtype),
            "chat_template": str(model_cfg.chat_template)}


def cache_path(root: Path, key: dict) -> Path:
    """<root>/selfdistill/<model>-<first 10 hex digits of the key's SHA-1>."""
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    return Path(root) / "selfdistill" / f"{key['model']}-{digest}"


def cached(root: Path, key: dict, load, build, what: str):
    """(data, its folder): `load(folder, key)` from the cache, else `build(folder)` (which writes it), at most one
    process building (bench.cachefile.load_or_build; `what` names it when a damaged one is rebuilt)."""
    path = cache_path(root, key)
    return load_or_build(path, lambda p: load(p, key), build, what), path
