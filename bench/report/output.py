"""What an artifact's build returns, and the one place it is written: builders are pure (a RunSet in, a Report out);
the CLI, REPRODUCED.md and the notebooks write a Report with `write`.

    Report.tables("propd_table1", render(display, caption, foot, data))   # tables/propd_table1.{md,csv,tex}
    Report({"figures/propd_fig7.png": fig, "figures/propd_fig7.csv": df, "figures/propd_fig7.md": md})

Values: text (str), a DataFrame (written as CSV without its index) or a matplotlib Figure (PNG); each file is
written atomically, in the report's order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.cachefile import atomic_write


@dataclass
class Report:
    """files: path under the results folder -> content, in the order written (and listed); show: the file whose
    text the CLI prints (a table's markdown), None to print the paths written (a figure's)."""

    files: dict[str, object] = field(default_factory=dict)
    show: str | None = None

    @classmethod
    def tables(cls, stem: str, texts: dict[str, str], folder: str = "tables") -> Report:
        """tables/<stem>.<ext> for each text (bench.report.tables.render's md, csv, tex); shows the markdown."""
        return cls({f"{folder}/{stem}.{ext}": text for ext, text in texts.items()},
                   show=f"{folder}/{stem}.md" if "md" in texts else None)

    @property
    def markdown(self) -> str | None:
        """The text shown: the file named by `show`."""
        return self.files.get(self.show) if self.show is not None else None


def write(report: Report, results_dir: str | Path) -> str | list[Path]:
    """Every file of the report under results_dir; returns the shown markdown, else the paths written."""
    paths = []
    for name, content in report.files.items():
        path = Path(results_dir, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, pd.DataFrame):
            atomic_write(path, content.to_csv(index=False))
        elif isinstance(content, (str, bytes)):
            atomic_write(path, content)
        else:  # a matplotlib Figure; plots imports matplotlib (~1 s), which listing the artifacts never needs
            from bench.report.plots import save_figure
            save_figure(content, path)
        paths.append(path)
    return report.markdown if report.show is not None else paths
