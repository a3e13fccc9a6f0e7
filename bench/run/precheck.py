"""The command line of `python -m bench.run`, checked before Hydra's main composes it: unknown config group options,
config files that are not valid YAML and keys the config does not have (`run.limt=3`) are one `error:` line
(exit 2), where Hydra would print a multi-line error.

Options are looked up in conf/ and in every `file://` folder of a `hydra.searchpath=[...]` override, as Hydra
does. The YAML checked is the primary config and the selected option of every group (command line, else the
primary config's defaults list).
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from bench.paths import PROJECT

CONF = PROJECT / "conf"
GROUPS = ("model", "dataset", "method", "logger", "tree", "datastore", "experiment")
SWEEP_FUNCTIONS = ("glob(", "choice(", "range(", "interval(", "tag(", "sort(", "shuffle(")


class PrecheckError(Exception):
    """A bad command line, reported as one line."""


def group_options(group: str, roots: tuple[Path, ...] = ()) -> list[str]:
    """A config group's options in conf/ and the extra config roots; nested folders (conf/experiment/<paper>/)
    give `<paper>/<name>`."""
    found = set()
    for root in (CONF, *roots):
        folder = root / group
        found.update(str(p.relative_to(folder).with_suffix("")) for p in folder.rglob("*.yaml"))
    return sorted(found)


def search_roots(argv: list[str]) -> tuple[Path, ...]:
    """Local folders named by `hydra.searchpath=[file://a,file://b]` (pkg:// entries are not folders)."""
    roots = []
    for arg in argv:
        key, _, value = arg.lstrip("+").partition("=")
        if key != "hydra.searchpath":
            continue
        for entry in value.strip().strip("[]").split(","):
            entry = entry.strip().strip("'\"")
            if entry.startswith("file://"):
                roots.append(Path(entry[len("file://"):]))
            elif entry and "://" not in entry:
                roots.append(Path(entry))
    return tuple(roots)


def yaml_problem(path: Path) -> str | None:
    """None if `path` loads as a YAML mapping as Hydra loads it (OmegaConf); else one line saying why not."""
    try:
        loaded = OmegaConf.load(path)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{err.problem or err.context or type(err).__name__}{where}"
    except Exception as err:  # noqa: BLE001 - OmegaConf and yaml raise many types; each is one line here
        return (str(err).strip().splitlines() or [type(err).__name__])[0]
    if not OmegaConf.is_dict(loaded):
        return "not a mapping of keys to values"
    return None


def selected(argv: list[str]) -> dict[str, list[str]]:
    """{group: [options]} chosen on the command line (a sweep's comma-separated values split). A group placed
    at another package (`tree@method.tree=...`, Medusa's own tree) counts as its group."""
    chosen: dict[str, list[str]] = {}
    for arg in argv:
        if "=" not in arg or arg.startswith(("+", "~", "hydra")):
            continue
        key, value = arg.split("=", 1)
        group = key.split("@", 1)[0]
        if group in GROUPS:
            chosen.setdefault(group, []).extend(v for v in value.split(",") if v)
    return chosen


def defaults(primary: Path) -> dict[str, str]:
    """{group: option} of the primary config's defaults list (entries like `model: smollm2-135m`)."""
    raw = yaml.safe_load(primary.read_text()) or {}
    out = {}
    for entry in raw.get("defaults") or []:
        if isinstance(entry, dict):
            for key, value in entry.items():
                if key in GROUPS and isinstance(value, str):
                    out[key] = value
    return out


def check(argv: list[str]) -> None:
    """PrecheckError for an unknown group option or a config file (primary or selected) that is not YAML."""
    roots = search_roots(argv)
    primary = CONF / "config.yaml"
    problem = yaml_problem(primary)
    if problem:
        raise PrecheckError(f"malformed YAML in config {primary}: {problem}")
    chosen = {k: [v] for k, v in defaults(primary).items()} | selected(argv)
    for group, values in chosen.items():
        known = group_options(group, roots)
        for v in values:
            if v.startswith(SWEEP_FUNCTIONS):
                continue
            if v not in known:
                near = difflib.get_close_matches(v, known, n=3, cutoff=0.6)  # a typo's likely meaning first
                nearest = f"nearest: {', '.join(near)}; " if near else ""
                raise PrecheckError(f"unknown {group} '{v}' ({nearest}known: {', '.join(known)})")
            path = next(p for p in (r / group / f"{v}.yaml" for r in (CONF, *roots)) if p.is_file())
            problem = yaml_problem(path)
            if problem:
                raise PrecheckError(f"malformed YAML in {group} config {path}: {problem}")


def first_values(argv: list[str]) -> list[str] | None:
    """The overrides with each sweep reduced to its first value (what one job of it composes), Hydra's own settings
    (hydra.run.dir, ...) left out; None when the line changes where configs come from or how jobs launch (search
    path, launcher), which only Hydra's main composes faithfully."""
    out = []
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue  # -m / --multirun and other flags
        key, value = arg.split("=", 1)
        key_ = key.lstrip("+~")
        if key_.startswith(("hydra.searchpath", "hydra/")):
            return None
        if key_.startswith("hydra."):
            continue  # Hydra's own output folders, logging and job settings: not the run's config
        if value.startswith(SWEEP_FUNCTIONS):
            continue
        if "," in value and not value.startswith(("[", "{", "'", '"')):
            value = value.split(",", 1)[0]
        out.append(f"{key}={value}")
    return out


def compose_error(overrides: list[str]) -> str | None:
    """Hydra's composition error for these overrides, or None when they compose."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            compose("config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        return f"{err}\n{err.__cause__ or ''}"  # Hydra's first line; the cause says why (e.g. not in struct)
    return None


def check_keys(argv: list[str]) -> None:
    """PrecheckError naming a key the config does not have (`run.limt=3`) and the keys beside it, or Hydra's
    first line for any other override it cannot apply."""
    overrides = first_values(argv)
    if overrides is None:
        return
    text = compose_error(overrides)
    if text is None:
        return
    bad = re.search(r"Could not override '([^']+)'", text)
    if bad and "not in struct" in text:
        key = bad.group(1)
        parent, _, leaf = key.rpartition(".")
        node = composed_node(overrides, parent)
        known = sorted(node) if OmegaConf.is_dict(node) else []
        near = difflib.get_close_matches(leaf, known, n=3, cutoff=0.6)
        nearest = f"nearest: {', '.join(near)}; " if near else ""
        where = f"known in {parent}: {', '.join(known)}" if parent else f"top-level keys: {', '.join(known)}"
        raise PrecheckError(f"unknown key '{key}' ({nearest}{where}; a new key is added with +{key}=...)")
    raise PrecheckError(text.strip().splitlines()[0])


def composed_node(overrides: list[str], parent: str):
    """The config node at `parent` ("" for the root) as the command line's group choices compose it (its other
    overrides left out: another of them may be bad too); None where even that does not compose."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    choices = [o for o in overrides if o.split("=", 1)[0].split("@", 1)[0] in GROUPS]
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            root = compose("config", overrides=choices)
    except (HydraException, OmegaConfBaseException):
        return None
    return OmegaConf.select(root, parent) if parent else root


REQUIRED = ("model", "dataset", "method", "run", "paths")  # what every run reads


def check_removals(argv: list[str]) -> None:
    """PrecheckError for `~method` and the like: a run cannot do without these."""
    for arg in argv:
        if arg.startswith("~") and arg[1:].split("=", 1)[0].split("@", 1)[0] in REQUIRED:
            raise PrecheckError(f"'{arg}' removes what every run needs ({', '.join(REQUIRED)}); choose another "
                                "option instead, e.g. method=ar")


def check_names(argv: list[str]) -> None:
    """Fail fast with one `error:` line (exit 2) on a bad command line, before Hydra prints a multi-line error."""
    try:
        check(argv)
        check_removals(argv)
        check_keys(argv)
    except PrecheckError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
