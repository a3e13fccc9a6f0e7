"""What the notebooks (notebooks/<paper>.py) share: the results dir and options from the environment, running one
artifact as `python -m bench.report <paper>/<artifact>` does, and showing what it wrote.

    out, files = report("propd/table1", dataset="alpaca")   # prints each file it wrote
    show(out)                                                 # its markdown (or its paths)
    show(pd.read_csv(files["propd_table1.csv"]))

or, for a table and the numbers behind it, `show_report("propd/table1", "propd_table1.csv", drop=("ar_run_id",))`.

Environment: `SPECREPRO_RESULTS` (default `results`; relative to the project root), `SPECREPRO_MODEL` (default:
the model of the most recent matching run), and the notebooks' own (`env`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd

from bench.errors import HarnessError
from bench.paths import project_path
from bench.report.registry import resolve

WRITTEN_TO = ("tables", "figures")  # what an artifact writes, under the results dir


def results_dir() -> Path:
    """$SPECREPRO_RESULTS, default `results`; relative to the project root."""
    return project_path(os.environ.get("SPECREPRO_RESULTS") or "results")


def env(name: str, cast=str):
    """$name cast, or None when it is unset or empty."""
    value = os.environ.get(name)
    return cast(value) if value else None


def stamps(results: Path) -> dict[Path, tuple[int, int]]:
    """Every file under the results dir's tables/ and figures/ with its inode and mtime (a write replaces the
    file, so both change)."""
    files = (p for sub in WRITTEN_TO for p in sorted(Path(results, sub).glob("*")))
    return {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in files if p.is_file() and not p.name.startswith(".")}


def report(name: str, **options) -> tuple[str | list[Path] | None, dict[str, Path]]:
    """Run the artifact `name` on results_dir() with `options` (None: the artifact's default; `model`, when the
    artifact takes one: $SPECREPRO_MODEL). Prints each file it wrote and returns (what it returned: its markdown
    or its paths, {file name: path} of what it wrote). Missing runs are one `error:` line, (None, {}), so the
    notebook's other sections still run."""
    name, artifact = resolve(name)
    if "model" in artifact.common:
        options.setdefault("model", env("SPECREPRO_MODEL"))
    results = results_dir()
    before = stamps(results)
    try:
        out = artifact.load()(str(results), **{k: v for k, v in options.items() if v is not None})
    except HarnessError as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return None, {}
    written = {p.name: p for p, stamp in stamps(results).items() if before.get(p) != stamp}
    for path in written.values():
        print(path)
    return out, written


def show_report(name: str, csv: str, drop: tuple[str, ...] = (), **options):
    """A table's section: run the artifact (`report`), show its markdown, then the numbers behind it: the `csv` it
    wrote without the `drop` columns (run ids), when it wrote one. Returns report()'s (out, files)."""
    out, files = report(name, **options)
    show(out)
    if csv in files:
        show(pd.read_csv(files[csv]).drop(columns=list(drop)))
    return out, files


def show(obj) -> None:
    """Rich display under IPython/Jupyter (a path to a PNG as the image), print when run as a plain script."""
    if obj is None:
        return
    if isinstance(obj, list):
        for item in obj:
            show(item)
        return
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(Image(filename=str(obj)) if isinstance(obj, Path) and obj.suffix == ".png" else obj)
    elif isinstance(obj, pd.DataFrame):
        print(obj.to_string(index=False))
    else:
        print(obj)
