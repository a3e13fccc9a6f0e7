"""What the notebooks (notebooks/<paper>.py) share: a section per artifact, run as the CLI does (docs/reports.md)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pandas as pd

from bench.errors import HarnessError
from bench.paths import project_path
from bench.report.declare import Artifact
from bench.report.output import write
from bench.report.registry import paper_artifacts, resolve
from bench.report.select import RunSet


def results_dir() -> Path:
    """$SPECREPRO_RESULTS, default `results`; relative to the project root."""
    return project_path(os.environ.get("SPECREPRO_RESULTS") or "results")


def report(name: str, **options) -> dict[str, Path]:
    """Build the artifact `name` on results_dir() with `options` (None: its default) and write it there, printing
    each file it wrote; returns {file name: path}; missing runs: one `error:` line and {}."""
    name, artifact = resolve(name)
    results = results_dir()
    try:
        built = artifact.report(RunSet.read(results), **{k: v for k, v in options.items() if v is not None})
    except HarnessError as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return {}
    write(built, results)
    written = {Path(f).name: Path(results, f) for f in built.files}
    for path in written.values():
        print(path)
    return written


def from_env(artifact: Artifact) -> dict:
    """The artifact's options given in the environment: $SPECREPRO_<OPTION>, cast as its flag casts."""
    out = {}
    for o in artifact.arguments:
        dest = o.flags[0].lstrip("-").replace("-", "_")
        value = os.environ.get(f"SPECREPRO_{dest.upper()}")
        if value:  # unset or empty: the artifact's default
            out[dest] = o.kwargs.get("type", str)(value)
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
    files = report(artifact.full_name, **{**options, **from_env(artifact)})
    show([files[n].read_text() for n in files if n.endswith(".md")])  # the markdown the CLI prints, if any
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
