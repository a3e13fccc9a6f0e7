"""A draft model cut from its target, and the two numbers that say whether a draft is worth using.

`init_draft_from_target` keeps the target's architecture and tokenizer and copies a few of its decoder layers
(plus embeddings, final norm and lm_head), so the draft starts as an early-exit-like copy of the target and
distillation (bench/train/draft.py) only has to adapt the layers. The losslessness tests use it to
build an untrained draft in a fraction of a second.

`agreement` is teacher-forced top-1 agreement: on the same text, how often the draft's argmax equals the
target's at each position. `cost_ratio` is the draft's one-token decode step time over the target's, both
with a KV cache, measured interleaved in one process so machine noise hits both alike.
"""

from __future__ import annotations

import copy
import statistics
import time

import torch
from torch import nn

from bench.core.forward import cache_kw
from bench.errors import HarnessError


def spread_layers(total: int, count: int) -> list[int]:
    """`count` layer ids spread evenly over `total` layers, first and last included (0 and total-1)."""
    if not 1 <= count <= total:
        raise HarnessError(f"a draft needs 1..{total} layers of its target, not {count}")
    if count == 1:
        return [total - 1]
    return [round(i * (total - 1) / (count - 1)) for i in range(count)]


def pick_layers(total: int, count: int, how: str | list[int] | None = "first") -> list[int]:
    """Which target layers initialise a `count`-layer draft: "first" (an early exit of the target, the default:
    untrained it agreed with SmolLM2-135M on 5% of C4 positions with 4 layers, while every choice that kept the
    last layer agreed on 0%), "spread" (evenly, first and last included), or an explicit list."""
    if not 1 <= count <= total:
        raise HarnessError(f"a draft needs 1..{total} layers of its target, not {count}")
    if how is None or how == "first":
        return list(range(count))
    if how == "spread":
        return spread_layers(total, count)
    if isinstance(how, str):
        raise HarnessError(f"unknown layer choice '{how}' (known: first, spread, or a list of layer ids)")
    ids = [int(i) for i in how]
    if len(ids) != count or any(not 0 <= i < total for i in ids):
        raise HarnessError(f"layer ids {ids} must be {count} ids in 0..{total - 1}")
    return ids


def decoder_layers(model) -> tuple[str, nn.ModuleList]:
    """(qualified name, module list) of the decoder layers: the ModuleList with num_hidden_layers entries."""
    n = model.config.num_hidden_layers
    found = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) == n]
    if len(found) != 1:
        raise HarnessError(f"cannot find the decoder layers of {type(model).__name__} "
                           f"({len(found)} module lists of length {n})")
    return found[0]


def init_draft_from_target(target, num_layers: int, layer_ids: str | list[int] | None = None):
    """A model of the target's class with `num_layers` decoder layers copied from `layer_ids` of the target
    (see pick_layers; default: the first ones), and the target's embeddings, final norm and lm_head
    (tied again if the target ties them). Eval mode, the target's device and dtype; deterministic."""
    from transformers.initialization import no_init_weights

    ids = pick_layers(target.config.num_hidden_layers, num_layers, layer_ids)
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = num_layers
    if getattr(config, "layer_types", None) is not None:  # per-layer attention kinds (sliding/full) follow the copy
        config.layer_types = [config.layer_types[i] for i in ids]
    # Every weight is overwritten below (strict load), so skip the random init: it took seconds for the
    # 49152 x 576 embedding alone, and leaves nothing of itself in the draft.
    with no_init_weights():
        draft = type(target)._from_config(config, dtype=target.dtype).to(target.device)
    prefix, _ = decoder_layers(target)
    source = target.state_dict()
    state = {}
    for key in draft.state_dict():
        if key.startswith(prefix + "."):
            index, rest = key[len(prefix) + 1 :].split(".", 1)
            key_in_target = f"{prefix}.{ids[int(index)]}.{rest}"
        else:
            key_in_target = key
        state[key] = source[key_in_target].detach().clone()
    draft.load_state_dict(state, strict=True)
    if getattr(config, "tie_word_embeddings", False):
        draft.tie_weights()
    draft.generation_config = copy.deepcopy(target.generation_config)
    draft.config.draft_layer_ids = ids  # saved in config.json: which target layers it started from
    return draft.eval()


@torch.inference_mode()
def top1(model, token_batches) -> list[torch.Tensor]:
    """The model's argmax at every position of every [B, T] batch (teacher-forced), on the CPU."""
    was_training = model.training
    model.eval()
    out = [model(input_ids=b.to(model.device), use_cache=False).logits.argmax(-1).cpu() for b in token_batches]
    model.train(was_training)
    return out


def agreement_rate(reference: list[torch.Tensor], other: list[torch.Tensor]) -> float:
    same = sum(int((a == b).sum()) for a, b in zip(reference, other, strict=True))
    total = sum(a.numel() for a in reference)
    if total == 0:
        raise HarnessError("agreement needs at least one token")
    return same / total


def agreement(target, draft, token_batches) -> float:
    """Teacher-forced top-1 agreement of draft with target over every position of every [B, T] batch."""
    token_batches = list(token_batches)
    return agreement_rate(top1(target, token_batches), top1(draft, token_batches))


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def decode_step_seconds(models: dict, steps: int = 32, warmup: int = 4, prefix_len: int = 64,
                        seed: int = 0) -> dict[str, float]:
    """Median seconds of one cached one-token decode step per model, the models stepped in turn (A, B, A, B...)
    so that load on a shared machine affects all of them alike. Same random prefix for all."""
    from transformers import DynamicCache

    g = torch.Generator().manual_seed(seed)
    vocab = min(m.config.vocab_size for m in models.values())
    prefix = torch.randint(0, vocab, (1, prefix_len), generator=g)
    state = {}
    for name, m in models.items():
        cache = DynamicCache(config=m.config)
        out = m(input_ids=prefix.to(m.device), **cache_kw(m, cache), use_cache=True, logits_to_keep=1)
        state[name] = (cache, out.logits[:, -1:].argmax(-1))
    times: dict[str, list[float]] = {name: [] for name in models}
    for step in range(warmup + steps):
        for name, m in models.items():
            cache, token = state[name]
            _sync(m.device)
            t0 = time.perf_counter()
            out = m(input_ids=token, **cache_kw(m, cache), use_cache=True)
            token = out.logits[:, -1:].argmax(-1)
            _sync(m.device)
            if step >= warmup:
                times[name].append(time.perf_counter() - t0)
            state[name] = (cache, token)
    return {name: statistics.median(ts) for name, ts in times.items()}


def cost_ratio(target, draft, steps: int = 32) -> float:
    """Draft decode step time / target decode step time (medians, measured side by side after warm-up)."""
    t = decode_step_seconds({"target": target, "draft": draft}, steps=steps)
    return t["draft"] / t["target"]
