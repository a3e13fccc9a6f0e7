"""The project's one path helper: relative paths in configs and CLIs are relative to the project root."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def project_path(p: str | os.PathLike) -> Path:
    """`~` expanded; a relative path is taken relative to the project root, not the working directory."""
    p = Path(os.path.expanduser(str(p)))
    return p if p.is_absolute() else PROJECT / p
