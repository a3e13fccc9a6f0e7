"""Text corpora (conf/datastore/*.yaml) and their decontamination against the evaluation sets.

A corpus is a list of sources, each read from the first place that has it: the data mirror, an installed
package's data file, the HF hub (streamed). Files are read by data/loaders.py, as the prompt sets are;
`skip_rows` / `max_rows` select a window of a source's rows. Each row gives one document per template of
`documents` (or per element of a `list_field`, e.g. conversation turns); `max_documents` caps the corpus in
config order; `include: [other]` appends another corpus's sources. Users: REST's datastore build
(methods/rest/datastore.py) and the self-distillation prompts (bench/train/selfdistill.py), which read their sources
with `source_rows` too.

Decontamination: a corpus names the evaluation sets it serves (`disjoint_from`, prompts and answers);
documents that share a window of `window_words` consecutive normalized words (lowercased \\w+ runs) with
any of them are dropped (`corpus_documents`) and counted. tests/test_datastore.py checks the result with an
implementation of its own.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from urllib.parse import urlparse

from omegaconf import OmegaConf

from data.loaders import FORMATS, DataError, load_items, mirror_file, package_file, quiet_hub_logs, read_rows

# data/ sits below bench/ (it imports nothing from it), so it finds the project's conf/ from its own place.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
CORPUS_DIR = CONF_DIR / "datastore"
DATASET_DIR = CONF_DIR / "dataset"


# ----------------------------------------------------------------------------------------------------------
# corpus configs and documents


def corpus_names(offline_only: bool = False) -> list[str]:
    names = sorted(p.stem for p in CORPUS_DIR.glob("*.yaml"))
    return [n for n in names if not offline_only or load_corpus(n).get("offline", False)]


def load_corpus(name_or_cfg) -> dict:
    """A corpus config as a plain dict; `include: [other]` appends the other corpora's sources."""
    if isinstance(name_or_cfg, str):
        path = CORPUS_DIR / f"{name_or_cfg}.yaml"
        if not path.is_file():
            raise DataError(f"unknown datastore corpus '{name_or_cfg}' (known: {', '.join(corpus_names())})")
        cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    else:
        cfg = OmegaConf.to_container(OmegaConf.create(name_or_cfg), resolve=True)
    sources = list(cfg.get("sources") or [])
    included = list(cfg.get("included") or [])
    for other in cfg.pop("include", None) or []:  # merged once; `included` records what was merged
        sources += load_corpus(other)["sources"]
        included.append(other)
    cfg["sources"] = sources
    cfg["included"] = included
    cap = cfg.get("max_documents")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise DataError(f"datastore corpus '{cfg.get('name')}': max_documents must be an integer >= 1 or null, "
                        f"got {cap!r}")
    return cfg


def _hub_reachable() -> str | None:
    """None if the hub may be reachable, else why not (saves datasets' ~30 s of retries offline)."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").lower() in ("1", "true", "yes", "on"):
            return f"{var} is set"
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError as e:
        return f"cannot resolve {host}: {e.strerror or e}"
    return None


def _hub_rows(hub: dict, skip: int, limit: int | None) -> Iterator[dict]:
    """The hub rows, streamed (a corpus can be far larger than a prompt set); logs quiet while streaming."""
    import datasets

    with quiet_hub_logs():
        yield from _window(datasets.load_dataset(**hub, streaming=True), skip, limit)


def _window(rows: Iterable, skip: int, limit: int | None) -> Iterator:
    return islice(rows, skip, None if limit is None else skip + limit)


def _file_rows(path: Path, fmt: str, skip: int, limit: int | None) -> Iterator[dict]:
    return _window((row for _, row in read_rows(path, fmt)), skip, limit)


def source_rows(corpus_name: str, src: dict, mirror_dir: str | None):
    """(rows iterator, where) from the first place that has the source: mirror, package file, hub.

    `skip_rows` / `max_rows` of the source select a window of its rows."""
    looked: list[str] = []
    skip, limit = int(src.get("skip_rows") or 0), src.get("max_rows")
    fmt = src.get("format") or "jsonl"
    if fmt not in FORMATS:
        raise DataError(f"datastore corpus '{corpus_name}': source '{src.get('name', '?')}': unknown format "
                        f"{fmt!r} (expected one of {', '.join(FORMATS)})")
    if src.get("mirror_path"):
        path = mirror_file(src, mirror_dir, looked)
        if path:
            return _file_rows(path, fmt, skip, limit), f"mirror {path}"
    found = package_file(src.get("package_file"), looked)
    if found:
        return _file_rows(found[0], fmt, skip, limit), found[1]
    if src.get("hub"):
        hub = dict(src["hub"])
        why = _hub_reachable()
        if why is None:
            try:
                rows = _hub_rows(hub, skip, limit)
                first = next(rows, None)
            except Exception as e:  # noqa: BLE001 - network/auth/format errors all mean "not here"
                why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:200]
            else:
                head = [] if first is None else [first]
                return (r for chunk in (head, rows) for r in chunk), f"hub {hub['path']}"
        looked.append(f"hub {hub['path']} (unreachable: {why})")
    raise DataError(
        f"datastore corpus '{corpus_name}': source '{src.get('name', '?')}' not found: " + ", ".join(looked)
    )


def row_documents(row: dict, src: dict) -> list[str]:
    """One document per template (`documents`) or per element of a list field (`list_field`, e.g. turns)."""
    if src.get("list_field"):
        values = row[src["list_field"]]
        return [v for v in values if isinstance(v, str) and v.strip()]
    docs = [t.format(**row) for t in src["documents"]]
    return [d for d in docs if d.strip()]


def iter_documents(corpus: dict, mirror_dir: str | None, sources_out: list | None = None):
    """(source name, text) for every document of the corpus, in config order, up to `max_documents`."""
    left = corpus.get("max_documents")
    for src in corpus["sources"]:
        if left is not None and left <= 0:
            return
        rows, where = source_rows(corpus["name"], src, mirror_dir)
        n = 0
        for row in rows:
            docs = row_documents(row, src)
            if left is not None:
                docs = docs[: left - n]
            for doc in docs:
                yield src["name"], doc
            n += len(docs)
            if left is not None and n >= left:
                break
        if left is not None:
            left -= n
        if sources_out is not None:
            sources_out.append({"name": src["name"], "where": where, "documents_read": n})


# ----------------------------------------------------------------------------------------------------------
# decontamination: word windows shared with evaluation prompts and answers

_WORD = re.compile(r"\w+")


def normalized_words(text: str) -> list[str]:
    """Lowercased word tokens; punctuation and whitespace differences do not hide a copy."""
    return _WORD.findall(text.lower())


def windows(text: str, n: int) -> set[int]:
    words = normalized_words(text)
    return {hash(" ".join(words[i : i + n])) for i in range(len(words) - n + 1)}


class OverlapIndex:
    """All n-word windows of a set of evaluation texts; `hits(doc)` says which texts a document shares one with."""

    def __init__(self, texts: Iterable[tuple[str, str]], n: int = 12):
        self.n = n
        self.index: dict[int, set[str]] = {}
        for label, text in texts:
            for h in windows(text, n):
                self.index.setdefault(h, set()).add(label)

    def hits(self, doc: str) -> set[str]:
        found: set[str] = set()
        for h in windows(doc, self.n):
            found |= self.index.get(h, set())
        return found


def _answer_strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _answer_strings(v)]
    return []


def eval_texts(disjoint_from: list[dict], mirror_dir: str | None, cache_dir: str) -> list[tuple[str, str]]:
    """(dataset name, text): every prompt turn (data.loaders) and every answer field of the raw rows."""
    out = []
    for entry in disjoint_from:
        name = entry["dataset"]
        ds_cfg = OmegaConf.to_container(OmegaConf.load(DATASET_DIR / f"{name}.yaml"), resolve=True)
        for item in load_items(ds_cfg, mirror_dir, cache_dir):
            out += [(name, t) for t in item["turns"]]
        fields = entry.get("answers") or []
        if fields:
            src = {"name": name, **{k: ds_cfg.get(k) for k in ("mirror_path", "format", "package_file")}}
            rows, _ = source_rows(f"eval:{name}", src, mirror_dir)
            for row in rows:
                out += [(name, s) for f in fields for s in _answer_strings(row.get(f))]
    return out


def corpus_documents(corpus, mirror_dir: str | None, cache_dir: str, stats: dict | None = None) -> Iterator[str]:
    """The corpus's documents minus those sharing a `window_words` window with a prompt or answer of its
    `disjoint_from` evaluation sets. `stats` receives the sources read and the drop counts (per evaluation
    set and in all) and the number kept."""
    corpus = load_corpus(corpus)
    stats = {} if stats is None else stats
    stats.update(sources=[], dropped={}, kept=0)
    for src in corpus["sources"]:  # a missing source fails before the evaluation sets are loaded
        if not src.get("hub"):
            source_rows(corpus["name"], src, mirror_dir)
        elif not (src.get("mirror_path") or src.get("package_file")) and (why := _hub_reachable()):
            raise DataError(f"datastore corpus '{corpus['name']}': source '{src.get('name', '?')}' not found: "
                            f"hub {src['hub']['path']} (unreachable: {why})")
    overlap = None
    if corpus.get("disjoint_from"):
        overlap = OverlapIndex(eval_texts(corpus["disjoint_from"], mirror_dir, cache_dir),
                               int(corpus.get("window_words", 12)))
    dropped = stats["dropped"]
    for _, doc in iter_documents(corpus, mirror_dir, stats["sources"]):
        hit = overlap.hits(doc) if overlap else set()
        if hit:
            for label in sorted(hit):
                dropped[label] = dropped.get(label, 0) + 1
            dropped["documents"] = dropped.get("documents", 0) + 1
            continue
        stats["kept"] += 1
        yield doc
