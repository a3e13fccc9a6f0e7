"""Figures shared by every paper: Agg figures outside pyplot, atomic PNG/CSV writes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench.cachefile import atomic_file, atomic_write


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
