"""EAGLE-3 head training (bench/models/eagle3.py) with the training-time test, on cached target states.

Data: bench/train/eagle3_data.py (per position: the fused layers' states, the final normed state, the token).
The head reads pair (g_i, t_{i+1}) at position i. The training-time test (EAGLE-3 paper, section 3.3) unrolls it
on its own outputs, as the tree drafts: step j (0-based) feeds row i the head's step j - 1 output for row i as the
state and the token t_{i+j+1}, at position i + j; row i attends to step 0's rows 0..i (the accepted context) and
to its own row of steps 1..j (its chain's earlier drafts), the mask of one chain of the tree. Step j's output
predicts the token after position i + j + 1; its loss is the soft cross-entropy to the target's distribution
there, over the draft vocabulary (the target's logits at those ids, renormalised), weighted `decay`^j
(0.8: the official code). Tokens are the text's own (teacher forcing), as in the official training.

Draft vocabulary: the `draft_vocab` tokens most frequent in the training sequences' learnt part (EOS always in).
The head's lm_head and final norm start from the target's own rows and norm, and (`identity_init`) its fc passes
the high layer's state through with the layer's residual branches at zero (`warm_start`), so minutes of CPU
training start in the target's output space; everything but the shared embedding trains.

Evaluation (`agreement`): the same unroll on held-out sequences, without noise or gradients: at depth d the head
has drafted d - 1 tokens of a chain on its own states; top-1 (top-k) agreement is the share of positions where the
target's greedy token is the head's best (among its k best), per depth, overall and per source. It is what the
tree meets on a chain whose earlier tokens were accepted.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from bench.cachefile import READ_ERRORS, atomic_write, report_corrupt
from bench.errors import HarnessError
from bench.models.eagle import eagle_dir, load_eagle
from bench.models.eagle3 import Eagle3Head, fused_layers, head_files, read_head, save_head
from bench.models.vocab import rank_tokens
from bench.train.eagle import head_cost
from bench.train.eagle import read_report as read_eagle_report
from bench.train.eagle3_data import Split, eagle3_data
from bench.train.loop import train_loop
from bench.train.recipes import plain
from bench.train.selfdistill import end_tokens

REPORT = "eagle3_report.json"


def batch(split: Split, spans: list[tuple[int, int, int]], dtype) -> dict[str, torch.Tensor]:
    """Right-padded sequences: ids [B, T], fused [B, T, 3H], final [B, T, H], `learnt` [B, T] (the position's
    next token is learnt: in the loss region and inside the sequence)."""
    width = max(b - a for a, b, _ in spans)
    n = len(spans)
    out = {"ids": torch.zeros(n, width, dtype=torch.long),
           "fused": torch.zeros(n, width, split.fused.shape[1], dtype=dtype),
           "final": torch.zeros(n, width, split.final.shape[1], dtype=dtype),
           "learnt": torch.zeros(n, width, dtype=torch.bool)}
    for r, (a, b, start) in enumerate(spans):
        out["ids"][r, : b - a] = split.ids[a:b]
        out["fused"][r, : b - a] = split.fused[a:b].to(dtype)
        out["final"][r, : b - a] = split.final[a:b].to(dtype)
        out["learnt"][r, start : b - a] = True
    return out


def chain_mask(width: int, rows: torch.Tensor, step: int, dtype) -> torch.Tensor:
    """[1, 1, m, T + m * step] additive mask of unroll step `step` for the m rows `rows`: causal over step 0's T
    rows, then each later step's entry of the same row only."""
    allowed = [torch.arange(width)[None] <= rows[:, None]] + [torch.eye(len(rows), dtype=torch.bool)] * step
    mask = torch.zeros(len(rows), width + len(rows) * step, dtype=dtype)
    return mask.masked_fill(~torch.cat(allowed, 1), torch.finfo(dtype).min)[None, None]


def unroll(head: Eagle3Head, b: dict, steps: int, rows: torch.Tensor | None = None):
    """Per unroll step j, (the head's outputs [B, m, H], the positions [m] whose next-next token they predict: row
    i's step j predicts the token after position i + j + 1, `learnt` there [B, m]); step 0 runs every row (the
    context every chain reads), later steps the rows `rows` only (None: all). A generator: the caller scores
    each step as it comes."""
    cache = head.new_cache()
    width = b["ids"].shape[1]
    states, r = b["fused"], torch.arange(width)
    for j in range(steps):
        if j == 1 and rows is not None:
            states, r = states[:, rows], rows
        target = r + j + 1
        inside = target < width
        at = target.clamp(max=width - 1)
        out = head(b["ids"][:, at], states, (r + j)[None].expand(len(b["ids"]), -1), chain_mask(width, r, j, states.dtype),
                   cache)
        yield out, at, b["learnt"][:, at] & inside
        states = out


def target_logits(target_lm_head: torch.Tensor, final: torch.Tensor, ids: torch.Tensor | None) -> torch.Tensor:
    """The target's logits over `ids` (None: the whole vocabulary) from final normed states."""
    weight = target_lm_head if ids is None else target_lm_head[ids]
    return final @ weight.T


def tt_loss(head: Eagle3Head, lm_head: torch.Tensor, b: dict, steps: int, decay: float,
            rows: torch.Tensor | None = None) -> tuple[torch.Tensor, list]:
    """The training-time test's loss (sum over steps of decay^j x the step's mean soft cross-entropy) and each
    step's mean cross-entropy; steps after the first on `rows` only (None: all)."""
    with torch.no_grad():
        p = torch.softmax(target_logits(lm_head, b["final"], head.to_target(torch.arange(len(head.d2t)))).float(), -1)
    total, per_step = 0.0, []
    for j, (out, at, learnt) in enumerate(unroll(head, b, steps, rows)):
        if not learnt.any():
            break
        logp = torch.log_softmax(head.logits(out[learnt]).float(), -1)
        ce = -(p[:, at][learnt] * logp).sum(-1).mean()
        total = total + decay**j * ce
        per_step.append(float(ce.detach()))
    return total, per_step


def draft_vocabulary(split: Split, vocab_size: int, n: int, always: list[int]) -> torch.Tensor:
    """The n tokens most frequent in the learnt part of the training sequences (EOS first), ascending."""
    learnt = [split.ids[a + start + 1 : b].tolist() for a, b, start in split.spans()]
    return torch.tensor(sorted(rank_tokens(learnt, vocab_size, tuple(always))[:n]))


def warm_start(head: Eagle3Head, target, identity: bool = True) -> None:
    """lm_head rows and final norm from the target's (its output space), before training; `identity`: fc passes
    the high layer's state through and the layer's two residual branches (o_proj, down_proj) start at zero, so the
    untrained head outputs the target's high-layer state, already in the space its lm_head reads."""
    with torch.no_grad():
        ids = head.to_target(torch.arange(len(head.d2t)))
        head.lm_head.weight.copy_(target.get_output_embeddings().weight[ids])
        head.norm.weight.copy_(getattr(target, target.base_model_prefix).norm.weight)
        if identity:
            width = head.config.hidden_size
            head.fc.weight.zero_()
            head.fc.weight[:, 2 * width :].copy_(torch.eye(width))
            head.midlayer.self_attn.o_proj.weight.zero_()
            head.midlayer.mlp.down_proj.weight.zero_()


def train(head: Eagle3Head, lm_head: torch.Tensor, split: Split, recipe: dict, progress_bar: bool = True,
          sources: list[int] | None = None) -> dict:
    """Train `head` in place on the split's sequences (of `sources` only, if given); returns steps, time and the
    loss curve (per unroll step's cross-entropy)."""
    spans = split.spans() if sources is None else [s for i in sources for s in split.spans(source=i)]
    if not spans:
        raise HarnessError("eagle3: no training sequence with two positions")
    g = torch.Generator().manual_seed(int(recipe.get("seed", 0)))
    budget = int(recipe["batch_tokens"])
    steps, decay = int(recipe.get("ttt_steps", 7)), float(recipe.get("ttt_decay", 0.8))
    share = float(recipe.get("ttt_rows", 1.0))
    dtype = next(head.parameters()).dtype
    curve, window = [], []

    def step_loss() -> float:
        pick, width = [], 0
        for i in torch.randperm(len(spans), generator=g).tolist():  # whole sequences that fit the padded batch
            w = max(width, spans[i][1] - spans[i][0])
            if not pick or w * (len(pick) + 1) <= budget:
                pick.append(spans[i])
                width = w
        rows = None
        if share < 1.0:  # later steps on a random share of the rows (each chain needs only its own row)
            rows = torch.randperm(width, generator=g)[: max(1, round(share * width))].sort().values
        loss, per_step = tt_loss(head, lm_head, batch(split, pick, dtype), steps, decay, rows)
        loss.backward()
        window.append(per_step)
        return float(loss.detach())

    def after_step(clock, loss) -> None:
        if len(window) >= int(recipe.get("log_every", 10)):
            depth = max(map(len, window))
            mean = [sum(w[j] for w in window if len(w) > j) / sum(len(w) > j for w in window) for j in range(depth)]
            curve.append({"step": clock.step, "seconds": round(clock.seconds, 1), "ce_by_step": [round(x, 4)
                                                                                                  for x in mean]})
            window.clear()

    params = [p for p in head.parameters() if p.requires_grad]
    embed = head.embed.weight  # the target's, shared: no gradient into it (a dense 49152 x H one per step)
    was = embed.requires_grad
    embed.requires_grad_(False)
    head.train()
    try:
        # max_steps set: the schedule runs over the steps (source mixes compared at equal steps, eagle3_mix.py)
        clock = train_loop(params, recipe, step_loss, after_step, betas=(0.9, 0.95), desc="eagle3",
                           schedule_by_steps=True, progress_bar=progress_bar)
    finally:
        embed.requires_grad_(was)
    head.eval()
    return {"steps": clock.step, "train_seconds": round(clock.seconds, 1), "loss_curve": curve}


@torch.inference_mode()
def agreement(head: Eagle3Head, lm_head: torch.Tensor, split: Split, depths: int = 8, ks=(1, 5),
              source: int | None = None, max_sequences: int = 64, batch_tokens: int = 4096) -> dict[str, list]:
    """{"k": top-k agreement at depth 1..depths, "positions": positions scored per depth} on held-out sequences
    (see the module docstring)."""
    spans = split.spans(3, source)[:max_sequences]
    hits = {k: [0] * depths for k in ks}
    counts = [0] * depths
    dtype = next(head.parameters()).dtype
    per = max(1, batch_tokens // max((b - a for a, b, _ in spans), default=1))
    for start in range(0, len(spans), per):
        b = batch(split, spans[start : start + per], dtype)
        greedy = target_logits(lm_head, b["final"], None).argmax(-1)
        for j, (out, at, learnt) in enumerate(unroll(head, b, depths)):
            top = head.to_target(head.logits(out[learnt]).topk(max(ks), -1).indices)
            right = top == greedy[:, at][learnt][:, None]
            counts[j] += int(learnt.sum())
            for k in ks:
                hits[k][j] += int(right[:, :k].any(-1).sum())
    return {"positions": counts, **{str(k): [h / max(c, 1) for h, c in zip(hits[k], counts, strict=True)]
                                        for k in ks}}


@torch.inference_mode()
def eagle1_agreement(head, lm_head: torch.Tensor, split: Split, depths: int = 8, source: int | None = None,
                     max_sequences: int = 64, batch_tokens: int = 4096) -> dict[str, list]:
    """An EAGLE-1 head (bench.models.eagle) scored as `agreement` scores an EAGLE-3 head, on the same held-out
    positions: top-1 against the target's greedy token wherever the next token is learnt. Pair i reads the target's
    final state and t_{i+1}; at depth d every input state is the head's own output of depth d - 1 and positions
    before d - 1 are left out (bench.train.eagle.agreement's lower bound: the tree's chain is not unrolled)."""
    spans = split.spans(3, source)[:max_sequences]
    hits, counts = [0] * depths, [0] * depths
    per = max(1, batch_tokens // max((b - a for a, b, _ in spans), default=1))
    for start in range(0, len(spans), per):
        b = batch(split, spans[start : start + per], next(head.parameters()).dtype)
        n, width = b["ids"].shape
        greedy = target_logits(lm_head, b["final"], None).argmax(-1)[:, 1:]  # pair i: the target's after i + 1
        learnt = b["learnt"][:, 1:].clone()
        tokens, feats, posn = b["ids"][:, 1:], b["final"][:, :-1], torch.arange(width - 1)[None].expand(n, -1)
        for d in range(depths):
            pred = head(tokens, feats, posn, None)
            learnt[:, :d] = False  # pair i < d read states that went through fewer than d of the head's steps
            hits[d] += int((head.logits(pred[learnt]).argmax(-1) == greedy[learnt]).sum())
            counts[d] += int(learnt.sum())
            feats = torch.cat([feats[:, :1], pred[:, :-1]], dim=1)  # pair i now reads the head's own f^_i
    return {"positions": counts, "1": [h / max(c, 1) for h, c in zip(hits, counts, strict=True)]}


def pooled(by_source: dict[str, dict]) -> dict[str, list]:
    """The agreement over every source's positions together (each source's rates weighted by its positions)."""
    parts = list(by_source.values())
    counts = [sum(c) for c in zip(*(p["positions"] for p in parts), strict=True)]
    keys = [k for k in parts[0] if k != "positions"]
    return {"positions": counts, **{k: [sum(p[k][d] * p["positions"][d] for p in parts) / max(counts[d], 1)
                                        for d in range(len(counts))] for k in keys}}


def build_eagle3(target, tokenizer, model_cfg, out_dir: Path, data_root: Path, mirror_dir: str | None,
                 cache_dir: str, progress_bar: bool = True) -> dict:
    """Everything `make eagle3` does for one target: the data (cached), the draft vocabulary, held-out agreement
    untrained and trained per depth and source, training, relative cost, atomic write of the head (official
    layout) and eagle3_report.json. Returns the report."""
    if target.dtype != torch.float32:
        raise HarnessError(f"EAGLE-3 training needs a float32 target for now (model '{model_cfg.name}' is "
                           f"{str(target.dtype).replace('torch.', '')}); published heads load with "
                           "model.eagle3.source=hub")
    t0 = time.perf_counter()
    cfg = model_cfg.eagle3
    recipe = plain(cfg.train)
    torch.manual_seed(int(recipe.get("seed", 0)))
    layers = fused_layers(target, cfg.get("layers"))
    data, data_path = eagle3_data(target, tokenizer, model_cfg, recipe["data"], layers, data_root, mirror_dir,
                                  cache_dir, progress_bar)
    eos_ids, _ = end_tokens(target, tokenizer)
    vocab = draft_vocabulary(data.train, target.config.vocab_size, int(recipe["draft_vocab"]), eos_ids)
    head = Eagle3Head.from_target(target, vocab, layers, seed=int(recipe.get("seed", 0)))
    warm_start(head, target, bool(recipe.get("identity_init", True)))
    lm_head = target.get_output_embeddings().weight.detach()
    depths, names = int(recipe.get("eval_depths", 8)), [s["name"] for s in recipe["data"]["sources"]]

    def scores(depths: int) -> dict:
        by_source = {n: agreement(head, lm_head, data.heldout, depths, source=i) for i, n in enumerate(names)}
        return {"all": pooled(by_source), **by_source}

    before = scores(1)
    result = train(head, lm_head, data.train, recipe, progress_bar)
    after = scores(depths)
    report = {
        "eagle3": str(cfg.get("name") or cfg.id), "target": str(model_cfg.name),
        "target_source": f"{model_cfg.target.source}:{model_cfg.target.id}", "layers": list(head.layers),
        "draft_vocab": len(vocab), "draft_vocab_coverage": coverage_of(head, data.heldout),
        "agreement": after, "agreement_untrained": {src: by_k["1"] for src, by_k in before.items()},
        "cost": head_cost(target, head, reps=int(recipe.get("cost_reps", 20)), layers=head.layers, with_logits=True),
        **result, "train_minutes": round(result["train_seconds"] / 60, 2),
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "data": {"cache": str(data_path), "stats": data.stats,
                 "train_positions": int(data.train.ids.numel()), "heldout_positions": int(data.heldout.ids.numel())},
        "dtype": "float32", "threads": torch.get_num_threads(), "torch": torch.__version__, "recipe": recipe,
    }
    save_head(head, out_dir, {REPORT: json.dumps(report, indent=2) + "\n"})
    return report


def beside_eagle1(report: dict, out_dir: Path, bundle, model_cfg, data_root: Path, mirror_dir: str | None,
                  cache_dir: str) -> dict:
    """The report with the model's trained EAGLE-1 head (`make eagle`) scored beside it on the same held-out
    positions (`eagle1`), written back beside the head; unchanged when there is no such head or it is scored."""
    cfg = model_cfg.get("eagle")
    if cfg is None or cfg.get("source") != "trained":
        return report
    eagle1 = read_eagle_report(eagle_dir(bundle.model_cache) / str(cfg.id))
    if eagle1 is None:
        return report
    key = {"id": str(cfg.id), "steps": eagle1["steps"], "train_minutes": eagle1["train_minutes"],
           "agreement_own_heldout": eagle1["agreement"]}
    if report.get("eagle1", {}).get("head") == key:
        return report
    recipe = plain(model_cfg.eagle3.train)
    data, _ = eagle3_data(bundle.model, bundle.tokenizer, model_cfg, recipe["data"], report["layers"], data_root,
                          mirror_dir, cache_dir, progress_bar=False)
    head, lm_head = load_eagle(bundle), bundle.model.get_output_embeddings().weight.detach()
    depths = int(recipe.get("eval_depths", 8))
    by_source = {s["name"]: eagle1_agreement(head, lm_head, data.heldout, depths, source=i)
                 for i, s in enumerate(recipe["data"]["sources"])}
    report = {**report, "eagle1": {"head": key, "agreement": {"all": pooled(by_source), **by_source}}}
    atomic_write(Path(out_dir) / REPORT, json.dumps(report, indent=2) + "\n")
    return report


def coverage_of(head: Eagle3Head, split: Split) -> float:
    """Share of the held-out learnt tokens inside the draft vocabulary (a draft can never propose the others)."""
    tokens = torch.cat([split.ids[a + start + 1 : b] for a, b, start in split.spans()])
    return float(head.t2d[tokens].float().mean())


def read_report(out_dir: Path, target) -> dict | None:
    """The report of a whole head folder, or None (a damaged one is reported in one line and built again)."""
    out_dir = Path(out_dir)
    if not (out_dir / REPORT).is_file():
        return None
    try:
        read_head(*head_files(out_dir, str(out_dir)), target, str(out_dir))
        return json.loads((out_dir / REPORT).read_text())
    except (*READ_ERRORS, HarnessError) as err:
        report_corrupt(f"trained EAGLE-3 head {out_dir}", err)
        return None


def summary(report: dict) -> str:
    """A few lines: what was trained, held-out agreement per depth (untrained in brackets) overall and per source,
    training, cost."""
    lines = [(f"EAGLE-3 head {report['eagle3']} for {report['target']}: layers {report['layers']}, draft vocabulary "
             f"{report['draft_vocab']} ({report['draft_vocab_coverage']:.1%} of held-out tokens), "
             f"{report['data']['train_positions']} training / {report['data']['heldout_positions']} held-out positions")]
    for src, by_k in report["agreement"].items():
        top1 = "  ".join(f"d{d} {a:.1%}" for d, a in enumerate(by_k["1"], start=1))
        lines.append(f"held-out top-1 agreement by depth ({src}): {top1}  [untrained d1 "
                     f"{report['agreement_untrained'][src][0]:.1%}]")
    top5 = "  ".join(f"d{d} {a:.1%}" for d, a in enumerate(report["agreement"]["all"]["5"], start=1))
    c = report["cost"]
    for src, by_k in report.get("eagle1", {}).get("agreement", {}).items():
        top1 = "  ".join(f"d{d} {a:.1%}" for d, a in enumerate(by_k["1"], start=1))
        lines.append(f"EAGLE-1 head {report['eagle1']['head']['id']} ({report['eagle1']['head']['steps']} steps), "
                     f"same positions ({src}): {top1}")
    lines += [f"held-out top-5 agreement by depth (all): {top5}",
              (f"training: {report['steps']} steps in {report['train_minutes']} min; cost {c['ratio']:.3f} of a target "
              f"step ({c['head_s'] * 1e3:.2f} ms vs {c['target_step_s'] * 1e3:.2f} ms)")]
    return "\n".join(lines)
