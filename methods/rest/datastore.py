"""REST's datastore: build from a corpus, save, load, suffix-array search, trie -> draft tree.

Backend: our own suffix array in numpy, not the `draftretriever` PyPI package. The only wheel on PyPI
(draftretriever 0.1.1, cp311 manylinux) installs and runs here, but it is ADED's fork of REST's
DraftRetriever, not REST's: measured on a toy store, its `search` returns continuations that do not
follow the query (query [9, 2, 3] also returned the continuation of [1, 2, 3]), caps the draft depth at 4
whatever `long` is, and aborts the whole process (a Rust panic, not an exception) on a one-token query.
So it cannot give REST's drafts. This module implements REST's retrieval directly.

Store layout (all under data/cache/datastores/, git-ignored): `<model>-<corpus>.tokens.npy` (every
document's tokens followed by a separator, uint16 when the vocabulary fits, as REST's u16 store, else
uint32), `<model>-<corpus>.sa.npy` (the full suffix array, int32/int64, built by prefix doubling) and
`<model>-<corpus>.json` (sidecar: corpus name and config, sources, documents, tokens, build seconds,
backend, tokenizer fingerprint, documents dropped by decontamination).

Differences from REST, all on purpose:
- documents are separated by a token id outside the vocabulary, so a match or a continuation never runs
  into the next document (REST concatenates entries with only the BOS of the next one in between);
- a span whose matches all end their document (no continuation token) counts as no match and the search
  goes on with the next shorter span;
- a no-match step is an empty draft (a plain AR step), not REST's dummy token 100.

Retrieval per step: the query is the last s tokens of the committed context (the tree root included),
s = max_span..min_span; the first s with a match wins. The first `max_matches` matches in suffix-array
order (REST's k=5000) each give their next `continuation` tokens; every prefix of every continuation is
counted (a trie with counts) and the `num_draft` most frequent prefixes form the draft tree. Because the
matches are consecutive suffixes, their continuations are already sorted, so the trie is a run-length
count per depth (vectorized).

Documents: a corpus of conf/datastore/ as data/corpus.py reads and decontaminates it (documents sharing a
`window_words` window with an evaluation set the corpus serves are dropped; the sidecar counts them).
tests/test_datastore.py checks the result independently of the build.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import json
import logging
import sys
import time
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench.cachefile import CorruptCache, atomic_file, atomic_write, clear_leftovers, load_or_fail, lock
from bench.errors import HarnessError
from bench.paths import project_path
from data.corpus import corpus_documents, load_corpus

BACKEND = "numpy-suffix-array"
FORMAT_VERSION = 1


# ----------------------------------------------------------------------------------------------------------
# suffix array and search


def token_dtype(vocab_size: int) -> tuple[np.dtype, int]:
    """(storage dtype, separator id): u16 as REST when the vocabulary leaves room for a separator."""
    if vocab_size < np.iinfo(np.uint16).max:
        return np.dtype(np.uint16), int(np.iinfo(np.uint16).max)
    return np.dtype(np.uint32), int(np.iinfo(np.uint32).max)


def suffix_array(tokens: np.ndarray) -> np.ndarray:
    """Suffix array by prefix doubling (Manber-Myers) on int64 rank pairs; a shorter suffix sorts first."""
    n = len(tokens)
    index_dtype = np.int32 if n < 2**31 else np.int64
    if n == 0:
        return np.zeros(0, dtype=index_dtype)
    _, rank = np.unique(tokens, return_inverse=True)
    rank = rank.astype(np.int64)
    k = 1
    while True:
        second = np.zeros(n, dtype=np.int64)  # 0 = past the end, so a shorter suffix sorts first
        second[: n - k] = rank[k:] + 1
        key = rank * (n + 1) + second
        sa = np.argsort(key)
        sorted_key = key[sa]
        new = np.empty(n, dtype=np.int64)
        new[sa] = np.concatenate([[0], np.cumsum(sorted_key[1:] != sorted_key[:-1])])
        rank = new
        if int(rank[sa[-1]]) == n - 1 or k >= n:
            return sa.astype(index_dtype)
        k *= 2


class Datastore:
    """Tokens (documents each followed by `sep`) + suffix array; `retrieve` is one REST lookup."""

    def __init__(self, tokens: np.ndarray, sa: np.ndarray, sep: int, meta: dict | None = None):
        self.tokens = np.ascontiguousarray(tokens)
        self.sa = np.ascontiguousarray(sa)
        self.sep = int(sep)
        self.meta = meta if meta is not None else {}
        self.width = self.tokens.dtype.itemsize
        # Big-endian bytes compare like token sequences, so bisect can compare spans with bytes slicing.
        self._bytes = self.tokens.astype(self.tokens.dtype.newbyteorder(">")).tobytes()
        self._sa_view = memoryview(self.sa)  # indexing gives Python ints (fast in bisect)
        self._be = self.tokens.dtype.newbyteorder(">")

    @classmethod
    def from_documents(cls, docs: Iterable[list[int]], vocab_size: int, meta: dict | None = None) -> Datastore:
        dtype, sep = token_dtype(vocab_size)
        parts = []
        for ids in docs:
            parts.append(np.asarray(ids, dtype=np.int64))
            parts.append(np.array([sep], dtype=np.int64))
        flat = np.concatenate(parts) if parts else np.array([sep], dtype=np.int64)
        if len(flat) and int(flat[flat != sep].max(initial=0)) >= sep:
            raise HarnessError(f"token id >= {sep} does not fit the {dtype} datastore")
        tokens = flat.astype(dtype)
        return cls(tokens, suffix_array(tokens), sep, meta)

    def __len__(self) -> int:
        return len(self.tokens)

    def find(self, query: list[int]) -> tuple[int, int]:
        """[lo, hi): the suffix-array range of suffixes that start with `query`."""
        if not query or max(query) >= self.sep or min(query) < 0:
            return 0, 0
        q = np.asarray(query, dtype=self._be).tobytes()
        w, buf = self.width * len(query), self._bytes

        def key(p):
            return buf[p * self.width : p * self.width + w]

        lo = bisect.bisect_left(self._sa_view, q, key=key)
        hi = bisect.bisect_right(self._sa_view, q, lo=lo, key=key)
        return lo, hi

    def continuations(self, lo: int, hi: int, span: int, max_matches: int, length: int) -> np.ndarray:
        """[m, length] next tokens after the first max_matches matches; `sep` from a document's end on.

        Rows are in suffix-array order, i.e. sorted; rows with no token at all are dropped.
        """
        starts = self.sa[lo : min(hi, lo + max_matches)].astype(np.int64) + span
        idx = np.minimum(starts[:, None] + np.arange(length), len(self.tokens) - 1)  # the last token is sep
        cont = self.tokens[idx].astype(np.int64)
        ended = np.logical_or.accumulate(cont == self.sep, axis=1)
        cont[ended] = self.sep
        return cont[~ended[:, 0]]

    def retrieve(self, context: list[int], max_span: int, min_span: int, max_matches: int, length: int):
        """(span, continuations) for the longest span s in max_span..min_span whose query matches."""
        for s in range(min(max_span, len(context)), min_span - 1, -1):
            lo, hi = self.find(context[-s:])
            if hi > lo:
                cont = self.continuations(lo, hi, s, max_matches, length)
                if len(cont):
                    return s, cont
        return 0, None

    # ---- files
    def save(self, prefix: Path) -> None:
        """The three files as one set (bench.cachefile): under the store's lock, the sidecar removed first and
        written last, so a sidecar only ever stands beside the arrays it describes (it records their length)."""
        files = store_files(prefix)
        with lock(prefix):
            files[".json"].unlink(missing_ok=True)
            for suffix, array in ((".tokens.npy", self.tokens), (".sa.npy", self.sa)):
                clear_leftovers(files[suffix])
                with atomic_file(files[suffix]) as f:
                    np.save(f, array)
            clear_leftovers(files[".json"])
            atomic_write(files[".json"], json.dumps({**self.meta, "sep": self.sep, "length": len(self)}, indent=2))

    @classmethod
    def load(cls, prefix: Path) -> Datastore:
        """The store; CorruptCache (or numpy's or json's error) if its files are damaged or not one set."""
        files = store_files(prefix)
        meta = json.loads(files[".json"].read_text())
        tokens, sa = np.load(files[".tokens.npy"]), np.load(files[".sa.npy"])
        length = meta.get("length", len(tokens))  # stores saved before the sidecar recorded it
        if tokens.ndim != 1 or sa.shape != tokens.shape or len(tokens) != length:
            raise CorruptCache(f"{len(tokens)} tokens, {len(sa)} suffix-array entries, the sidecar says {length}")
        if len(tokens) and int(tokens[-1]) != meta["sep"]:
            raise CorruptCache("the tokens do not end with a separator")
        return cls(tokens, sa, meta["sep"], meta)


def store_files(prefix: Path) -> dict[str, Path]:
    return {s: prefix.with_name(prefix.name + s) for s in (".tokens.npy", ".sa.npy", ".json")}


def draft_tree(cont: np.ndarray, sep: int, num_draft: int) -> tuple[np.ndarray, np.ndarray]:
    """Trie of all prefixes of the sorted continuations -> the num_draft most frequent, as a BFS tree.

    Returns (parents [N+1] with parents[0] = -1, tokens [N]). Ordering by (-count, depth, first row) keeps
    the selection prefix-closed: a parent's count is at least its child's and its depth is smaller.
    """
    m, length = cont.shape
    if m == 0 or num_draft <= 0:
        return np.array([-1], dtype=np.int64), np.zeros(0, dtype=np.int64)
    change = np.ones((m, length), dtype=bool)  # change[i, d]: row i starts a new prefix of length d+1
    if m > 1:
        change[1:] = np.logical_or.accumulate(cont[1:] != cont[:-1], axis=1)
    flat = change.T.ravel()  # column-major: each depth's runs are contiguous and start at its row 0
    starts = np.flatnonzero(flat)
    counts = np.diff(np.append(starts, flat.size))
    depth, row = np.divmod(starts, m)
    valid = cont[row, depth] != sep
    depth, row, counts = depth[valid], row[valid], counts[valid]
    keep = np.lexsort((row, depth, -counts))[:num_draft]
    depth, row = depth[keep], row[keep]
    # REST's DraftRetriever (cut_to_choices) then drops the prefixes with the most distinct tokens until those
    # left add up to at most num_draft distinct tokens (its "roughly cut" to the budget): fewer nodes than the
    # count alone keeps. Deeper first among equals, so what is left stays prefix-closed.
    distinct = np.array([len(set(cont[r, : d + 1].tolist())) for d, r in zip(depth, row)], dtype=np.int64)
    order = np.lexsort((-depth, -distinct))
    over = np.cumsum(distinct[order]) < distinct.sum() - num_draft  # dropping only these still leaves too many
    cut = int(np.count_nonzero(over)) + (distinct.sum() > num_draft)
    depth, row = depth[order[cut:]], row[order[cut:]]
    order = np.lexsort((row, depth))  # breadth first, siblings in trie (sorted) order
    depth, row = depth[order], row[order]
    keys = depth * m + row
    parent_idx = np.searchsorted(keys, (depth - 1) * m + row, side="right") - 1
    parents = np.where(depth == 0, 0, parent_idx + 1)
    return np.concatenate([[-1], parents]).astype(np.int64), cont[row, depth]


# ----------------------------------------------------------------------------------------------------------
# build and open


def store_prefix(store_dir: str | Path, model_name: str, corpus_name: str) -> Path:
    return project_path(store_dir) / f"{model_name}-{corpus_name}"


def tokenizer_fingerprint(tokenizer) -> str:
    vocab = sorted(tokenizer.get_vocab().items())
    return hashlib.sha1(json.dumps(vocab).encode()).hexdigest()[:16]


def _batched(it: Iterator, n: int) -> Iterator[list]:
    while batch := list(islice(it, n)):
        yield batch


def build(corpus: dict, tokenizer, mirror_dir: str | None, cache_dir: str, model_name: str) -> Datastore:
    """Tokenize every kept document separately (REST: `tokenizer.encode`, so with BOS if the tokenizer adds
    one) and build the suffix array; the sidecar metadata is `store.meta`."""
    t0 = time.perf_counter()
    corpus = load_corpus(corpus)
    stats: dict = {}

    def token_lists():  # a bar per document: a full store tokenizes for minutes
        with _quiet_length_warning(), tqdm(total=corpus.get("max_documents"), desc=f"datastore {corpus['name']}",
                                           unit="doc", file=sys.stderr) as bar:
            for batch in _batched(corpus_documents(corpus, mirror_dir, cache_dir, stats), 256):
                yield from tokenizer(batch, add_special_tokens=True)["input_ids"]
                bar.update(len(batch))

    meta = {
        "format_version": FORMAT_VERSION,
        "corpus": corpus["name"],
        "model": model_name,
        "backend": BACKEND,
        "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer),
        "vocab_size": len(tokenizer),
    }
    store = Datastore.from_documents(token_lists(), len(tokenizer), meta)
    meta.update({
        "documents": stats["kept"],
        "tokens": int(np.count_nonzero(store.tokens != store.sep)),
        "dropped_overlapping_eval": stats["dropped"],
        "sources": stats["sources"],
        "token_dtype": str(store.tokens.dtype),
        "build_seconds": round(time.perf_counter() - t0, 2),
        "corpus_config": corpus,
    })
    return store


@contextlib.contextmanager
def _quiet_length_warning():
    # Long documents trigger "Token indices sequence length is longer than ..." (irrelevant: no forward).
    lg = logging.getLogger("transformers.tokenization_utils_base")
    level = lg.level
    lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        lg.setLevel(level)


def open_store(store_dir, model_name: str, corpus_name: str) -> Datastore:
    prefix = store_prefix(store_dir, model_name, corpus_name)
    rebuild = (f"`make datastore MODEL={model_name}` "
               f"(or `python scripts/build_datastore.py model={model_name} datastore={corpus_name}`)")
    if not prefix.with_name(prefix.name + ".json").is_file():
        raise HarnessError(f"REST datastore '{corpus_name}' for model '{model_name}' not found ({prefix}.*): "
                           f"run {rebuild}")
    return load_or_fail(prefix, Datastore.load, f"REST datastore '{corpus_name}' ({prefix}.*)", rebuild)
