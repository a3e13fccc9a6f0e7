"""Compose the project's Hydra config outside `python -m bench.run` (scripts, benchmarks, tests, notebooks)."""

from __future__ import annotations

import copy
import functools

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig

from bench.errors import HarnessError
from bench.paths import PROJECT

CONF = PROJECT / "conf"


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
    """conf/config.yaml with Hydra overrides (`model=...`, `run.limit=3`); a bad override is one HarnessError.
    Each list is composed once per state of conf/ (a composition takes Hydra ~0.2-0.4 s here, and the suite,
    gpu-check's methods part and the scripts compose the same few lists hundreds of times); every caller gets its
    own copy to change. Overrides of `hydra.*` (another search path, whose files are not watched) compose anew."""
    key = tuple(overrides)
    if any(o.lstrip("+~").startswith("hydra.") for o in key):
        return composed(key)
    return copy.deepcopy(composed_once(key, conf_stamp()))


def composed(overrides: tuple[str, ...]) -> DictConfig:
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose("config", overrides=list(overrides))
    except HydraException as err:
        from bench.run.precheck import PrecheckError, check

        try:  # bench.run's own line where it has one (an unknown option with the known ones listed)
            check(list(overrides))
        except PrecheckError as named:
            raise HarnessError(str(named)) from None
        raise HarnessError(str(err).splitlines()[0]) from None


@functools.lru_cache(maxsize=512)
def composed_once(overrides: tuple[str, ...], stamp: tuple[str, int, int]) -> DictConfig:
    return composed(overrides)


def conf_stamp() -> tuple[str, int, int]:
    """(the folder, its YAML files' newest mtime, their number): a file edited, added or removed recomposes."""
    times = [p.stat().st_mtime_ns for p in CONF.rglob("*.yaml")]
    return str(CONF), max(times, default=0), len(times)


def usage_of(doc: str) -> str:
    """A script docstring's usage line: its first line that starts `python `."""
    return next((ln.strip() for ln in doc.splitlines() if ln.strip().startswith("python ")), "")


def split_flags(argv: list[str], flags: tuple[str, ...], usage: str) -> tuple[list[str], set[str]]:
    """A script's argv -> (Hydra overrides, the flags given); an unknown `-x`/`--x` is one HarnessError; -h or
    --help prints the usage and exits."""
    if "-h" in argv or "--help" in argv:
        print(f"usage: {usage}\nHydra overrides (key=value) pick the model and its settings: conf/, docs/models.md")
        raise SystemExit(0)
    given = {a for a in argv if a in flags}
    unknown = [a for a in argv if a.startswith("-") and a not in flags]
    if unknown:
        raise HarnessError(f"unknown option {unknown[0]} (usage: {usage})")
    return [a for a in argv if a not in given], given
