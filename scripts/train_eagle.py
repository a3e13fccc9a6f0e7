"""`make eagle`: train a target's EAGLE-1 head (bench/train/eagle.py) into data/cache/eagle/<id>/.

    python scripts/train_eagle.py [model=smollm2-135m] [--force] [model.eagle.train.max_minutes=1 ...]

The recipe is the model config's `eagle.train` block; the data are the Medusa heads' self-distillation (the model
config's `heads.train` recipe, cached in data/cache/heads/selfdistill/ and shared with `make heads`). A head whose
report matches the recipe and the target is kept unless --force. Prints held-out agreement per depth, training and
cost; the last line says how to run with it. Bad input is one `error:` line and a non-zero exit.
"""

from __future__ import annotations

from bench.cachefile import lock
from bench.cli import run_script
from bench.errors import HarnessError
from bench.models.eagle import eagle_dir
from bench.models.heads import heads_dir
from bench.paths import project_path
from bench.run.compose import script_main
from bench.run.runner import get_bundle
from bench.train.eagle import build_eagle, read_report, summary
from bench.train.recipes import check_recipes, plain
from data.loaders import DataError

USAGE = "train_eagle.py [model=<name>] [--force] [overrides...]"


def train(cfg, force: bool) -> None:
    model_cfg = cfg.model
    eagle = model_cfg.get("eagle")
    if eagle is None or eagle.get("train") is None or model_cfg.get("heads") is None:
        raise HarnessError(f"model '{model_cfg.name}' has no eagle.train recipe (and heads.train data recipe) to "
                           "train an EAGLE head with: see conf/model/smollm2-135m.yaml")
    cache = project_path(cfg.paths.model_cache)
    out_dir = eagle_dir(cache) / str(eagle.id)
    with lock(out_dir):  # a second `make eagle` waits, then finds the head up to date
        existing = None if force else read_report(out_dir)
        target = f"{model_cfg.target.source}:{model_cfg.target.id}"
        if existing and existing.get("recipe") == plain(eagle.train) and existing.get("target_source") == target \
                and existing.get("data", {}).get("heads_recipe") == plain(model_cfg.heads.train):
            print(f"up to date ({out_dir}):\n{summary(existing)}")
        else:
            bundle = get_bundle(model_cfg, cfg.paths.model_cache)
            report = build_eagle(bundle.model, bundle.tokenizer, model_cfg, out_dir, heads_dir(cache),
                                 str(project_path(cfg.paths.data_mirror)), str(project_path(cfg.paths.data_cache)))
            print(f"{summary(report)}\n-> {out_dir}")
    if eagle.get("source") != "trained":
        print(f"to use it: model.eagle.source=trained (model {model_cfg.name})")


def main(argv: list[str]) -> int:
    # its data is the heads' self-distillation (heads.train)
    return script_main(argv, USAGE, ("--force",),
                       lambda cfg, flags: train(check_recipes(cfg, "eagle", "heads"), "--force" in flags),
                       (HarnessError, DataError))


if __name__ == "__main__":
    run_script(main)
