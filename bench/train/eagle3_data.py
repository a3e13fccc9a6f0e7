"""EAGLE-3 training data (`make eagle3`): the target's states at every position of text, from one forward.

Sources (the model config's `eagle3.train.data.sources`), each giving sequences and the position their loss starts:
- `answers`: instructions the target answers greedily (selfdistill.collect_prompts and answer: decontaminated,
  split by row), the loss on the answer: what decoding will ask of the head, at the price of generating it;
- `reference`: an instruction and the source's own written answer (AlpacaEval's `output`), chat-rendered, the loss
  on the answer; `raw` (no `prompt`): plain text cut to `max_tokens`, the loss everywhere. Both need one forward
  only, several times cheaper per position than generating (the report says how much).
The head learns the target's distribution wherever the text came from, so text the target did not write still
teaches it; how much per minute is what `scripts/eagle3_mix.py` measures.

Every sequence goes through one teacher-forced forward of the target (right-padded batches: causal, so padding
changes nothing before it), which keeps per position the input states of the head's three layers [3H] and the final
normed state [H] (the target's distribution is its lm_head over it, computed when training), float16.
Stored per split, sequence after sequence: `ids`, `fused`, `final` per position, `offsets`, and per sequence its
first loss position `loss_from` (the position whose next token is the first one learnt) and `source`. Cached per
target, layers and data recipe under data/cache/eagle3/data/<model>-<hash>/ (bench.cachefile.load_or_build), so retraining or
measuring another mix never runs the target again.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench.cachefile import CorruptCache, load_keyed_tensors, load_or_build, save_keyed_tensors
from bench.errors import HarnessError
from bench.models.chat import prompt_ids
from bench.train.recipes import plain, row_split, rows_needed
from bench.train.selfdistill import SPLITS, answer, cache_path, collect_prompts, end_tokens, target_key
from data.corpus import OverlapIndex, eval_texts, source_rows

TENSORS, META = "eagle3data.safetensors", "eagle3data.json"
FIELDS = ("ids", "fused", "final", "offsets", "loss_from", "source")
KINDS = ("answers", "reference", "raw")


@dataclass
class Split:
    """One split's positions, sequence after sequence (see the module docstring)."""

    ids: torch.Tensor  # [N] the token at each position
    fused: torch.Tensor  # [N, 3H] the three layers' input states
    final: torch.Tensor  # [N, H] the final normed state (the target's next-token distribution through its lm_head)
    offsets: torch.Tensor  # [S + 1] sequence s holds positions offsets[s]:offsets[s + 1]
    loss_from: torch.Tensor  # [S] first position (in the sequence) whose next token is learnt
    source: torch.Tensor  # [S] index into the recipe's sources

    def spans(self, min_len: int = 2, source: int | None = None) -> list[tuple[int, int, int]]:
        """(start, stop, loss_from) of its sequences with at least `min_len` positions (of one source if given)."""
        off, lf, src = self.offsets.tolist(), self.loss_from.tolist(), self.source.tolist()
        return [(off[s], off[s + 1], lf[s]) for s in range(len(lf))
                if off[s + 1] - off[s] >= min_len and (source is None or src[s] == source)]


@dataclass
class Eagle3Data:
    train: Split
    heldout: Split
    stats: dict = field(default_factory=dict)


def kind_of(src: dict) -> str:
    kind = src.get("kind", "raw" if not src.get("prompt") else "reference")
    if kind not in KINDS:
        raise HarnessError(f"eagle3.train.data source '{src.get('name')}': unknown kind '{kind}' (known: "
                           f"{', '.join(KINDS)})")
    return kind


def text_sequences(src: dict, tokenizer, chat_template: str, overlap, eos: int, mirror_dir) -> dict:
    """{split: [(ids, loss_from)]} of a `reference` or `raw` source, decontaminated, cut to max_tokens."""
    rows, _ = source_rows(f"eagle3:{src['name']}", {**src, "skip_rows": 0, "max_rows": rows_needed(src)}, mirror_dir)
    longest = int(src.get("max_tokens", 512))
    out: dict = {s: [] for s in SPLITS}
    for i, row in enumerate(rows):
        split = row_split(src, i)
        if split is None:
            continue
        if src.get("prompt"):
            question, reply = src["prompt"].format(**row), src["response"].format(**row)
            if overlap is not None and overlap.hits(f"{question}\n{reply}"):
                continue
            prompt = prompt_ids(tokenizer, chat_template, [], question)
            ids, start = prompt + tokenizer(reply, add_special_tokens=False).input_ids + [eos], len(prompt) - 1
        else:
            text = src["text"].format(**row)
            if overlap is not None and overlap.hits(text):
                continue
            ids, start = tokenizer(text).input_ids, 0
        if len(ids) - start >= 8:  # a few tokens to learn at least
            out[split].append((ids[:longest], start))
    return out


def answer_sequences(src: dict, recipe: dict, target, tokenizer, chat_template: str, mirror_dir, cache_dir,
                     progress_bar: bool) -> tuple[dict, dict]:
    """{split: [(prompt + greedy answer, loss_from)]} of an `answers` source, and generation counters."""
    sub = {**{k: recipe.get(k) for k in ("disjoint_from", "window_words", "seed")}, "sources": [src],
           "max_train_prompts": src.get("train"), "max_heldout_prompts": src.get("heldout"),
           "max_prompt_tokens": src.get("max_prompt_tokens", 256)}
    prompts, _ = collect_prompts(sub, tokenizer, chat_template, mirror_dir, cache_dir)
    eos_ids, pad = end_tokens(target, tokenizer)
    gen = {"max_new_tokens": int(src.get("max_new_tokens", 160)),
           "generate_batch_size": int(src.get("generate_batch_size", 16))}
    out, stats = {}, {}
    for s in SPLITS:
        replies, st = answer(target, prompts[s], gen, eos_ids, pad, lambda r, o, new, n: [
            new[b, :k].tolist() for b, k in enumerate(n)], f"{src['name']} answers ({s})", progress_bar,
            do_sample=False)
        out[s] = [(p + a, len(p) - 1) for p, a in zip(prompts[s], replies, strict=True)]
        stats[s] = {"answer_tokens": st["response_tokens"], "generate_seconds": round(st["generate_seconds"], 1)}
    return out, stats


@torch.inference_mode()
def forward_states(target, seqs: list[list[int]], layers, batch_tokens: int, pad: int, dtype, desc: str,
                   progress_bar: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(fused [N, 3H], final [N, H]) over every position of `seqs`, in order: one forward per right-padded batch."""
    from tqdm import tqdm

    base = getattr(target, target.base_model_prefix)
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    parts: list = [None] * len(seqs)
    bar = tqdm(total=sum(map(len, seqs)), unit="tok", desc=desc, disable=not progress_bar)
    start = 0
    while start < len(order):
        stop = start + 1  # sorted by length: the batch's last sequence is its longest
        while stop < len(order) and (stop + 1 - start) * len(seqs[order[stop]]) <= batch_tokens:
            stop += 1
        rows = order[start:stop]
        width = len(seqs[rows[-1]])
        ids = torch.tensor([seqs[i] + [pad] * (width - len(seqs[i])) for i in rows], device=target.device)
        hs = base(input_ids=ids, use_cache=False, output_hidden_states=True).hidden_states  # [i]: layer i's input
        fused = torch.cat([hs[i] for i in layers], -1)
        for b, i in enumerate(rows):
            n = len(seqs[i])
            parts[i] = (fused[b, :n].to("cpu", dtype), hs[-1][b, :n].to("cpu", dtype))
        bar.update(sum(len(seqs[i]) for i in rows))
        start = stop
    bar.close()
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def build_split(target, seqs: list, sources: list[int], layers, recipe: dict, pad: int, desc: str,
                progress_bar: bool) -> Split:
    dtype = {"float16": torch.float16, "float32": torch.float32}[recipe.get("dtype", "float16")]
    fused, final = forward_states(target, [s for s, _ in seqs], layers, int(recipe.get("forward_batch_tokens", 2048)),
                                  pad, dtype, desc, progress_bar)
    lengths = torch.tensor([0] + [len(s) for s, _ in seqs])
    return Split(torch.tensor([t for s, _ in seqs for t in s]), fused, final, lengths.cumsum(0),
                 torch.tensor([start for _, start in seqs]), torch.tensor(sources))


def build_data(path: Path, key: dict, target, tokenizer, model_cfg, recipe: dict, layers, mirror_dir, cache_dir,
               progress_bar: bool) -> Eagle3Data:
    t0 = time.perf_counter()
    chat = str(model_cfg.chat_template)
    eos_ids, pad = end_tokens(target, tokenizer)
    overlap = None
    if recipe.get("disjoint_from"):
        overlap = OverlapIndex(eval_texts(recipe["disjoint_from"], mirror_dir, cache_dir),
                               int(recipe.get("window_words", 12)))
    rng = random.Random(int(recipe.get("seed", 0)))
    found: dict = {s: [] for s in SPLITS}
    stats: dict = {"sources": {}}
    for index, src in enumerate(recipe["sources"]):
        t1 = time.perf_counter()
        st: dict = {"kind": kind_of(src)}
        if st["kind"] == "answers":
            seqs, st["generation"] = answer_sequences(src, recipe, target, tokenizer, chat, mirror_dir, cache_dir,
                                                      progress_bar)
        else:
            seqs = text_sequences(src, tokenizer, chat, overlap, eos_ids[0], mirror_dir)
            for s in SPLITS:
                rng.shuffle(seqs[s])
                seqs[s] = seqs[s][: src.get("train" if s == "train" else "heldout")]
        st["collect_seconds"] = round(time.perf_counter() - t1, 1)
        for s in SPLITS:
            st[s] = {"sequences": len(seqs[s]), "positions": sum(len(x) for x, _ in seqs[s]),
                     "loss_positions": sum(len(x) - start for x, start in seqs[s])}
            found[s] += [(x, start, index) for x, start in seqs[s]]
        stats["sources"][src["name"]] = st
    splits = {}
    for s in SPLITS:
        if not found[s]:
            raise HarnessError(f"eagle3.train.data: no {s} sequences from any source")
        t1 = time.perf_counter()
        splits[s] = build_split(target, [(x, start) for x, start, _ in found[s]], [i for *_, i in found[s]], layers,
                                recipe, pad, f"target states ({s})", progress_bar)
        stats[f"{s}_forward_seconds"] = round(time.perf_counter() - t1, 1)
    stats["build_seconds"] = round(time.perf_counter() - t0, 1)
    tensors = {f"{s}.{name}": getattr(splits[s], name).contiguous() for s in SPLITS for name in FIELDS}
    save_keyed_tensors(path, {"key": key, "stats": stats}, tensors, META, TENSORS)
    return Eagle3Data(splits["train"], splits["heldout"], stats)


def load_data(path: Path, key: dict) -> Eagle3Data:
    """A cached data folder; a damaged or foreign one raises one of bench.cachefile.READ_ERRORS."""
    meta, tensors = load_keyed_tensors(path, key, META, TENSORS)
    splits = {}
    for s in SPLITS:
        split = Split(*(tensors[f"{s}.{name}"] for name in FIELDS))
        n = split.ids.shape[0]
        if split.fused.shape[0] != n or split.final.shape[0] != n or int(split.offsets[-1]) != n:
            raise CorruptCache(f"{s}: {n} positions, {split.fused.shape[0]} states, offsets up to "
                               f"{int(split.offsets[-1])}")
        splits[s] = split
    return Eagle3Data(splits["train"], splits["heldout"], meta["stats"])


def eagle3_data(target, tokenizer, model_cfg, recipe, layers, root: Path, mirror_dir: str | None, cache_dir: str,
                progress_bar: bool = True) -> tuple[Eagle3Data, Path]:
    """The data of this target, its fused layers and the data recipe: from the cache, else built once."""
    recipe = plain(recipe)
    if not recipe.get("sources"):
        raise HarnessError("eagle3.train.data.sources is empty: nothing to train on")
    key = {**target_key(model_cfg), "layers": [int(i) for i in layers], "data": recipe}
    path = Path(root) / "data" / cache_path(Path(root), key).name  # <model>-<hash of the key>
    data = load_or_build(path, lambda p: load_data(p, key), lambda p: build_data(
        p, key, target, tokenizer, model_cfg, recipe, layers, mirror_dir, cache_dir, progress_bar),
        "EAGLE-3 training data")
    return data, path
