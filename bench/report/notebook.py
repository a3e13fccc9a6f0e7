"""What the notebooks (notebooks/<paper>.py) share: a section per artifact and `Shown` entry, running it as the CLI
does; `SPECREPRO_RESULTS` and `SPECREPRO_<OPTION>` (an artifact's flag, upper case) set the folder and options."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pandas as pd

from bench.errors import HarnessError
from bench.paths import project_path
from bench.report.registry import Artifact, paper_artifacts, produce, resolve

WRITTEN_TO = ("tables", "figures")  # what an artifact writes, under the results dir


def results_dir() -> Path:
    """$SPECREPRO_RESULTS, default `results`; relative to the project root."""
    return project_path(os.environ.get("SPECREPRO_RESULTS") or "results")


def env(name: str, cast=str):
    """$name cast, or None when it is unset or empty."""
    value = os.environ.get(name)
    return cast(value) if value else None


def stamps(results: Path) -> dict[Path, tuple[int, int]]:
    """Every file under the results dir's tables/ and figures/ with its inode and mtime (a write changes both)."""
    files = (p for sub in WRITTEN_TO for p in sorted(Path(results, sub).glob("*")))
    return {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in files if p.is_file() and not p.name.startswith(".")}


def report(name: str, **options) -> tuple[str | list[Path] | None, dict[str, Path]]:
    """Run the artifact `name` on results_dir() with `options` (None: its default), print each file it wrote and
    return (its markdown or paths, {file name: path} written); missing runs: one `error:` line and (None, {})."""
    name, artifact = resolve(name)
    results = results_dir()
    before = stamps(results)
    try:
        out = produce(artifact, results, **{k: v for k, v in options.items() if v is not None})
    except HarnessError as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return None, {}
    written = {p.name: p for p, stamp in stamps(results).items() if before.get(p) != stamp}
    for path in written.values():
        print(path)
    return out, written


def from_env(artifact: Artifact) -> dict:
    """The artifact's options given in the environment: $SPECREPRO_<OPTION>, cast as its flag casts."""
    out = {}
    for flags, cast in [*((("--" + c.replace("_", "-"),), str) for c in artifact.common),
                        *((o.flags, o.kwargs.get("type", str)) for o in artifact.options)]:
        dest = flags[0].lstrip("-").replace("-", "_")
        value = env(f"SPECREPRO_{dest.upper()}", cast)
        if value is not None:
            out[dest] = value
    return out


def sections(paper: str) -> None:
    """Every artifact of the paper, in rank order: a section per shown entry (one with the defaults without)."""
    for artifact in paper_artifacts(paper).values():
        for options in [s.options for s in artifact.shown] or [{}]:
            section(artifact, options)


def section(artifact: Artifact, options: dict) -> None:
    labels = ", ".join(c.label for c in artifact.covers)
    heading = f"## {artifact.full_name}" + (f" ({labels})" if labels else "") + f": {artifact.help}"
    doc = (importlib.import_module(artifact.build.__module__).__doc__ or "").strip()
    show_markdown(f"{heading}\n\n{doc}")
    out, files = report(artifact.full_name, **{**options, **from_env(artifact)})
    show(out if isinstance(out, str) else [files[n].read_text() for n in files if n.endswith(".md")])
    show([p for n, p in files.items() if n.endswith(".png")])
    for name in (n for n in files if n.endswith(".csv")):
        df = pd.read_csv(files[name])
        show(df.drop(columns=[c for c in df.columns if c.endswith("run_id")]))


def ipython():
    """IPython.display under IPython/Jupyter, else None (a plain script prints)."""
    try:
        import IPython.display
    except ImportError:
        return None
    return IPython.display if IPython.get_ipython() is not None else None


def show_markdown(text: str) -> None:
    if shown := ipython():
        shown.display(shown.Markdown(text))
    else:
        print(text)


def show(obj) -> None:
    """Rich display under IPython/Jupyter (a path to a PNG as the image), print when run as a plain script."""
    if obj is None:
        return
    if isinstance(obj, list):
        for item in obj:
            show(item)
        return
    if shown := ipython():
        shown.display(shown.Image(filename=str(obj)) if isinstance(obj, Path) and obj.suffix == ".png" else obj)
    elif isinstance(obj, pd.DataFrame):
        print(obj.to_string(index=False))
    else:
        print(obj)
