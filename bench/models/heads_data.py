"""Self-distillation data for Medusa heads (`make heads`): prompts no benchmark evaluates, the target's own greedy
responses to them, and the target's final hidden state at every position that predicts a response token.

Prompts: instructions only (the target writes the answers), read like the draft's sources (data/corpus.py
`source_rows`: mirror, package file or hub; rows split by bench/models/recipes.py `row_split`, e.g. every 8th
AlpacaEval row held out) and rendered with the target's chat template (a source with `chat: false` is raw text
instead: its first `prompt_tokens` tokens, for the target to continue). A prompt sharing a `window_words` window
with a prompt or answer of the `disjoint_from` evaluation sets is dropped, as for the REST datastores.

Responses: HF `generate`, greedy, left-padded batches (prompts sorted by length), up to `max_new_tokens`, cut
after the first EOS. Hidden states (`hidden_states` in the recipe):
- `generate` (default): the final normed hidden state of every decoding step, as `generate` computed it, so no
  second pass over the text. The greedy token at a position is then the generated token itself.
- `teacher_forced`: one forward per batch over prompt+response (right-padded, so no mask is needed), the hidden
  states at the response positions and the lm_head's argmax there as the greedy tokens. On the embedded model this
  costs ~40% of the generation time and matches `generate`'s states to ~2e-5 (tests/test_heads.py checks both).

Stored per split as positions one response after another: position 0 of a response is the prompt's last token,
position n its token n-1; `tokens[n]` is the target's greedy token after position n (response token n).
The result is cached once per target, prompt recipe and `max_new_tokens` in
data/cache/heads/selfdistill/<model>-<hash>/ (bench.cachefile: built under a lock, written atomically; a damaged
cache is reported in one line and rebuilt), so retraining the heads never runs the target again.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench.cachefile import CorruptCache, atomic_dir, load_keyed_tensors, load_or_build
from bench.errors import HarnessError
from bench.models.chat import prompt_ids
from bench.models.recipes import plain, row_split, rows_needed
from data.corpus import OverlapIndex, eval_texts, source_rows

TENSORS = "selfdistill.safetensors"
META = "selfdistill.json"
SPLITS = ("train", "heldout")
# Recipe keys that change the data (the cache key); training keys (lr, steps...) do not.
DATA_KEYS = ("sources", "disjoint_from", "window_words", "max_train_prompts", "max_heldout_prompts",
             "max_prompt_tokens", "max_new_tokens", "hidden_states", "hidden_dtype", "seed")
HIDDEN_DTYPES = {"float16": torch.float16, "float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class Positions:
    """One split: the positions of its responses, one response after another (see the module docstring)."""

    hidden: torch.Tensor  # [N, H] the target's final normed hidden state at each position
    tokens: torch.Tensor  # [N] long: the target's greedy token after each position
    offsets: torch.Tensor  # [responses + 1] long: response r holds positions offsets[r]:offsets[r + 1]


@dataclass
class SelfDistill:
    train: Positions
    heldout: Positions
    stats: dict = field(default_factory=dict)


def collect_prompts(recipe: dict, tokenizer, chat_template: str, mirror_dir: str | None,
                    cache_dir: str) -> tuple[dict[str, list[list[int]]], dict]:
    """({'train': [prompt ids], 'heldout': [...]}, per-source counts): split by row, decontaminated, at most
    `max_prompt_tokens` long, shuffled (recipe seed) and capped at max_train_prompts / max_heldout_prompts."""
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
    if not found["train"] or not found["heldout"]:
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


def teacher_forced(target, prompts: list[list[int]], responses: list[list[int]], pad: int):
    """[(hidden [R, H], greedy [R])] per response: one forward over the right-padded prompt+response batch."""
    seqs = [p + r for p, r in zip(prompts, responses, strict=True)]
    width = max(map(len, seqs))
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs], device=target.device)
    base = getattr(target, target.base_model_prefix)
    hidden = base(input_ids=ids, use_cache=False).last_hidden_state  # final norm applied
    out = []
    for b, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        h = hidden[b, len(p) - 1 : len(p) - 1 + len(r)]
        out.append((h, target.get_output_embeddings()(h).argmax(-1)))
    return out


@torch.inference_mode()
def distil_responses(target, prompts: list[list[int]], recipe: dict, eos_ids: list[int], pad: int,
                     desc: str = "responses", progress_bar: bool = True) -> tuple[Positions, dict]:
    """The target's greedy responses to `prompts` and its hidden states at their positions (prompt order kept)."""
    from tqdm import tqdm

    max_new = int(recipe["max_new_tokens"])
    batch_size = int(recipe.get("generate_batch_size", 16))
    mode = recipe.get("hidden_states", "generate")
    if mode not in ("generate", "teacher_forced"):
        raise HarnessError(f"unknown heads.train.hidden_states '{mode}' (known: generate, teacher_forced)")
    store = HIDDEN_DTYPES[recipe.get("hidden_dtype", "float16")]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths share a batch
    parts: list = [None] * len(prompts)
    st = {"responses": len(prompts), "response_tokens": 0, "ended_by_eos": 0, "greedy_mismatch": 0,
          "generate_seconds": 0.0, "hidden_seconds": 0.0}
    bar = tqdm(total=len(prompts), unit="prompt", desc=desc, disable=not progress_bar)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = max(len(prompts[i]) for i in rows)
        ids = torch.tensor([[pad] * (width - len(prompts[i])) + prompts[i] for i in rows], device=target.device)
        mask = torch.tensor([[0] * (width - len(prompts[i])) + [1] * len(prompts[i]) for i in rows],
                            device=target.device)
        t0 = time.perf_counter()
        out = target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                              eos_token_id=eos_ids, pad_token_id=pad, return_dict_in_generate=True,
                              output_hidden_states=mode == "generate")
        new = out.sequences[:, width:]
        lengths, ended = response_lengths(new, eos_ids)
        t1 = time.perf_counter()
        if mode == "generate":  # step 0 is the prefill (its last position picks token 0), step k picks token k
            steps = out.hidden_states
            hidden = torch.cat([steps[0][-1][:, -1:]] + [s[-1] for s in steps[1:]], dim=1)
            got = [(hidden[b, :n], new[b, :n]) for b, n in enumerate(lengths)]
        else:
            responses = [new[b, :n].tolist() for b, n in enumerate(lengths)]
            got = teacher_forced(target, [prompts[i] for i in rows], responses, pad)
            st["greedy_mismatch"] += sum(int((g != new[b, : len(g)]).sum()) for b, (_, g) in enumerate(got))
        for i, (h, g) in zip(rows, got, strict=True):
            parts[i] = (h.to("cpu", store), g.to("cpu", torch.long))
        st["ended_by_eos"] += sum(ended)
        st["response_tokens"] += sum(lengths)
        st["generate_seconds"] += t1 - t0
        st["hidden_seconds"] += time.perf_counter() - t1
        bar.update(len(rows))
        bar.set_postfix(tok_s=f"{st['response_tokens'] / max(st['generate_seconds'], 1e-9):.0f}")
    bar.close()
    st["tokens_per_second"] = round(st["response_tokens"] / max(st["generate_seconds"], 1e-9), 1)
    st["generate_seconds"], st["hidden_seconds"] = round(st["generate_seconds"], 1), round(st["hidden_seconds"], 1)
    sizes = torch.tensor([0] + [len(g) for _, g in parts])
    return Positions(torch.cat([h for h, _ in parts]), torch.cat([g for _, g in parts]), sizes.cumsum(0)), st


def selfdistill_key(model_cfg, recipe: dict) -> dict:
    target = model_cfg.target
    return {"model": str(model_cfg.name), "target": f"{target.source}:{target.id}", "dtype": str(model_cfg.dtype),
            "chat_template": str(model_cfg.chat_template), **{k: recipe.get(k) for k in DATA_KEYS}}


def selfdistill_path(root: Path, key: dict) -> Path:
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    return Path(root) / "selfdistill" / f"{key['model']}-{digest}"


def load_selfdistill(path: Path, key: dict) -> SelfDistill:
    """A cached data folder; a damaged or foreign one raises one of bench.cachefile.READ_ERRORS."""
    meta, tensors = load_keyed_tensors(path, key, META, TENSORS)
    splits = {}
    for s in SPLITS:
        pos = Positions(tensors[f"{s}.hidden"], tensors[f"{s}.tokens"].long(), tensors[f"{s}.offsets"].long())
        n = pos.tokens.shape[0]
        if pos.hidden.shape[0] != n or int(pos.offsets[0]) != 0 or int(pos.offsets[-1]) != n:
            raise CorruptCache(f"{s}: {pos.hidden.shape[0]} hidden states, {n} tokens, offsets up to "
                               f"{int(pos.offsets[-1])}")
        splits[s] = pos
    return SelfDistill(splits["train"], splits["heldout"], meta["stats"])


def build_selfdistill(path: Path, key: dict, target, tokenizer, model_cfg, recipe: dict, mirror_dir: str | None,
                      cache_dir: str, progress_bar: bool = True) -> SelfDistill:
    from safetensors.torch import save_file

    t0 = time.perf_counter()
    prompts, stats = collect_prompts(recipe, tokenizer, str(model_cfg.chat_template), mirror_dir, cache_dir)
    eos_ids, pad = end_tokens(target, tokenizer)
    splits = {}
    for s in SPLITS:
        splits[s], stats[s] = distil_responses(target, prompts[s], recipe, eos_ids, pad, f"responses ({s})",
                                               progress_bar)
    stats["build_seconds"] = round(time.perf_counter() - t0, 1)
    tensors = {f"{s}.{name}": getattr(splits[s], name).contiguous() for s in SPLITS
               for name in ("hidden", "tokens", "offsets")}
    with atomic_dir(path) as tmp:
        save_file(tensors, str(tmp / TENSORS))
        (tmp / TENSORS).chmod(0o644)  # safetensors writes 0600
        (tmp / META).write_text(json.dumps({"key": key, "stats": stats}, indent=2) + "\n")
    return SelfDistill(splits["train"], splits["heldout"], stats)


def selfdistill(target, tokenizer, model_cfg, recipe, root: Path, mirror_dir: str | None, cache_dir: str,
                progress_bar: bool = True) -> tuple[SelfDistill, Path]:
    """The self-distillation data of this target and recipe: from the cache, else built (once) and cached."""
    recipe = plain(recipe)
    key = selfdistill_key(model_cfg, recipe)
    path = selfdistill_path(root, key)
    data = load_or_build(path, lambda p: load_selfdistill(p, key),
                         lambda p: build_selfdistill(p, key, target, tokenizer, model_cfg, recipe, mirror_dir,
                                                     cache_dir, progress_bar), "self-distillation data")
    return data, path
