"""Caches that several processes share (models, references, curves, statistics, datastores, drafts, items).

A cache is written under a hidden temporary name beside it and renamed into place (atomic on one filesystem):
readers find nothing or all of it. It is built under `<path>.lock` and the builder looks again once it holds the
lock, so of N processes that find it missing (a sweep's jobs, pytest workers) one builds, the others wait and
reuse it. One that exists but does not load (a kill, a full disk, a hand edit) is reported in one line on stderr,
removed and rebuilt, or, if only a make step builds it, is a one-line HarnessError naming that step.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from filelock import FileLock

from bench.errors import HarnessError


class CorruptCache(Exception):
    """A cache that exists but cannot be used; the message says why, in one line."""


# What loaders raise on a cut-off or garbled cache: json/numpy (ValueError, EOFError), a missing part (OSError),
# JSON of the wrong shape (KeyError, TypeError, IndexError), our own checks (CorruptCache).
READ_ERRORS = (CorruptCache, ValueError, KeyError, TypeError, IndexError, EOFError, OSError)


def lock(path) -> FileLock:
    """`<path>.lock`; one instance per path and process (is_singleton), so a nested lock re-enters, not waits."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(f"{path}.lock", is_singleton=True)


def remove(path) -> None:
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clear_leftovers(path) -> None:
    """Remove the temporaries a killed writer of `path` left. Call it holding the cache's lock (then no writer of
    this cache is alive); the pattern is exactly temp_beside's, so a cache whose name extends this one's is spared."""
    path = Path(path)
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.(tmp|old)")
    for p in path.parent.iterdir() if path.parent.is_dir() else ():
        if pattern.fullmatch(p.name):
            remove(p)


def temp_beside(path: Path, make) -> Path:
    """A fresh hidden temporary file or folder (`make`: tempfile.mkstemp or mkdtemp) beside `path`."""
    if lock(path).is_locked:
        clear_leftovers(path)
    made = make(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    if isinstance(made, tuple):  # mkstemp: (open descriptor, name)
        os.close(made[0])
    return Path(made[1] if isinstance(made, tuple) else made)


@contextlib.contextmanager
def atomic_file(path):
    """An open binary file to fill; when the block ends without error it replaces `path`, else it is removed."""
    path = Path(path)
    tmp = temp_beside(path, tempfile.mkstemp)
    try:
        with tmp.open("wb") as f:
            yield f
        tmp.chmod(0o644)  # mkstemp makes it private; a cache is as readable as any file the harness writes
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(path, data: str | bytes) -> None:
    with atomic_file(path) as f:
        f.write(data.encode() if isinstance(data, str) else data)


@contextlib.contextmanager
def atomic_dir(path):
    """A fresh folder to fill; when the block ends without error it replaces `path` (an old folder is moved aside
    first, since a folder cannot be renamed over a non-empty one), else it is removed."""
    path = Path(path)
    tmp = temp_beside(path, tempfile.mkdtemp)
    try:
        yield tmp
        tmp.chmod(0o755)
        for f in tmp.rglob("*"):  # safetensors and mkstemp write 0600: a cache is as readable as other files
            f.chmod(0o755 if f.is_dir() else 0o644)
        old = tmp.with_suffix(".old")
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        remove(old)
    finally:
        remove(tmp)


def reason(err: BaseException) -> str:
    first = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {first}"[:200] if first else type(err).__name__


def report_corrupt(path, err: BaseException, action: str = "rebuilding") -> None:
    print(f"cache: {path} is corrupt ({reason(err)}); {action}", file=sys.stderr)


def load_or_build(path, load, build, what: str):
    """The value of the cache at `path`: `load(path)` if it is there and loads, else `build(path)`, which writes it
    (atomically) and returns the value; at most one process builds. `load` signals a corrupt cache by raising one
    of READ_ERRORS; such a cache is reported (`what`, e.g. "forward-cost curve"), removed and rebuilt."""
    path = Path(path)
    if path.exists():
        with contextlib.suppress(*READ_ERRORS):  # the common case, without the lock; a failure is decided below
            return load(path)
    with lock(path):
        if path.exists():
            try:
                return load(path)  # another process built it while we waited
            except READ_ERRORS as err:
                report_corrupt(f"{what} {path}", err)
                remove(path)
        return build(path)


def load_or_fail(path, load, what: str, how: str):
    """`load(path)` for a cache that only a make step builds (`how`, e.g. "`make draft`"); a corrupt one is a
    one-line HarnessError naming `what` and `how`. A failed load is tried once more under the lock, since a
    rebuild may have been replacing the cache at that moment."""
    with contextlib.suppress(*READ_ERRORS):
        return load(path)
    with lock(path):
        try:
            return load(path)
        except READ_ERRORS as err:
            raise HarnessError(f"{what} is corrupt ({reason(err)}): rebuild it with {how}") from None


def save_keyed_tensors(folder, meta: dict, tensors: dict, meta_name: str, tensors_name: str) -> None:
    """The cache folder load_keyed_tensors reads (`meta` holds the "key" it is built for), written atomically."""
    from safetensors.torch import save_file

    with atomic_dir(folder) as tmp:
        save_file(tensors, str(tmp / tensors_name))
        (tmp / meta_name).write_text(json.dumps(meta, indent=2) + "\n")


def load_keyed_tensors(folder, key: dict, meta_name: str, tensors_name: str) -> tuple[dict, dict]:
    """(meta, tensors) of a cache folder holding `meta_name` (JSON with the "key" it was built for) and a
    safetensors file; CorruptCache if the key differs or the tensors do not load (READ_ERRORS for the rest)."""
    from safetensors.torch import load_file

    meta = json.loads((Path(folder) / meta_name).read_text())
    if meta["key"] != key:
        raise CorruptCache("its recipe differs from the one its name was made from")
    try:
        tensors = load_file(str(Path(folder) / tensors_name))
    except Exception as err:  # noqa: BLE001 - safetensors raises its own error type
        raise CorruptCache(reason(err)) from None
    return meta, tensors

