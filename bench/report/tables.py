"""Table cells and rendering shared by every paper: "ours (paper)" cells, md/csv/tex texts."""

from __future__ import annotations

import math

import pandas as pd

from bench import metrics

MISSING = "—"


def is_missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt(x, spec: str = ".2f") -> str:
    """A number in `spec`, or MISSING for None/NaN."""
    return MISSING if is_missing(x) else format(x, spec)


def with_interval(x, interval: list[float] | None, spec: str = ".2f") -> str:
    """"2.31 [2.10, 2.52]": a number and its 95% interval (bench.metrics); the number alone without one."""
    if is_missing(x) or not interval:
        return fmt(x, spec)
    return f"{format(x, spec)} [{format(interval[0], spec)}, {format(interval[1], spec)}]"


def interval_columns(name: str, interval: list[float] | None) -> dict:
    """{name_lo, name_hi}: an interval as two tidy csv columns (None without one)."""
    lo, hi = interval or (None, None)
    return {f"{name}_lo": lo, f"{name}_hi": hi}


def interval_in(row, col: str) -> list[float] | None:
    """The interval a row's `<col>_lo`/`<col>_hi` columns hold (interval_columns), None without one."""
    lo, hi = row.get(f"{col}_lo"), row.get(f"{col}_hi")
    return None if is_missing(lo) or is_missing(hi) else [lo, hi]


def ours_cells(df: pd.DataFrame, col: str, spec: str = ".2f") -> list[str]:
    """Column `col` of a tidy table as cells "2.31 [2.10, 2.52]" (the number alone where it has no interval)."""
    return [with_interval(row[col], interval_in(row, col), spec) for _, row in df.iterrows()]


def pair(ours: str, theirs: str) -> str:
    """"ours (paper)"; MISSING alone when both sides are missing."""
    return MISSING if ours == theirs == MISSING else f"{ours} ({theirs})"


def paired_cells(df: pd.DataFrame, col: str, paper: str, spec: str = ".2f") -> list[str]:
    """Column `col` beside column `paper`: "2.31 [2.10, 2.52] (2.40)" cells (ours_cells, pair)."""
    return [pair(ours, fmt(theirs, spec)) for ours, theirs in zip(ours_cells(df, col, spec), df[paper])]


def measure(name: str, run, value, interval) -> dict:
    """{name, name_lo, name_hi}: value(records) of a run and its 95% interval(records); None without a run."""
    return {name: value(run.records) if run else None, **interval_columns(name, interval(run.records) if run else None)}


def listed(values, empty: str = MISSING) -> str:
    """The distinct values, sorted, as "a, b"; `empty` without any."""
    return ", ".join(sorted({str(v) for v in values})) or empty


def fmt_ci(ci: list[float] | None, show=fmt) -> str:
    """An interval alone, "[2.10, 2.52]"; MISSING without one."""
    return MISSING if ci is None else f"[{show(ci[0])}, {show(ci[1])}]"


lossless_text = metrics.lossless_text  # "equal/checked (k near-tie, m mismatch)"; None when nothing was checked


def latex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#")):
        s = s.replace(a, b)
    return s


def markdown(display: pd.DataFrame, caption: str | None, footer: list[str], numparse: bool = True) -> str:
    """Caption, the table, the footer lines; blank lines between the three."""
    table = display.to_markdown(index=False, disable_numparse=not numparse)
    return "\n\n".join([*([caption] if caption else []), table, "\n".join(footer)]) + "\n"


def render(display: pd.DataFrame, caption: str, footer: list[str], data: pd.DataFrame,
           formats: tuple[str, ...] = ("md", "csv", "tex")) -> dict[str, str]:
    """{"md", "csv", "tex"} texts: md and tex show `display` (string cells), csv is the tidy `data`."""
    texts = {"md": lambda: markdown(display, caption, footer),
             "csv": lambda: data.to_csv(index=False),
             "tex": lambda: (display.style.format(escape="latex").hide(axis="index")
                             .to_latex(hrules=True, caption=latex_escape(caption)))}
    return {ext: texts[ext]() for ext in formats}
