"""ProPD Figure 3(a)'s data: the early heads' held-out top-k accuracy copied into results/propd/early_heads.json.

    python scripts/early_heads_report.py [model=smollm2-135m] [paths.results=...]

The heads folder (data/cache/heads/<id>/, `make heads`) is a cache; results/ is what reports and notebooks read,
so the figure can be regenerated from results/ alone. Prints where the file went. Heads that are not built, or a
model without `early_heads`, is one `error:` line and a non-zero exit.
"""

from __future__ import annotations

import json
import sys

from bench.cachefile import atomic_write
from bench.cli import run_script
from bench.errors import HarnessError
from bench.models.heads import early_build, heads_dir
from bench.paths import project_path
from bench.run.compose import compose_config, split_flags
from bench.train.early_heads import read_early_report

USAGE = __doc__.strip().splitlines()[2].strip()


def export(cfg) -> str:
    early = cfg.model.get("early_heads")
    if early is None:
        raise HarnessError(f"model '{cfg.model.name}' has no early heads (model.early_heads)")
    folder = heads_dir(project_path(cfg.paths.model_cache)) / str(early.id)
    report = read_early_report(folder)
    if report is None:
        raise HarnessError(f"early heads '{early.id}' are not built: run `make heads MODEL={cfg.model.name}` "
                           f"(looked in {folder})")
    out = project_path(cfg.paths.results) / "propd" / "early_heads.json"
    # the name runs record (method_settings.early_heads): (a) is matched to (d)'s ProPD run by it
    data = {"model": str(cfg.model.name), "heads": report["heads"], "build": early_build(early, folder),
            "layers": report["layers"],
            "k": report["k"], "accuracy": report["accuracy"], "accuracy_untrained": report["accuracy_untrained"],
            "positions": report["positions"]["heldout"], "train_positions": report["positions"]["train"],
            "train_seconds": report["train_seconds"]}
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, json.dumps(data, indent=1) + "\n")
    return f"early heads accuracy for {cfg.model.name} -> {out}"


def main(argv: list[str]) -> int:
    try:
        overrides, _ = split_flags(argv, (), USAGE)
        print(export(compose_config(overrides)))
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    run_script(main)
