"""Self-distillation data for a draft (`make draft`): the target's own responses and its top-k next-token
distribution at every response position.

A draft earns its keep by predicting what the target will write at decode time, so it trains on the target's own
trajectories: per source (chat instructions, code prompts, raw text to continue), prompts no benchmark evaluates
(selfdistill.collect_prompts: split by row, decontaminated by 12-word windows against `disjoint_from`), answered by
the target greedily (`greedy` prompts per source) and by sampling at `temperature` (`sampled` prompts: other
plausible continuations, so the draft also sees states greedy decoding does not reach). Held-out prompts are
answered greedily only: agreement on them is agreement on what greedy decoding will ask of the draft.

Generation is selfdistill.answer: transformers' batched `generate` (left-padded, prompts sorted by length), with
`output_logits`, so the target's logits at each response position come with the tokens, without a second pass;
only their top `topk` are kept (log-probabilities of the full softmax, float16), which is all the loss needs.

Stored per split, sequence after sequence: `ids` (prompt then response, int32) with `offsets`, `prompt_lens`,
`source` (index into the recipe's sources) and `sampled`; `topk_ids`/`topk_logp` [positions, topk] for the
response positions (`resp_offsets` per sequence): row j of sequence s is the target's distribution over
response token j, i.e. after ids[prompt_len - 1 + j]. Cached once per target and data recipe under
data/cache/drafts/selfdistill/ (selfdistill.cached: built under a lock, written atomically, a damaged cache is
reported and rebuilt).
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

TENSORS = "draftdata.safetensors"
META = "draftdata.json"
FIELDS = ("ids", "offsets", "prompt_lens", "source", "sampled", "topk_ids", "topk_logp", "resp_offsets")


@dataclass
class Sequences:
    """One split: prompt+response sequences and the target's top-k at their response positions."""

    ids: torch.Tensor  # [total tokens] int32
    offsets: torch.Tensor  # [S + 1] long
    prompt_lens: torch.Tensor  # [S] long
    source: torch.Tensor  # [S] long: index into the recipe's sources
    sampled: torch.Tensor  # [S] bool: answered by sampling (else greedily)
    topk_ids: torch.Tensor  # [N, k] int32: N = all response tokens
    topk_logp: torch.Tensor  # [N, k] float16
    resp_offsets: torch.Tensor  # [S + 1] long

    def __len__(self) -> int:
        return len(self.prompt_lens)

    def sequence(self, s: int) -> tuple[list[int], int, slice]:
        """(prompt+response ids, prompt length, rows of topk_*) of sequence s."""
        ids = self.ids[int(self.offsets[s]) : int(self.offsets[s + 1])].tolist()
        return ids, int(self.prompt_lens[s]), slice(int(self.resp_offsets[s]), int(self.resp_offsets[s + 1]))

    def responses(self, where: torch.Tensor | None = None) -> torch.Tensor:
        """The response tokens (the target's choices) of every sequence, or of those where `where` is true."""
        keep = range(len(self)) if where is None else torch.nonzero(where).flatten().tolist()
        parts = []
        for s in keep:
            ids, p, _ = self.sequence(s)
            parts.append(torch.tensor(ids[p:], dtype=torch.long))
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)


@dataclass
class DraftData:
    train: Sequences
    heldout: Sequences
    sources: list[str]
    stats: dict = field(default_factory=dict)


def generate(target, prompts: list[list[int]], recipe: dict, eos_ids: list[int], pad: int, sample: bool,
             desc: str, progress_bar: bool) -> tuple[list[tuple[list[int], list[int], torch.Tensor, torch.Tensor]], dict]:
    """Per prompt (in order): (prompt, response, top-k ids, top-k log-probs) of the target's answer."""
    k = int(recipe["topk"])

    def keep(rows, out, new, lengths):
        logp = torch.log_softmax(torch.stack(out.logits, dim=1).float(), dim=-1)  # raw logits: T = 1, no top-k
        top = logp.topk(k, dim=-1)
        return [(prompts[i], new[b, :n].tolist(), top.indices[b, :n].to("cpu", torch.int32),
                 top.values[b, :n].to("cpu", torch.float16))
                for b, (i, n) in enumerate(zip(rows, lengths, strict=True))]

    how = {"do_sample": True, "temperature": float(recipe["temperature"]), "top_k": 0, "top_p": 1.0} \
        if sample else {"do_sample": False}
    out, st = answer(target, prompts, recipe, eos_ids, pad, keep, desc, progress_bar, output_logits=True, **how)
    seconds = round(st["generate_seconds"] + st["keep_seconds"], 1)
    return out, {**{name: st[name] for name in COUNTS}, "seconds": seconds}


def to_sequences(items: list[tuple[int, bool, tuple]]) -> Sequences:
    """Sequences from (source index, sampled, generate() item) triples."""
    ids, offsets, plens, src, smp, tids, tlogp, roff = [], [0], [], [], [], [], [], [0]
    for source, sampled, (prompt, response, top_ids, top_logp) in items:
        ids.extend(prompt + response)
        offsets.append(len(ids))
        plens.append(len(prompt))
        src.append(source)
        smp.append(sampled)
        tids.append(top_ids)
        tlogp.append(top_logp)
        roff.append(roff[-1] + len(response))
    k = tids[0].shape[1] if tids else 1
    return Sequences(torch.tensor(ids, dtype=torch.int32), torch.tensor(offsets), torch.tensor(plens),
                     torch.tensor(src), torch.tensor(smp, dtype=torch.bool),
                     torch.cat(tids) if tids else torch.zeros(0, k, dtype=torch.int32),
                     torch.cat(tlogp) if tlogp else torch.zeros(0, k, dtype=torch.float16), torch.tensor(roff))


def data_key(model_cfg, data_recipe: dict) -> dict:
    """The cache key: the target and the whole data recipe."""
    return {**target_key(model_cfg), "data": data_recipe}


def build(path: Path, key: dict, target, tokenizer, model_cfg, recipe: dict, mirror_dir: str | None,
          cache_dir: str, progress_bar: bool) -> DraftData:
    t0 = time.perf_counter()
    torch.manual_seed(int(recipe.get("seed", 0)))  # the sampled answers are reproducible
    eos_ids, pad = end_tokens(target, tokenizer)
    names = [str(s["name"]) for s in recipe["sources"]]
    items: dict[str, list] = {s: [] for s in SPLITS}
    stats: dict = {"sources": {}}
    for si, src in enumerate(recipe["sources"]):
        greedy, sampled, held = int(src.get("greedy", 0)), int(src.get("sampled", 0)), int(src.get("heldout", 0))
        one = {**recipe, "sources": [src], "max_train_prompts": greedy + sampled, "max_heldout_prompts": held}
        prompts, st = collect_prompts(one, tokenizer, str(model_cfg.chat_template), mirror_dir, cache_dir)
        st = {**st["sources"][src["name"]], "train_prompts_available": st["train_prompts_available"]}
        jobs = [("train", prompts["train"][:greedy], False), ("train", prompts["train"][greedy:], True),
                ("heldout", prompts["heldout"], False)]
        for split, group, sample in jobs:
            if not group:
                continue
            label = f"{src['name']} {'sampled' if sample else 'greedy'} ({split})"
            got, gst = generate(target, group, recipe, eos_ids, pad, sample, label, progress_bar)
            st[f"{split}_{'sampled' if sample else 'greedy'}"] = gst
            items[split].extend((si, sample, g) for g in got)
        stats["sources"][src["name"]] = st
    if not items["train"] or not items["heldout"]:
        raise HarnessError("draft data: no training or no held-out prompts left (see draft.train.data.sources)")
    splits = {s: to_sequences(items[s]) for s in SPLITS}
    stats["build_seconds"] = round(time.perf_counter() - t0, 1)
    tensors = {f"{s}.{f}": getattr(splits[s], f).contiguous() for s in SPLITS for f in FIELDS}
    save_keyed_tensors(path, {"key": key, "sources": names, "stats": stats}, tensors, META, TENSORS)
    return DraftData(splits["train"], splits["heldout"], names, stats)


def load(path: Path, key: dict) -> DraftData:
    """A cached data folder; a damaged or foreign one raises one of bench.cachefile.READ_ERRORS."""
    meta, tensors = load_keyed_tensors(path, key, META, TENSORS)
    splits = {}
    for s in SPLITS:
        seq = Sequences(**{f: tensors[f"{s}.{f}"] for f in FIELDS})
        for f in ("offsets", "prompt_lens", "source", "resp_offsets"):
            setattr(seq, f, getattr(seq, f).long())
        if int(seq.offsets[-1]) != seq.ids.numel() or int(seq.resp_offsets[-1]) != seq.topk_ids.shape[0]:
            raise CorruptCache(f"{s}: offsets do not match the stored tokens")
        splits[s] = seq
    return DraftData(splits["train"], splits["heldout"], meta["sources"], meta["stats"])


def draft_data(target, tokenizer, model_cfg, data_recipe, root: Path, mirror_dir: str | None, cache_dir: str,
               progress_bar: bool = True) -> tuple[DraftData, Path]:
    """The self-distillation data of this target and data recipe: from the cache, else built once and cached."""
    recipe = plain(data_recipe)
    if not recipe.get("sources"):
        raise HarnessError("draft.train.data.sources is empty: no prompts to distil from")
    key = data_key(model_cfg, recipe)
    return cached(root, key, load,
                  lambda p: build(p, key, target, tokenizer, model_cfg, recipe, mirror_dir, cache_dir, progress_bar),
                  "draft self-distillation data")
