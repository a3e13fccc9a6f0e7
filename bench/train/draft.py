"""Distil a small, vocabulary-trimmed draft from its target (`make draft`, scripts/train_draft.py).

Recipe: the model config's `draft.train` block (conf/model/smollm2-135m.yaml documents every key), so
`make draft MODEL=<any>` works for any target config.

1. Data (bench/train/draft_data.py): the target's own greedy and sampled responses to prompts no benchmark
   evaluates, with its top-k next-token log-probabilities at every response position; cached.
2. Vocabulary (bench/models/vocab.py): token ids ranked by frequency in the training responses; the draft scores
   the first `vocab` of them (V'); the report gives the share of held-out target tokens each V' covers.
3. Draft: `layers` decoder layers copied from the target (bench/models/drafts.py), its embeddings, final norm and
   lm_head kept frozen (a plain checkpoint: transformers' assisted generation can use it whole). AdamW trains the
   layers and the norm on the loss -sum_j p_j log q_j over the target's top-k tokens inside V' (p renormalised
   over them, q the draft's softmax over V'): the cross-entropy to the target's distribution as far as V' and the
   top-k can express it. Sequences are whole prompt+response, right-padded, the loss on response positions only.
   Training stops at `max_minutes` of training steps (evaluation excluded) or `max_steps`; warm-up then cosine
   (bench/train/loop.py).
4. Report (`draft_report.json` beside the weights): held-out top-1 agreement with the target's greedy choice per
   source (before and after training, and every `eval_every_minutes` during it: agreement against training
   time) and per V' of `vocab_report` (the trained draft scored on a prefix of the ranking), rank hit rates, the
   cost of a decode step relative to the target's per V', the target's verify cost T(n) / T(1), and for each V'
   the predicted speedup of chains and of 64-node trees (bench/train/draft_choice.py), and the loss curve.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import torch

from bench.cachefile import READ_ERRORS, atomic_dir, lock, report_corrupt
from bench.models.drafts import decode_step_seconds, init_draft_from_target
from bench.models.loading import check_model_dir
from bench.models.vocab import coverage, rank_tokens, trim, write_ranking
from bench.train import draft_choice
from bench.train.draft_data import DraftData, Sequences, draft_data
from bench.train.loop import train_loop
from bench.train.recipes import plain
from bench.train.selfdistill import end_tokens

REPORT = "draft_report.json"
HITS = 8  # rank hit rates reported (and used for tree predictions)


def batches(seqs: Sequences, which: list[int], max_tokens: int) -> list[list[int]]:
    """Sequence indices grouped by length into batches of at most `max_tokens` padded tokens (at least one each)."""
    lengths = (seqs.offsets[1:] - seqs.offsets[:-1]).tolist()
    out, cur, longest = [], [], 0
    for s in sorted(which, key=lambda i: lengths[i]):
        longest_if = max(longest, lengths[s])
        if cur and longest_if * (len(cur) + 1) > max_tokens:
            out.append(cur)
            cur, longest_if = [], lengths[s]
        cur.append(s)
        longest = longest_if
    return out + ([cur] if cur else [])


def response_states(model, seqs: Sequences, batch: list[int], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(final hidden states [n, H] at the response positions of the batch's sequences, their topk_* rows [n])."""
    parts = [seqs.sequence(s) for s in batch]
    width = max(len(ids) for ids, _, _ in parts)
    ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _, _ in parts], device=model.device)
    hidden = getattr(model, model.base_model_prefix)(input_ids=ids, use_cache=False).last_hidden_state
    rows_b, rows_t, topk_rows = [], [], []
    for b, (_, p, rows) in enumerate(parts):
        n = rows.stop - rows.start
        rows_b += [b] * n
        rows_t += range(p - 1, p - 1 + n)
        topk_rows.append(torch.arange(rows.start, rows.stop))
    return hidden[rows_b, rows_t], torch.cat(topk_rows)


def trimmed_distill_loss(logits: torch.Tensor, topk_ids: torch.Tensor, topk_logp: torch.Tensor,
                         index_of: torch.Tensor) -> torch.Tensor:
    """Mean over positions of -sum_j p_j log q_j: logits [n, V'] over the trimmed vocabulary, the target's top-k
    (ids [n, k], log-probs [n, k]), index_of [V] = position of a token id in V' or -1. p is renormalised over the
    top-k tokens inside V'; positions with none inside V' are skipped."""
    idx = index_of[topk_ids.long()]
    inside = idx >= 0
    # A row with no top-k token inside V' softmaxes to NaN; zeroed here (not after the product) so that no NaN
    # reaches the gradient of log q.
    weight = torch.softmax(topk_logp.float().masked_fill(~inside, float("-inf")), dim=-1).masked_fill(~inside, 0.0)
    keep = inside.any(-1)
    log_q = torch.log_softmax(logits.float(), dim=-1).gather(1, idx.clamp(min=0))
    per_row = -(weight * log_q).sum(-1)
    return per_row[keep].mean() if bool(keep.any()) else logits.sum() * 0.0


@torch.inference_mode()
def evaluate(model, data: DraftData, ranking: list[int], sizes: list[int], pad: int, max_tokens: int) -> dict:
    """Held-out top-1 agreement with the target's greedy choice, per source and per V' in `sizes` (the draft's
    argmax over the first V' ranked ids), and rank hit rates at the largest size."""
    seqs, top = data.heldout, max(sizes)
    ids = torch.tensor(ranking[:top], device=model.device)
    weight = model.get_output_embeddings().weight[ids]
    hits = {name: {v: 0 for v in sizes} for name in data.sources}
    totals = dict.fromkeys(data.sources, 0)
    ranks = torch.zeros(HITS + 1, dtype=torch.long)
    for batch in batches(seqs, list(range(len(seqs))), max_tokens):
        hidden, rows = response_states(model, seqs, batch, pad)
        logits = hidden @ weight.T
        target = seqs.topk_ids[rows, 0].long().to(model.device)
        index = torch.tensor(batch)
        source = torch.repeat_interleave(seqs.source[index], seqs.resp_offsets[index + 1] - seqs.resp_offsets[index])
        for v in sizes:
            right = (ids[logits[:, :v].argmax(-1)] == target).cpu()
            for si, name in enumerate(data.sources):
                hits[name][v] += int(right[source == si].sum())
        for si, name in enumerate(data.sources):
            totals[name] += int((source == si).sum())
        order = ids[logits.topk(HITS, dim=-1).indices]  # [n, HITS] token ids, best first
        found = (order == target[:, None]).cpu()
        ranks += torch.bincount(torch.where(found.any(-1), found.int().argmax(-1), HITS), minlength=HITS + 1)
    agreement = {v: {n: hits[n][v] / totals[n] for n in data.sources if totals[n]} for v in sizes}
    n = max(1, int(ranks.sum()))
    return {"agreement": agreement, "hits": [int(r) / n for r in ranks[:HITS]], "positions": totals}


def train(draft, data: DraftData, index_of: torch.Tensor, head_ids: torch.Tensor, recipe: dict, pad: int,
          checkpoint=None, progress_bar: bool = True) -> dict:
    """Train `draft` on the training sequences until `max_minutes` of steps (or `max_steps`; bench/train/loop.py);
    `checkpoint(minutes)` runs every `eval_every_minutes` of training, outside the clock."""
    params = [p for n, p in draft.named_parameters() if p.requires_grad]
    rng = random.Random(int(recipe.get("seed", 0)))
    groups = batches(data.train, list(range(len(data.train))), int(recipe["batch_tokens"]))
    every = 60.0 * float(recipe.get("eval_every_minutes") or 1e9)
    head = draft.get_output_embeddings().weight.detach()[head_ids]
    curve, order, counts = [], [], {"positions": 0, "next_eval": every}

    def step_loss() -> float:
        if not order:
            order.extend(range(len(groups)))
            rng.shuffle(order)
        hidden, rows = response_states(draft, data.train, groups[order.pop()], pad)
        loss = trimmed_distill_loss(hidden @ head.T, data.train.topk_ids[rows], data.train.topk_logp[rows], index_of)
        loss.backward()
        counts["positions"] += len(rows)
        return loss.item()

    def after_step(clock, loss: float) -> None:
        curve.append({"step": clock.step, "positions": counts["positions"], "seconds": round(clock.seconds, 2),
                      "loss": round(loss, 5), "lr": clock.lr})
        if checkpoint is not None and clock.seconds >= counts["next_eval"]:
            draft.eval()
            checkpoint(clock.seconds / 60.0)
            draft.train()
            counts["next_eval"] += every

    draft.train()
    clock = train_loop(params, recipe, step_loss, after_step, betas=(0.9, 0.95), desc="distil",
                       progress_bar=progress_bar)
    draft.eval()
    return {"steps": clock.step, "trained_positions": counts["positions"], "train_seconds": round(clock.seconds, 2),
            "loss_curve": curve}


def prepare_draft(target, recipe: dict):
    """The untrained draft: target layers copied, only decoder layers and final norm trainable."""
    draft = init_draft_from_target(target, int(recipe["layers"]), recipe.get("init_layers"))
    # AdamW on fp16/bf16 weights loses the small updates: a low-precision target's draft trains in float32 and is
    # cast back to the target's dtype after training (build_draft), as the heads are.
    draft = draft.float()
    frozen = {id(draft.get_input_embeddings().weight), id(draft.get_output_embeddings().weight)}
    for p in draft.parameters():
        p.requires_grad_(id(p) not in frozen)
    return draft


def costs(target, draft, ranking: list[int], sizes: list[int], steps: int) -> dict:
    """Decode-step cost of the draft at each V' (and the full vocabulary) relative to the target, measured side by
    side; and the target's T(n) / T(1) for the verification widths the predictions use."""
    from types import SimpleNamespace

    from bench.models import forward_cost

    models = {"target": target, "full": draft, **{str(v): trim(draft, ranking, v) for v in sizes}}
    seconds = decode_step_seconds(models, steps=steps)
    pseudo = SimpleNamespace(model=target, device=target.device, dtype=target.dtype,
                             vocab_size=target.config.vocab_size)
    curve = forward_cost.measure(pseudo, sizes=(1, 2, 4, 8, 16, 32, 65), prefix_tokens=128, reps=5)
    return {"step_seconds": seconds, "ratio": {k: seconds[k] / seconds["target"] for k in models if k != "target"},
            "verify_ratio": {n: t / curve[1] for n, t in curve.items()}}


def build_draft(target, tokenizer, model_cfg, out_dir: Path, mirror_dir: str | None, cache_dir: str,
                progress_bar: bool = True) -> dict:
    """Everything `make draft` does for one target. Returns the report (also <out_dir>/draft_report.json)."""
    t0 = time.perf_counter()
    recipe = plain(model_cfg.draft.train)
    torch.manual_seed(int(recipe.get("seed", 0)))
    eos_ids, pad = end_tokens(target, tokenizer)
    data, data_dir = draft_data(target, tokenizer, model_cfg, recipe["data"], Path(out_dir).parent, mirror_dir,
                                cache_dir, progress_bar)
    vocab_size = target.get_output_embeddings().weight.shape[0]
    ranking = rank_tokens([data.train.responses()], vocab_size, always=tuple(eos_ids))
    trained_v = int(recipe["vocab"]) if recipe.get("vocab") else vocab_size
    sizes = sorted({min(int(v), vocab_size) for v in recipe.get("vocab_report", [])} | {trained_v, vocab_size})
    index_of = torch.full((vocab_size,), -1, dtype=torch.long)
    index_of[torch.tensor(ranking[:trained_v])] = torch.arange(trained_v)
    draft = prepare_draft(target, recipe)
    eval_tokens = int(recipe.get("eval_batch_tokens", 4096))
    before = evaluate(draft, data, ranking, [trained_v], pad, eval_tokens)
    during = []

    def checkpoint(minutes: float) -> None:
        got = evaluate(draft, data, ranking, [trained_v], pad, eval_tokens)
        during.append({"minutes": round(minutes, 2), "agreement": got["agreement"][trained_v], "hits": got["hits"]})

    result = train(draft, data, index_of.to(target.device), torch.tensor(ranking[:trained_v], device=target.device),
                   recipe, pad, checkpoint, progress_bar)
    for p in draft.parameters():
        p.requires_grad_(False)
    draft = draft.to(target.dtype)  # scored, timed and saved in the dtype it will run in
    after = evaluate(draft, data, ranking, sizes, pad, eval_tokens)
    measured = costs(target, draft, ranking, [v for v in sizes if v < vocab_size], int(recipe.get("cost_steps", 32)))
    verify = measured["verify_ratio"]
    verify_at = draft_choice.verify_curve(verify)
    chat = data.sources[0]  # the first source is the one the goal is stated on (chat)
    choice = {}
    for v in sizes:
        key = "full" if v == vocab_size else str(v)
        alpha = after["agreement"][v][chat]
        choice[key] = {"vocab": v, "agreement": alpha, "cost_ratio": measured["ratio"][key],
                       "gpu_like": draft_choice.predictions(alpha, after["hits"], measured["ratio"][key]),
                       "this_machine": draft_choice.predictions(alpha, after["hits"], measured["ratio"][key],
                                                                verify=verify_at)}
    held_tokens = data.heldout.responses()
    key = "full" if trained_v == vocab_size else str(trained_v)
    report = {
        "draft": str(model_cfg.draft.get("name") or model_cfg.draft.id),
        "target": str(model_cfg.name),
        "target_source": f"{model_cfg.target.source}:{model_cfg.target.id}",
        "layers": draft.config.num_hidden_layers,
        "target_layers": target.config.num_hidden_layers,
        "init_layer_ids": list(draft.config.draft_layer_ids),
        "vocab": trained_v,
        "agreement": after["agreement"][trained_v],
        "agreement_untrained": before["agreement"][trained_v],
        "agreement_by_vocab": {str(v): after["agreement"][v] for v in sizes},
        "agreement_during_training": during,
        "hits": after["hits"],
        "heldout_positions": after["positions"],
        "coverage": {str(v): c for v, c in coverage(ranking, held_tokens, sizes).items()},
        "cost_ratio": measured["ratio"][key],
        "cost_ratio_by_vocab": measured["ratio"],
        "step_seconds": measured["step_seconds"],
        "verify_ratio": {str(n): r for n, r in verify.items()},
        "predicted": choice,
        "trained_positions": result["trained_positions"],
        "steps": result["steps"],
        "train_seconds": result["train_seconds"],
        "wall_seconds": round(time.perf_counter() - t0, 2),
        "sources": data.sources,
        "data": {"cache": str(data_dir), **data.stats},
        "device": str(target.device),
        "dtype": str(target.dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "recipe": recipe,
        "loss_curve": result["loss_curve"],
    }
    write_draft(draft, tokenizer, report, ranking, int(data.train.responses().numel()), out_dir)
    return report


def write_draft(draft, tokenizer, report: dict, ranking: list[int] | None, counted: int, out_dir: Path) -> None:
    """Weights, token ranking and report into a temporary folder, then swapped in (bench.cachefile.atomic_dir):
    never a half-written draft folder. `make draft` calls it holding the folder's lock, so two builds do not race."""
    with atomic_dir(out_dir) as tmp:
        draft.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        if ranking is not None:
            write_ranking(tmp, ranking, counted)
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
            f"V'={report['vocab']}; top-1 agreement with {report['target']}'s greedy outputs, held out: {agree} "
            f"(untrained: {before}); cost per token {report['cost_ratio']:.2f}x the target's; "
            f"{report['steps']} steps in {report['train_seconds'] / 60:.1f} min")


def up_to_date(out_dir: Path, model_cfg) -> dict | None:
    """The report of the draft in out_dir if it was built from this recipe and target, else None."""
    existing = read_report(out_dir)
    target = f"{model_cfg.target.source}:{model_cfg.target.id}"
    if existing and existing.get("recipe") == plain(model_cfg.draft.train) and existing.get("target_source") == target:
        return existing
    return None


def build_or_reuse(model_cfg, out_dir: Path, load_target, mirror_dir: str | None, cache_dir: str,
                   force: bool = False) -> tuple[dict, bool]:
    """(report, built) of the draft in out_dir: reused if up to date (and not `force`), else built from the target
    `load_target()` returns (a ModelBundle, loaded only then), under the folder's lock, so a second build waits and
    then finds it up to date."""
    with lock(out_dir):
        existing = None if force else up_to_date(out_dir, model_cfg)
        if existing is not None:
            return existing, False
        bundle = load_target()
        return build_draft(bundle.model, bundle.tokenizer, model_cfg, out_dir, mirror_dir, cache_dir), True
