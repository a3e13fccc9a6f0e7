"""Figures shared by every paper: Agg figures outside pyplot, atomic PNG writes, error bars from intervals."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench.cachefile import atomic_file


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


def wrap(text: str, width: int = 60) -> str:
    return "\n".join(textwrap.wrap(text, width))


def yerr(values, lows, highs) -> np.ndarray:
    """Matplotlib's 2 x N `yerr` of 95% intervals (bench.metrics) around `values`; 0 where there is none."""
    v, lo, hi = (np.asarray(x, dtype=float) for x in (values, lows, highs))
    err = np.vstack([v - lo, hi - v])
    return np.where(np.isnan(err), 0.0, np.clip(err, 0.0, None))
