"""Model shapes: the fields of each model's `config.json` (bench/shapes/<name>.yaml, README.md beside them), read by
the cost model (bench.cost.profiles.ModelShape) and by the random-weight builder (bench.models.random_init) alike,
so neither imports the other."""

from __future__ import annotations

from pathlib import Path

import yaml

from bench.errors import HarnessError

HERE = Path(__file__).parent


def read_yaml(folder: Path, name: str) -> dict:
    """<folder>/<name>.yaml; a missing entry is one error naming the entries there are."""
    path = folder / f"{name}.yaml"
    if not path.is_file():
        have = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
        raise HarnessError(f"no {folder.name} entry {name!r} (have: {have})")
    # libyaml's parser where PyYAML has it (the same safe constructor): a projected page reads these hundreds of times
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def shape_config(name: str) -> dict:
    """The config.json fields of a model shape, e.g. to build it with random weights (bench.models.random_init)."""
    return read_yaml(HERE, name)
