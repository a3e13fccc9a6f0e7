"""Figures and notebook helpers shared by every paper: Agg figures outside pyplot, atomic PNG/CSV writes."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench.cachefile import atomic_file, atomic_write
from bench.paths import project_path


def new_figure(**kw) -> Figure:
    """An Agg figure outside pyplot: no global backend switch, nothing left open in a notebook."""
    fig = Figure(**kw)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig, path: Path) -> Path:
    """PNG via a temp file in the same folder and a rename: readers never see a partial image."""
    with atomic_file(path) as f:
        fig.savefig(f, format="png", dpi=130, bbox_inches="tight")
    return path


def save_csv(df: pd.DataFrame, path: Path) -> Path:
    atomic_write(path, df.to_csv(index=False))
    return path


def figures_dir(results_dir) -> Path:
    return Path(results_dir, "figures")


def wrap(text: str, width: int = 60) -> str:
    return "\n".join(textwrap.wrap(text, width))


def notebook_results(env: str = "SPECREPRO_RESULTS") -> Path:
    """The notebooks' results dir: $SPECREPRO_RESULTS, default `results`; relative to the project root."""
    return project_path(os.environ.get(env) or "results")


def notebook_model(env: str = "SPECREPRO_MODEL") -> str | None:
    """$SPECREPRO_MODEL, or None: the model of the most recent matching run."""
    return os.environ.get(env) or None


def show(obj) -> None:
    """Notebook helper: rich display under IPython/Jupyter, print when run as a plain script."""
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
