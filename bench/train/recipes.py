"""Helpers shared by the recipes that train on a target's outputs (draft: bench/train/draft.py; Medusa and early
heads: bench/train/heads.py, early_heads.py): plain config dicts, row splits of a source."""

from __future__ import annotations

from omegaconf import OmegaConf

from bench.core.settings import integer, integers, number
from bench.errors import HarnessError


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


# The recipes' numbers by key, wherever they sit in a model's draft/heads/eagle blocks or tree.calibration, declared
# as a method's settings are (bench.core.settings): a zero or negative size used to divide by zero, train forever
# (max_minutes=-1), or quietly mean something else (-1 prompts: all but one; batch_positions=0: heads trained on
# nothing). null where the code reads it (no cap, all positions or rows, no evaluation during training); 0 prompts
# leave that split empty; 0 layers make linear-only heads.
RECIPE_NUMBERS = {
    **dict.fromkeys(("max_new_tokens", "max_tokens", "generate_batch_size", "batch_positions", "batch_tokens",
                     "token_pairs", "eval_batch_tokens", "cost_reps", "cost_steps", "cost_prefix", "log_every",
                     "eval_depths", "eval_topk", "forward_batch_size", "forward_batch_tokens", "max_k", "ttt_steps",
                     "num_heads", "limit", "depth", "topk", "prompt_tokens", "window_words", "heldout_every"),
                    integer(1)),
    **dict.fromkeys(("greedy", "sampled", "skip", "warmup_steps", "seed", "num_layers"), integer(0)),
    **dict.fromkeys(("max_minutes", "lr"), number(0, above=True)),
    **dict.fromkeys(("weight_decay", "grad_clip", "noise", "p_weight", "min_lr", "ttt_decay", "ttt_rows",
                     "temperature"), number(0)),
    **dict.fromkeys(("max_steps", "vocab", "eval_positions", "max_prompt_tokens"), integer(1, optional=True)),
    **dict.fromkeys(("max_train_prompts", "max_heldout_prompts", "train", "heldout"), integer(0, optional=True)),
    "eval_every_minutes": number(0, above=True, optional=True),
    **dict.fromkeys(("layers", "vocab_report"), integers(0)),  # a list of ids or sizes (an int: a depth)
}


def check_recipes(cfg, *blocks: str):
    """cfg, after a HarnessError (one line) for the first recipe number out of its range in the named blocks (a
    model block: draft, heads, early_heads, eagle, eagle3; or tree.calibration); each script names its own."""
    for block in blocks:
        node = cfg.get("tree", {}).get("calibration") if block == "tree.calibration" else cfg.model.get(block)
        if node is not None:
            where = block if block == "tree.calibration" else f"model.{block}"
            check_numbers(OmegaConf.to_container(node, resolve=True), where)
            train = node.get("train") if block in ("heads", "early_heads") else None
            if train is not None and train.get("max_train_prompts") == 0:  # heads train on that split
                raise HarnessError(f"{where}.train.max_train_prompts must be >= 1 or null: the heads train on those "
                                   "prompts (0 leaves none)")
    return cfg


def check_numbers(node, where: str) -> None:
    if isinstance(node, list):
        for i, item in enumerate(node):
            check_numbers(item, f"{where}[{i}]")
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        rule = RECIPE_NUMBERS.get(key)
        if rule is not None and rule.kind == "integers":
            bad = isinstance(value, list) and not rule.accepts(value)  # a scalar here is a depth, null: the default
        elif isinstance(value, dict | list):
            check_numbers(value, f"{where}.{key}")
            continue
        else:
            bad = rule is not None and not rule.accepts(value)
        if bad:
            raise HarnessError(f"{where}.{key} must be {rule.allowed()}, got {value!r}")
