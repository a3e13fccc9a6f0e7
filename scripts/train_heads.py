"""`make heads`: train Medusa-1 heads for a target by self-distillation into data/cache/heads/<id>/.

    python scripts/train_heads.py [model=smollm2-135m] [--force] [model.heads.train.max_minutes=1 ...]

The recipe is the model config's `heads.train` block (bench/train/heads.py, heads_data.py). A model whose
heads are not trained ones (none, or hub heads such as Vicuna's) gets the reference recipe and heads settings of
conf/model/smollm2-135m.yaml under the id `<model>-medusa`; the last line then says how to point the model at them.
Heads whose report already matches the recipe and the target are kept unless --force. The target's responses and
hidden states are cached apart from the heads (data/cache/heads/selfdistill/), so retraining reuses them.
Prints a short summary: data, held-out top-1/5/10 per head, training, cost relative to a target decode step.
Missing data, weights or an unknown model is one `error:` line and a non-zero exit.
"""

from __future__ import annotations

import sys

from omegaconf import OmegaConf, open_dict

from bench.cachefile import lock
from bench.cli import run_script
from bench.errors import HarnessError
from bench.models.heads import heads_dir
from bench.paths import PROJECT, project_path
from bench.run.compose import compose_config, split_flags
from bench.run.runner import get_bundle
from bench.train.early_heads import build_early_heads, read_early_report
from bench.train.early_heads import summary as early_summary
from bench.train.heads import build_heads, read_report, summary
from bench.train.recipes import check_recipes, plain
from data.loaders import DataError

REFERENCE = PROJECT / "conf" / "model" / "smollm2-135m.yaml"
USAGE = "train_heads.py [model=<name>] [--force] [overrides...]"


def with_trained_heads(model_cfg):
    """(model config whose heads are trained ones, hint or None): the reference heads block if they are not."""
    heads = model_cfg.get("heads")
    if heads is not None and heads.get("source") == "trained" and heads.get("train") is not None:
        return model_cfg, None
    name = f"{model_cfg.name}-medusa"
    reference = OmegaConf.to_container(OmegaConf.load(REFERENCE).heads, resolve=True)
    model_cfg = OmegaConf.create(OmegaConf.to_container(model_cfg, resolve=True))
    with open_dict(model_cfg):
        model_cfg.heads = {**reference, "name": name, "id": name}
    return model_cfg, (f"to use them: model.heads='{{name: {name}, source: trained, id: {name}, "
                       f"shared_lm_head: {str(reference['shared_lm_head']).lower()}}}' (or set it in conf/model/)")


def is_current(report: dict | None, model_cfg) -> bool:
    target = f"{model_cfg.target.source}:{model_cfg.target.id}"
    return bool(report) and report.get("recipe") == plain(model_cfg.heads.train) and \
        report.get("target_source") == target and report.get("num_heads") == int(model_cfg.heads.num_heads) and \
        report.get("shared_lm_head") == bool(model_cfg.heads.get("shared_lm_head", True)) and \
        report.get("num_layers") == int(model_cfg.heads.get("num_layers", 1))


def train(cfg, force: bool) -> str | None:
    """Build (or keep) the heads of cfg.model; returns the hint line, if any."""
    model_cfg, hint = with_trained_heads(cfg.model)
    out_dir = heads_dir(project_path(cfg.paths.model_cache)) / str(model_cfg.heads.id)
    with lock(out_dir):  # a second `make heads` waits, then finds these heads up to date
        existing = None if force else read_report(out_dir)
        if is_current(existing, model_cfg):
            print(f"up to date ({out_dir}):\n{summary(existing)}")
        else:
            bundle = get_bundle(cfg.model, cfg.paths.model_cache)
            report = build_heads(bundle.model, bundle.tokenizer, model_cfg, out_dir,
                                 str(project_path(cfg.paths.data_mirror)), str(project_path(cfg.paths.data_cache)))
            print(f"{summary(report)}\n-> {out_dir}")
    if model_cfg.get("early_heads") is not None:
        train_early(cfg, model_cfg, force)
    return hint


def train_early(cfg, model_cfg, force: bool) -> None:
    """ProPD's early heads (model config `early_heads`), from the same self-distilled data; a block without a
    `train` recipe gets the reference one (conf/model/smollm2-135m.yaml)."""
    if model_cfg.early_heads.get("train") is None:
        reference = OmegaConf.to_container(OmegaConf.load(REFERENCE).early_heads.train, resolve=True)
        model_cfg = OmegaConf.create(OmegaConf.to_container(model_cfg, resolve=True))
        with open_dict(model_cfg):
            model_cfg.early_heads.train = reference
    out_dir = heads_dir(project_path(cfg.paths.model_cache)) / str(model_cfg.early_heads.id)
    with lock(out_dir):
        existing = None if force else read_early_report(out_dir)
        if existing and existing.get("recipe") == plain(model_cfg.early_heads.train) and \
                existing.get("layers") == [int(n) for n in model_cfg.early_heads.layers] and \
                existing.get("data", {}).get("recipe") == plain(model_cfg.heads.train):
            print(f"up to date ({out_dir}):\n{early_summary(existing)}")
            return
        bundle = get_bundle(cfg.model, cfg.paths.model_cache)
        report = build_early_heads(bundle.model, bundle.tokenizer, model_cfg, out_dir,
                                   str(project_path(cfg.paths.data_mirror)), str(project_path(cfg.paths.data_cache)))
        print(f"{early_summary(report)}\n-> {out_dir}")


def main(argv: list[str]) -> int:
    try:
        overrides, flags = split_flags(argv, ("--force",), USAGE)
        cfg = check_recipes(compose_config(overrides), "heads", "early_heads")
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        hint = train(cfg, "--force" in flags)
    except (HarnessError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if hint:
        print(hint)
    return 0


if __name__ == "__main__":
    run_script(main)
