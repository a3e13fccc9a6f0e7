"""Compose the project's Hydra config outside `python -m bench.run` (scripts, benchmarks, tests, notebooks)."""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig

from bench.errors import HarnessError
from bench.paths import PROJECT


def script_main(argv: list[str], usage: str, flags: tuple[str, ...], run, errors=(HarnessError,)) -> int:
    """A script's main: `run(config, flags given)` on the config its argv composes; `errors` (bad input) are one
    `error:` line on stderr and exit status 1."""
    import sys

    try:
        overrides, given = split_flags(argv, flags, usage)
        run(compose_config(overrides), given)
    except errors as err:
        sys.exit(f"error: {err}")
    return 0


def compose_config(overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """conf/config.yaml with Hydra overrides (`model=...`, `run.limit=3`); a bad override is one HarnessError."""
    try:
        with initialize_config_dir(config_dir=str(PROJECT / "conf"), version_base="1.3"):
            return compose("config", overrides=list(overrides))
    except HydraException as err:
        raise HarnessError(str(err).splitlines()[0]) from None


def split_flags(argv: list[str], flags: tuple[str, ...], usage: str) -> tuple[list[str], set[str]]:
    """A script's argv -> (Hydra overrides, the flags given); an unknown `-x`/`--x` is one HarnessError."""
    given = {a for a in argv if a in flags}
    unknown = [a for a in argv if a.startswith("-") and a not in flags]
    if unknown:
        raise HarnessError(f"unknown option {unknown[0]} (usage: {usage})")
    return [a for a in argv if a not in given], given
