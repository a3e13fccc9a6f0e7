"""`make draft`: distil a small draft model from a target into data/cache/drafts/<id>/.

    python scripts/train_draft.py [model=smollm2-135m] [--force] [model.draft.train.max_minutes=1 ...]

The recipe is the model config's `draft.train` block (bench/train/draft.py). A model whose draft is not a
trained one (e.g. `draft: null`, or a hub draft) gets the reference recipe of conf/model/smollm2-135m.yaml
and the id `<model>-draft`; the last line then says how to point the model at it. A draft whose report
already matches the recipe and the target is kept unless --force. Prints one summary line: top-1 agreement
with the target on held-out text (per source), relative cost per token, trained tokens and minutes.
Missing data, weights or an unknown model is one `error:` line and a non-zero exit.
"""

from __future__ import annotations

import sys

from omegaconf import OmegaConf, open_dict

from bench.cli import run_script
from bench.errors import HarnessError
from bench.models.loading import drafts_dir
from bench.paths import PROJECT, project_path
from bench.run.compose import compose_config, split_flags, usage_of
from bench.run.runner import get_bundle
from bench.train.draft import build_or_reuse, summary_line
from bench.train.recipes import check_recipes
from data.loaders import DataError

REFERENCE_RECIPE = PROJECT / "conf" / "model" / "smollm2-135m.yaml"


def with_trained_draft(model_cfg):
    """The model config, its draft made a trained one (reference recipe) if it is not already."""
    draft = model_cfg.get("draft")
    if draft is not None and draft.get("source") == "trained" and draft.get("train") is not None:
        return model_cfg, None
    recipe = OmegaConf.load(REFERENCE_RECIPE).draft.train
    name = f"{model_cfg.name}-draft"
    model_cfg = OmegaConf.create(OmegaConf.to_container(model_cfg, resolve=True))
    with open_dict(model_cfg):
        model_cfg.draft = {"name": name, "source": "trained", "id": name, "vocab": recipe.vocab, "train": recipe}
    hint = (f"to use it: model.draft='{{name: {name}, source: trained, id: {name}, vocab: {recipe.vocab}}}' "
            "(or set it in conf/model/)")
    return model_cfg, hint


def build_or_reuse_draft(cfg, model_cfg, out_dir, force: bool = False) -> tuple[dict, bool]:
    """(report, built): the draft `model_cfg` names in out_dir, reused if up to date, else built from cfg's target
    with cfg's data paths (`make draft` and `make draft-sweep`)."""
    return build_or_reuse(model_cfg, out_dir, lambda: get_bundle(cfg.model, cfg.paths.model_cache),
                          str(project_path(cfg.paths.data_mirror)), str(project_path(cfg.paths.data_cache)), force)


def main(argv: list[str]) -> int:
    try:
        overrides, flags = split_flags(argv, ("--force",), usage_of(__doc__))
        cfg = check_recipes(compose_config(overrides), "draft")
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    force = "--force" in flags
    try:
        model_cfg, hint = with_trained_draft(cfg.model)
        out_dir = drafts_dir(project_path(cfg.paths.model_cache)) / str(model_cfg.draft.id)
        report, built = build_or_reuse_draft(cfg, model_cfg, out_dir, force)
        print(f"{'' if built else 'up to date: '}{summary_line(report)} -> {out_dir}")
        if hint:
            print(hint)
    except (HarnessError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    run_script(main)
