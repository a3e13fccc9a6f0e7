"""`make eagle3`: train a target's EAGLE-3 head (bench/train/eagle3.py) into data/cache/eagle3/<id>/.

    python scripts/train_eagle3.py [model=smollm2-135m] [--force] [model.eagle3.train.max_minutes=1 ...]

The recipe is the model config's `eagle3.train` block, its data the `data` block within (the target's states over
its own answers and over text, cached in data/cache/eagle3/data/, shared by every retraining). A head whose report
matches the recipe and the target is kept unless --force. Prints held-out agreement per depth and source, training
and cost; with the model's EAGLE-1 head trained (`make eagle`), that head's agreement on the same held-out positions
beside it (the report's `eagle1`, added to a kept head's report too); the last line says how to run with it. Bad
input is one `error:` line and a non-zero exit.
"""

from __future__ import annotations

from bench.cachefile import lock
from bench.cli import run_script
from bench.errors import HarnessError
from bench.models.eagle3 import eagle3_dir
from bench.paths import project_path
from bench.run.compose import script_main
from bench.run.runner import get_bundle
from bench.train.eagle3 import beside_eagle1, build_eagle3, read_report, summary
from bench.train.recipes import check_recipes, plain
from data.loaders import DataError

USAGE = "train_eagle3.py [model=<name>] [--force] [overrides...]"


def train(cfg, force: bool) -> None:
    model_cfg = cfg.model
    eagle3 = model_cfg.get("eagle3")
    if eagle3 is None or eagle3.get("train") is None:
        raise HarnessError(f"model '{model_cfg.name}' has no eagle3.train recipe to train an EAGLE-3 head with: see "
                           "conf/model/smollm2-135m.yaml")
    cache = eagle3_dir(project_path(cfg.paths.model_cache))
    out_dir = cache / str(eagle3.id)
    with lock(out_dir):  # a second `make eagle3` waits, then finds the head up to date
        bundle = get_bundle(model_cfg, cfg.paths.model_cache)
        existing = None if force else read_report(out_dir, bundle.model)
        target = f"{model_cfg.target.source}:{model_cfg.target.id}"
        where = (str(project_path(cfg.paths.data_mirror)), str(project_path(cfg.paths.data_cache)))
        if existing and existing.get("recipe") == plain(eagle3.train) and existing.get("target_source") == target:
            report, head, foot = existing, f"up to date ({out_dir}):\n", ""
        else:
            report = build_eagle3(bundle.model, bundle.tokenizer, model_cfg, out_dir, cache, *where)
            head, foot = "", f"\n-> {out_dir}"
        print(f"{head}{summary(beside_eagle1(report, out_dir, bundle, model_cfg, cache, *where))}{foot}")
    if eagle3.get("source") != "trained":
        print(f"to use it: model.eagle3.source=trained (model {model_cfg.name})")


def main(argv: list[str]) -> int:
    return script_main(argv, USAGE, ("--force",),
                       lambda cfg, flags: train(check_recipes(cfg, "eagle3"), "--force" in flags),
                       (HarnessError, DataError))


if __name__ == "__main__":
    run_script(main)
