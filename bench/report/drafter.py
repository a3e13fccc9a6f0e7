"""Which drafter a draft-model run used ("eagle:<head id>", "trained:<draft id>", ...; None without one), so a
report never mixes one drafter's runs with another's; `choose(runs, draft)` picks one drafter's runs."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path

import yaml

from bench.errors import MissingRunsError
from bench.run.store import Run

DRAFT_METHODS = ("sd", "specinfer", "sequoia", "dyspec", "holistic", "hf_assisted")  # and ouroboros*
DEFAULT_SOURCE = "trained"  # conf/model/*.yaml: a run that recorded no source used the default
WORDS = {"eagle": "EAGLE head", "eagle3": "EAGLE-3 head", "trained": "distilled"}
# bench.models.loading.ModelBundle.draft_label() of an EAGLE head: eagle[3]-<id>-<source>[-<report digest>]
EAGLE_LABEL = re.compile(r"^(eagle3?)-(.+)-(trained|init|hub|path)(-[0-9a-f]{8})?$")
# libyaml's parser where PyYAML was built with it: a run's config.yaml takes ~40 ms in the pure-Python one, and a
# page reads dozens (the same safe constructor either way)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def uses_draft(method: str | None) -> bool:
    return method in DRAFT_METHODS or str(method).startswith("ouroboros")


@functools.lru_cache(maxsize=4096)
def config_draft(path: str, stamp: tuple) -> tuple[str | None, str | None, str | None]:
    """(model.draft.source, model.draft.id, the id of the head it names: model.eagle's or model.eagle3's) of a
    config.yaml; `stamp` (mtime, size) keys the cache."""
    try:
        model = (yaml.load(Path(path).read_text(), Loader=SAFE_LOADER) or {}).get("model") or {}
    except (OSError, yaml.YAMLError):
        return None, None, None
    draft = model.get("draft") if isinstance(model.get("draft"), dict) else {}
    block = "eagle3" if draft.get("source") == "eagle3" else "eagle"
    eagle = model.get(block) if isinstance(model.get(block), dict) else {}
    return draft.get("source"), draft.get("id"), eagle.get("id") or eagle.get("name")


def from_config(run: Run) -> str | None:
    path = Path(run.path, "config.yaml")
    if not path.is_file():
        return None
    stat = path.stat()
    source, draft_id, eagle_id = config_draft(str(path), (stat.st_mtime_ns, stat.st_size))
    if source is None:
        return None
    ident = eagle_id if source in ("eagle", "eagle3") else draft_id
    return f"{source}:{ident}" if ident else str(source)


def from_settings(run: Run) -> str | None:
    s = run.settings
    name, label = str(s.get("draft") or ""), str(s.get("draft_label") or "")
    if name.startswith(("eagle:", "eagle3:")):  # bench.models.eagle_draft.EagleDraft's name_or_path
        return name
    found = EAGLE_LABEL.match(label)
    if found:
        return f"{found.group(1)}:{found.group(2)}"
    # a trained draft loads from data/cache/drafts/<id>/: its name_or_path ends in the id
    return f"{DEFAULT_SOURCE}:{Path(name).name}" if name else None


def drafter(run: Run) -> str | None:
    """"eagle:<id>", "eagle3:<id>", "trained:<id>" (...), or None for a method without a draft model."""
    if not uses_draft(run.method):
        return None
    return from_config(run) or from_settings(run) or DEFAULT_SOURCE


def describe(name: str | None) -> str:
    """"EAGLE head <id>" / "distilled <id>" (a caption's "draft: ..."); "none" without one."""
    if name is None:
        return "none"
    source, _, ident = name.partition(":")
    return " ".join(x for x in (WORDS.get(source, source), ident or "(id not recorded)") if x)


def present(runs: Iterable[Run]) -> list[str]:
    """The drafters of these runs, the distilled ones first, then by name (a page's fixed order)."""
    return sorted({d for d in map(drafter, runs) if d is not None},
                  key=lambda d: (not d.startswith(f"{DEFAULT_SOURCE}:") and d != DEFAULT_SOURCE, d))


def matches(name: str | None, wanted: str) -> bool:
    """`wanted` is a drafter's full name or its source ("eagle", "eagle3", "trained")."""
    return name is not None and (name == wanted or name.partition(":")[0] == wanted)


def latest_drafter(runs: list[Run]) -> str | None:
    """The drafter of the most recent draft-model run (runs oldest first); None without one."""
    return next((d for d in map(drafter, reversed(runs)) if d is not None), None)


def choose(runs: list[Run], draft: str | None = None) -> tuple[list[Run], str | None]:
    """(the runs of one drafter plus those without a drafter, that drafter's name). `draft`: a full name or a
    source (the latest matching drafter), default that of the latest draft-model run; none: MissingRunsError."""
    if draft is None:
        name = latest_drafter(runs)
    else:
        name = latest_drafter([r for r in runs if matches(drafter(r), draft)])
        if name is None:
            have = ", ".join(present(runs)) or "none"
            raise MissingRunsError(f"no runs with draft '{draft}' (drafters of these runs: {have})")
    return [r for r in runs if drafter(r) in (None, name)], name
