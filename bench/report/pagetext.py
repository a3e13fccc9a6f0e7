"""Text rules of the committed results page (REPRODUCED.md) and its evidence: no machine paths, no long lines.

- `scrub_paths`: an absolute path becomes repository-relative (from its first component that is a folder of the
  repository or of the shared mirror: data/, results/, conf/, shared/, evidence/), else `…/<last part>`; so a
  temporary worktree's or a home folder's path never reaches a committed file.
- `scrub`: the same on every string of a JSON-like value (summaries).
- `wrap_long`: markdown paragraph lines over LINE_MAX characters are wrapped at spaces (the rendered page is the
  same); a table whose rows are longer is split into tables of fewer columns, each repeating the first column.
"""

from __future__ import annotations

import re
import textwrap

LINE_MAX = 400
WRAP_AT = 200
ANCHORS = ("data", "results", "conf", "shared", "evidence", "notebooks", "bench", "methods", "scripts")
# An absolute path: a slash not preceded by a word character, dot, colon, slash or closing bracket (so "tok/s",
# "a/b", "<paper>/x", URLs and relative paths are not), followed by at least one folder.
ABSOLUTE = re.compile(r"(?<![\w.:/~>)\]}*-])/(?:[\w.+@-]+/)+[\w.+@-]*")


def relative(path: str) -> str:
    parts = [p for p in path.split("/") if p and p != "."]
    for i, p in enumerate(parts):
        if p in ANCHORS and i + 1 < len(parts):
            return "/".join(parts[i:])
    return "…/" + (parts[-1] if parts else "")


def scrub_paths(text: str) -> str:
    return ABSOLUTE.sub(lambda m: relative(m.group(0)), text)


def scrub(value):
    if isinstance(value, str):
        return scrub_paths(value)
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def split_table(rows: list[str]) -> list[str]:
    """A markdown table (rows of `| a | b |`, cells without `|`) as tables of at most LINE_MAX characters a row,
    each repeating the first column, a blank line between them."""
    cells = [row.strip().strip("|").split("|") for row in rows]
    widths = [max(len(r[i]) for r in cells) + 1 for i in range(len(cells[0]))]
    chunks, current = [], []
    for i in range(1, len(widths)):
        if current and widths[0] + sum(widths[j] for j in current) + widths[i] + 1 > LINE_MAX:
            chunks.append(current)
            current = []
        current.append(i)
    chunks.append(current)
    out = []
    for chunk in chunks:
        out += ["" if out else None, *("|" + "|".join(r[j] for j in (0, *chunk)) + "|" for r in cells)]
    return [line for line in out if line is not None]


def wrap_long(text: str) -> str:
    out: list[str] = []
    table: list[str] = []
    for line in [*text.split("\n"), ""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            out += split_table(table) if max(map(len, table)) > LINE_MAX and all(
                t.count("|") == table[0].count("|") for t in table) else table
            table = []
        if len(line) <= LINE_MAX:
            out.append(line)
        else:
            out += textwrap.wrap(line, WRAP_AT, break_long_words=True, break_on_hyphens=False)
    return "\n".join(out[:-1])


def absolute_paths(text: str) -> list[str]:
    """The absolute paths left in `text` (the page's test: none)."""
    return ABSOLUTE.findall(text)
