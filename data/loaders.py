"""One generic loader for every prompt set.

Each dataset is a YAML file in conf/dataset/ that says where its rows live and how a raw row maps to an item
(like lm-eval tasks), so adding a dataset is a config change, not code. Items look like
{"question_id": int|str, "category": str, "group": str, "turns": [str, ...]}, in file order.

Sources are tried in order, first hit wins: mirror dir, local cache, an installed package's data file,
the HF hub. A dataset's optional `selection` block (e.g. Sequoia's seeded example choice) is applied after
loading, whatever the source, so the cache always holds every row. See data/README.md.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib
import json
import logging
import random
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from omegaconf import OmegaConf

ITEM_KEYS = ("question_id", "category", "group", "turns")
# lines: plain text, one item per non-blank line, read as the row {"text": line} (CNN/DM's .source files).
FORMATS = ("jsonl", "jsonl.gz", "lines")
SELECTION_KINDS = ("sequoia",)
# Keys of a dataset YAML that map raw rows to items; the `hub.fields` block may override them.
FIELD_KEYS = ("id_field", "category_field", "category", "turns_field", "template", "join", "append_if")


class DataError(Exception):
    """A dataset could not be loaded. The message is one line naming the problem."""


def load_items(ds_cfg, mirror_dir: str | None, cache_dir: str) -> list[dict]:
    """The dataset's items from the first source that has them, after its `selection` (see load_selection)."""
    return load_selection(ds_cfg, mirror_dir, cache_dir)[0]


def load_selection(ds_cfg, mirror_dir: str | None, cache_dir: str) -> tuple[list[dict], str]:
    """(items, description): the loaded items after the dataset's `selection` block, and one line saying
    which rows were kept and from where, for run summaries, e.g.
    "sequoia seed 17: 200 of rows 200-999 in shuffled order (...); 1000 rows loaded from mirror /x/c4.jsonl".
    """
    cfg = _plain(ds_cfg)
    selection = cfg.get("selection")
    _check_selection(cfg.get("name") or "<unnamed>", selection)  # before loading: bad config fails fast
    items, source = resolve_items(cfg, mirror_dir, cache_dir)
    kept, what = apply_selection(items, selection)
    return kept, f"{what}; {len(items)} rows loaded from {source}"


def apply_selection(items: list[dict], selection: dict | None) -> tuple[list[dict], str]:
    """(kept items, what was kept). Items are in row order, so items[i] is row i of the source.

    kind sequoia (Sequoia's tests/testbed.py): `random.seed(seed)`, then
    `eval_list = list(range(start, stop))` shuffled with the module's `random.shuffle`, then the first `count`
    of it. We draw the same permutation from a private `random.Random(seed)` (same Mersenne Twister state as
    `random.seed(seed)`; no global state touched) and keep, in that order, the indices that exist in the
    loaded set (< n) before taking `count`: our mirrors are smaller than Sequoia's 2000-row pools. A set
    with no row at index `start` or above (CNN/DM's 100 mirror rows) is used whole, in file order. Items keep
    their question_id (the row index when the YAML names no id field).
    """
    n = len(items)
    if not selection:
        return list(items), f"all {n} rows in file order"
    _check_selection("<selection>", selection)
    seed, start, stop, count = (int(selection[k]) for k in ("seed", "start", "stop", "count"))
    if n <= start:
        return list(items), (f"all {n} rows in file order (sequoia seed {seed} draws from rows "
                             f"{start}-{stop - 1}; this set has only {n} rows)")
    order = list(range(start, stop))
    random.Random(seed).shuffle(order)
    kept = [i for i in order if i < n][:count]
    what = f"sequoia seed {seed}: {len(kept)} of rows {start}-{min(n, stop) - 1} in shuffled order"
    if n < stop:
        what += f" (Sequoia's pool is rows {start}-{stop - 1}; this set has {n} rows)"
    return [items[i] for i in kept], what


def resolve_items(
    ds_cfg, mirror_dir: str | None, cache_dir: str, use_cache: bool = True
) -> tuple[list[dict], str]:
    """(items, source) where source says where they came from, e.g. "mirror /x/gsm8k/test.jsonl".

    ds_cfg is a DictConfig or dict composed from conf/dataset/<name>.yaml. use_cache=False skips the
    cache, so scripts/fetch_data.py always rebuilds it from an original source.
    """
    cfg = _plain(ds_cfg)
    name = cfg.get("name") or "<unnamed>"
    fmt = cfg.get("format", "jsonl")
    if fmt not in FORMATS:
        raise DataError(f"dataset {name!r}: unknown format {fmt!r} (expected one of {', '.join(FORMATS)})")
    fields = {k: cfg.get(k) for k in FIELD_KEYS}
    _check_fields(name, fields)
    groups = cfg.get("groups") or {}
    looked = []

    path = mirror_file(cfg, mirror_dir, looked)
    if path:
        # mirror_note: what the mirror copy is when it is not the hub set (e.g. a subset), for run summaries.
        note = f" ({cfg['mirror_note']})" if cfg.get("mirror_note") else ""
        return _to_items(read_rows(path, fmt), fields, groups, str(path)), f"mirror {path}{note}"

    if use_cache:
        path = cache_path(cache_dir, name)
        if path.is_file():
            return _read_cache(path), f"cache {path}{_cache_origin(path)}"
        looked.append(f"cache {path} (missing)")

    found = package_file(cfg.get("package_file"), looked)
    if found:
        path, where = found
        return _to_items(read_rows(path, fmt), fields, groups, str(path)), where

    hub = dict(cfg.get("hub") or {})
    if hub:
        fields.update(hub.pop("fields", None) or {})
        _check_fields(name, fields)
        label = f"hub {hub.get('path')}" + (f" {hub['data_files']}" if hub.get("path") == "json" else "")
        # Network, auth and missing-dependency errors come in many types; each just means "not here".
        try:
            rows = _hub_rows(hub)
        except Exception as e:  # noqa: BLE001
            looked.append(f"{label} (unreachable: {_short(e)})")
        else:
            return _to_items(((i + 1, row) for i, row in enumerate(rows)), fields, groups, label), label

    raise DataError(f"dataset {name!r} not found: " + ", ".join(looked))


def mirror_file(cfg: dict, mirror_dir: str | None, looked: list[str]) -> Path | None:
    """`<mirror_dir>/<mirror_path>` if that file exists; else None, and `looked` gets why not."""
    if mirror_dir and cfg.get("mirror_path"):
        path = Path(mirror_dir) / cfg["mirror_path"]
        if path.is_file():
            return path
        looked.append(f"mirror {path} (missing)")
    elif mirror_dir:
        looked.append("mirror (no mirror_path: no offline copy of this set)")
    else:
        looked.append("mirror (not set)")
    return None


def package_file(package: dict | None, looked: list[str]) -> tuple[Path, str] | None:
    """(path, where) of an installed package's data file (`package_file: {module, attr}`, an attribute holding
    the path); None if there is none or it is not installed, and `looked` gets why not."""
    if not package:
        return None
    label = f"package {package['module']}.{package['attr']}"
    try:
        path = Path(getattr(importlib.import_module(package["module"]), package["attr"]))
    except (ImportError, AttributeError) as e:
        looked.append(f"{label} (not installed: {_short(e)})")
        return None
    if not path.is_file():
        looked.append(f"{label} ({path} missing)")
        return None
    return path, f"{label} ({path})"


def cache_path(cache_dir: str | Path, name: str) -> Path:
    """Where scripts/fetch_data.py writes, and resolve_items reads, a dataset's normalized items."""
    return Path(cache_dir) / name / "items.jsonl"


def cache_source_path(items_path: Path) -> Path:
    """Beside a cache's items.jsonl: the one-line source it was built from (scripts/fetch_data.py writes it)."""
    return items_path.with_name("source.txt")


def _cache_origin(items_path: Path) -> str:
    """The suffix `" (built from <source>)"` from the cache's source.txt, so a summary still says e.g. that a mirror
    subset was used; "" for a cache written before source.txt existed, or whose source.txt is unreadable."""
    try:
        origin = cache_source_path(items_path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (built from {origin})" if origin and "\n" not in origin else ""


def _plain(ds_cfg) -> dict:
    return OmegaConf.to_container(OmegaConf.create(ds_cfg), resolve=True)


def _check_selection(name: str, selection) -> None:
    if selection is None:
        return
    if not isinstance(selection, dict):
        raise DataError(f"dataset {name!r}: selection must be a mapping, got {selection!r}")
    kind = selection.get("kind")
    if kind not in SELECTION_KINDS:
        raise DataError(f"dataset {name!r}: unknown selection kind {kind!r} (expected one of "
                        f"{', '.join(SELECTION_KINDS)})")
    keys = ("seed", "start", "stop", "count")
    bad = [k for k in keys if not isinstance(selection.get(k), int) or isinstance(selection.get(k), bool)]
    if bad:
        raise DataError(f"dataset {name!r}: selection needs integer {', '.join(bad)}")
    if not (0 <= selection["start"] < selection["stop"]) or selection["count"] < 1:
        raise DataError(f"dataset {name!r}: selection needs 0 <= start < stop and count >= 1")


def _check_fields(name: str, fields: dict) -> None:
    if bool(fields["turns_field"]) == bool(fields["template"]):
        raise DataError(f"dataset {name!r}: set exactly one of turns_field, template")
    if bool(fields["category_field"]) == (fields["category"] is not None):
        raise DataError(f"dataset {name!r}: set exactly one of category_field, category")
    if fields["append_if"] is not None and not (fields["template"] and isinstance(fields["append_if"], dict)):
        raise DataError(f"dataset {name!r}: append_if must be a mapping {{field: template}} used with template")


def _short(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first}"[:160]


def read_rows(path: Path, fmt: str) -> Iterator[tuple[int, dict]]:
    """(1-based line number, row) for each non-blank line of a file in `fmt` (one of FORMATS); lazy. A file that
    cannot be read as `fmt` (a cut-off or damaged .gz, bytes that are not UTF-8) is one DataError."""
    rows = _read_lines(path) if fmt == "lines" else _read_jsonl(path, fmt)
    try:
        yield from rows
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        raise DataError(f"unreadable {fmt} file {path}: {_short(e)}") from None


def _read_lines(path: Path) -> Iterator[tuple[int, dict]]:
    # Only the line break is stripped: the text is the prompt, byte for byte.
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            text = line.rstrip("\r\n")
            if text.strip():
                yield lineno, {"text": text}


def _read_jsonl(path: Path, fmt: str) -> Iterator[tuple[int, dict]]:
    """(1-based line number, row) for each non-blank line."""
    opener = gzip.open if fmt == "jsonl.gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"malformed line {lineno} in {path}: {e.msg}") from None
            if not isinstance(row, dict):
                raise DataError(f"malformed line {lineno} in {path}: not a JSON object")
            yield lineno, row


def _to_items(rows: Iterable[tuple[int, dict]], fields: dict, groups: dict, where: str) -> list[dict]:
    items, seen = [], {}
    for index, (lineno, row) in enumerate(rows):
        try:
            item = _to_item(row, index, fields, groups)
        except KeyError as e:
            raise DataError(f"malformed line {lineno} in {where}: missing field {e}") from None
        except (TypeError, ValueError, IndexError) as e:
            raise DataError(f"malformed line {lineno} in {where}: {_short(e)}") from None
        # records, speedups and resumes pair prompts by id: two prompts under one id would be merged
        if item["question_id"] in seen:
            raise DataError(f"malformed line {lineno} in {where}: question id {item['question_id']!r} repeats line "
                            f"{seen[item['question_id']]}'s")
        seen[item["question_id"]] = lineno
        items.append(item)
    if not items:
        raise DataError(f"{where} has no rows")
    return items


def _to_item(row: dict, index: int, fields: dict, groups: dict) -> dict:
    # No id field configured (gsm8k): the row's 0-based position is its id.
    qid = row[fields["id_field"]] if fields["id_field"] else index
    category = row[fields["category_field"]] if fields["category_field"] else fields["category"]
    if fields["turns_field"]:
        turns = row[fields["turns_field"]]
    else:
        joined = {k: sep.join(row[k]) for k, sep in (fields["join"] or {}).items()}
        values = {**row, **joined}
        turn = fields["template"].format(**values)
        # append_if {field: template}: appended when the row's field is a non-blank string (Alpaca's `input`).
        for field, extra in (fields["append_if"] or {}).items():
            value = row.get(field)
            if isinstance(value, str) and value.strip():
                turn += extra.format(**values)
        turns = [turn]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise TypeError("turns must be a non-empty list of strings")
    if not all(t.strip() for t in turns):  # a blank user turn would be measured as a prompt
        raise ValueError(f"turn {next(i for i, t in enumerate(turns) if not t.strip()) + 1} is blank")
    if not isinstance(category, str) or not category:  # reports group by it; a null one fell out of every group
        raise TypeError(f"category must be a non-empty string, got {category!r}")
    return {"question_id": qid, "category": category, "group": groups.get(category, category), "turns": turns}


def _read_cache(path: Path) -> list[dict]:
    """The items `make data` wrote; a damaged file (cut off, hand-edited) is one DataError naming `make data`."""
    items = []
    try:
        for lineno, row in _read_jsonl(path, "jsonl"):
            missing = [k for k in ITEM_KEYS if k not in row]
            if missing:
                raise DataError(f"malformed line {lineno} in {path}: missing field {missing[0]!r}")
            items.append({k: row[k] for k in ITEM_KEYS})
        if not items:
            raise DataError(f"{path} has no rows")
    except (DataError, UnicodeDecodeError) as e:
        raise DataError(f"corrupt cache: {e} (rebuild it with `make data`)") from None
    return items


def _hub_rows(hub_args: dict) -> list[dict]:
    """Rows from datasets.load_dataset(**hub_args); imported lazily because `datasets` is slow to import."""
    import datasets  # before quieting: importing it configures its own (and huggingface_hub's) log levels

    with quiet_hub_logs():
        return list(datasets.load_dataset(**hub_args))


@contextlib.contextmanager
def quiet_hub_logs():
    # Offline, huggingface_hub logs a "Retrying in 8s" warning per attempt; the DataError already says why.
    loggers = [logging.getLogger(n) for n in ("huggingface_hub", "datasets", "fsspec")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
