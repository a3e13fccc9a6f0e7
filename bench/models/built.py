"""Whether a trained artifact (`make heads`, `make draft`) was built from the recipe the model config names now.

`make heads` rebuilds heads whose report holds another recipe; a run found them and used them without a word
(heads trained for 3 steps on 0 positions ran as the model's heads). A run now says so in one warning line, and
the artifact's recorded name carries it."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from omegaconf import OmegaConf


def report_digest(report: Path) -> str:
    """"-<8 hex>" of a trained artifact's report, which its build writes anew each time ("" before it exists): the
    recorded name of a draft or heads trained again under the same id differs, as its weights do (training stops
    on a clock, so two builds of one recipe are not the same weights)."""
    return "-" + hashlib.sha1(report.read_bytes()).hexdigest()[:8] if report.is_file() else ""


def recipe_differs(report: Path, recipe, what: str, make: str) -> list[str]:
    """The recipe keys on which `report` (the build's JSON, its "recipe") and the config's `recipe` differ, after a
    warning line naming them; [] when they agree or either is missing."""
    if recipe is None or not report.is_file():
        return []
    try:
        built = json.loads(report.read_text()).get("recipe") or {}
    except (OSError, ValueError):  # a damaged report: the artifact's own load reports damage
        return []
    wanted = OmegaConf.to_container(recipe, resolve=True) if not isinstance(recipe, dict) else recipe
    differ = sorted(k for k in set(wanted) | set(built) if wanted.get(k) != built.get(k))
    if differ:
        print(f"warning: {what} were built with another recipe than the model config's ({', '.join(differ)}): "
              f"{make} rebuilds them", file=sys.stderr)
    return differ
