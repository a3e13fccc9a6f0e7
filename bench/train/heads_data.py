"""Self-distillation data for Medusa heads (`make heads`): prompts no benchmark evaluates, the target's own greedy
responses to them, and the target's final hidden state at every position that predicts a response token.

Prompts: instructions only (the target writes the answers), collected and decontaminated by
bench/train/selfdistill.py `collect_prompts`. Responses: its `answer`, greedy (left-padded batches, up to
`max_new_tokens`, cut after the first EOS). Hidden states (`hidden_states` in the recipe):
- `generate` (default): the final normed hidden state of every decoding step, as `generate` computed it, so no
  second pass over the text. The greedy token at a position is then the generated token itself.
- `teacher_forced`: one forward per batch over prompt+response (right-padded, so no mask is needed), the hidden
  states at the response positions and the lm_head's argmax there as the greedy tokens. On the embedded model this
  costs ~40% of the generation time and matches `generate`'s states to ~2e-5 (tests/test_heads.py checks both).

Stored per split as positions one response after another: position 0 of a response is the prompt's last token,
position n its token n-1; `tokens[n]` is the target's greedy token after position n (response token n).
The result is cached once per target, prompt recipe and `max_new_tokens` in
data/cache/heads/selfdistill/<model>-<hash>/ (bench/train/selfdistill.py `cached`), so retraining the heads never
runs the target again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench.cachefile import CorruptCache, load_keyed_tensors, save_keyed_tensors
from bench.errors import HarnessError
from bench.train.recipes import plain
from bench.train.selfdistill import COUNTS, SPLITS, answer, cached, collect_prompts, end_tokens, target_key

TENSORS = "selfdistill.safetensors"
META = "selfdistill.json"
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
    mode = recipe.get("hidden_states", "generate")
    if mode not in ("generate", "teacher_forced"):
        raise HarnessError(f"unknown heads.train.hidden_states '{mode}' (known: generate, teacher_forced)")
    store = HIDDEN_DTYPES[recipe.get("hidden_dtype", "float16")]
    mismatch = 0

    def keep(rows, out, new, lengths):
        nonlocal mismatch
        if mode == "generate":  # step 0 is the prefill (its last position picks token 0), step k picks token k
            steps = out.hidden_states
            hidden = torch.cat([steps[0][-1][:, -1:]] + [s[-1] for s in steps[1:]], dim=1)
            got = [(hidden[b, :n], new[b, :n]) for b, n in enumerate(lengths)]
        else:
            responses = [new[b, :n].tolist() for b, n in enumerate(lengths)]
            got = teacher_forced(target, [prompts[i] for i in rows], responses, pad)
            mismatch += sum(int((g != new[b, : len(g)]).sum()) for b, (_, g) in enumerate(got))
        return [(h.to("cpu", store), g.to("cpu", torch.long)) for h, g in got]

    parts, st = answer(target, prompts, recipe, eos_ids, pad, keep, desc, progress_bar, do_sample=False,
                       output_hidden_states=mode == "generate")
    generating = st["generate_seconds"]
    stats = {**{name: st[name] for name in COUNTS}, "greedy_mismatch": mismatch,
             "generate_seconds": round(generating, 1), "hidden_seconds": round(st["keep_seconds"], 1),
             "tokens_per_second": round(st["response_tokens"] / max(generating, 1e-9), 1)}
    sizes = torch.tensor([0] + [len(g) for _, g in parts])
    return Positions(torch.cat([h for h, _ in parts]), torch.cat([g for _, g in parts]), sizes.cumsum(0)), stats


def selfdistill_key(model_cfg, recipe: dict) -> dict:
    """The cache key: the target and the recipe's DATA_KEYS."""
    return {**target_key(model_cfg), **{k: recipe.get(k) for k in DATA_KEYS}}


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
    save_keyed_tensors(path, {"key": key, "stats": stats}, tensors, META, TENSORS)
    return SelfDistill(splits["train"], splits["heldout"], stats)


def heads_data(target, tokenizer, model_cfg, recipe, root: Path, mirror_dir: str | None, cache_dir: str,
               progress_bar: bool = True) -> tuple[SelfDistill, Path]:
    """The self-distillation data of this target and recipe: from the cache, else built (once) and cached."""
    recipe = plain(recipe)
    key = selfdistill_key(model_cfg, recipe)
    return cached(root, key, load_selfdistill,
                  lambda p: build_selfdistill(p, key, target, tokenizer, model_cfg, recipe, mirror_dir, cache_dir,
                                              progress_bar), "self-distillation data")
