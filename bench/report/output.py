"""What a build returns (a Report: file name -> text, DataFrame or Figure) and `write`, the one writer."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.cachefile import atomic_write


@dataclass
class Report:
    """files: path under the results folder -> content, in order; show: the file whose text the CLI prints (None:
    it prints the paths written)."""

    files: dict[str, object] = field(default_factory=dict)
    show: str | None = None

    @classmethod
    def tables(cls, stem: str, texts: dict[str, str], folder: str = "tables") -> Report:
        """tables/<stem>.<ext> for each text (bench.report.tables.render's md, csv, tex); shows the markdown."""
        return cls({f"{folder}/{stem}.{ext}": text for ext, text in texts.items()},
                   show=f"{folder}/{stem}.md" if "md" in texts else None)

    @classmethod
    def figure(cls, stem: str, fig, data: pd.DataFrame, md: str | None = None) -> Report:
        """figures/<stem>.png, its points (.csv) and, shown, its markdown (.md)."""
        files = {f"figures/{stem}.png": fig, f"figures/{stem}.csv": data}
        if md is None:
            return cls(files)
        return cls({**files, f"figures/{stem}.md": md}, show=f"figures/{stem}.md")

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
