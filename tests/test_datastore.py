"""REST's datastore: suffix-array search and trie -> tree on toy token arrays, and that every offline corpus
is disjoint from the evaluation sets it serves (prompts and answers), with a positive control."""

from __future__ import annotations

import gzip
import json
import random
import re

import numpy as np
import pytest

from bench.errors import HarnessError
from bench.paths import PROJECT
from data.corpus import corpus_documents, corpus_names, iter_documents, load_corpus
from data.loaders import DataError, load_items
from methods.rest.datastore import Datastore, draft_tree, open_store, suffix_array, token_dtype
from tests.conftest import compose_cfg

MIRROR = (PROJECT / ".." / "shared" / "data").resolve()
VOCAB = 100
DOCS = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 7, 8], [9, 2, 3, 4, 10], [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]]


def toy() -> Datastore:
    return Datastore.from_documents(DOCS, VOCAB)


def brute_matches(docs, query):
    """(doc, end of match) of every occurrence of query inside a document."""
    n = len(query)
    return [(d, i + n) for d, doc in enumerate(docs) for i in range(len(doc) - n + 1) if doc[i : i + n] == query]


# ---------------------------------------------------------------------------------------------- suffix array


def test_suffix_array_matches_sorted_suffixes():
    rng = np.random.default_rng(0)
    for n, alphabet in ((1, 3), (50, 2), (300, 5), (1000, 40)):
        tokens = rng.integers(0, alphabet, n).astype(np.uint16)
        expected = sorted(range(n), key=lambda i: tokens[i:].tolist())
        assert suffix_array(tokens).tolist() == expected


def test_token_dtype_u16_with_room_for_the_separator():
    assert token_dtype(49152) == (np.dtype(np.uint16), 65535)
    assert token_dtype(65535)[0] == np.dtype(np.uint32)


def test_find_and_continuations_match_brute_force():
    rng = random.Random(1)
    docs = [[rng.randrange(6) for _ in range(rng.randrange(1, 40))] for _ in range(30)]
    store = Datastore.from_documents(docs, 6)
    for _ in range(200):
        q = [rng.randrange(6) for _ in range(rng.randrange(1, 4))]
        lo, hi = store.find(q)
        hits = brute_matches(docs, q)
        assert hi - lo == len(hits)
        got = store.continuations(lo, hi, len(q), 10**6, 5).tolist()
        want = [docs[d][e : e + 5] for d, e in hits if e < len(docs[d])]
        want = sorted(w + [store.sep] * (5 - len(w)) for w in want)
        assert got == want  # continuations come sorted, cut at the document's end


def test_retrieve_takes_the_longest_matching_span():
    store = toy()
    # [1, 2, 3] occurs in docs 0 and 1; [0, 1, 2, 3] nowhere, so span 3 wins over span 2 ([2, 3] x3).
    span, cont = store.retrieve([0, 1, 2, 3], max_span=16, min_span=2, max_matches=5000, length=10)
    assert span == 3
    sep = store.sep
    assert cont.tolist() == [[4, 5, 6] + [sep] * 7, [7, 8] + [sep] * 8]
    span, cont = store.retrieve([42, 2, 3], 16, 2, 5000, 10)
    assert span == 2 and len(cont) == 3


def test_retrieve_respects_min_span_and_max_matches():
    store = toy()
    assert store.retrieve([42, 3], 16, 2, 5000, 10) == (0, None)  # only the 1-token query [3] would match
    span, cont = store.retrieve([42, 3], 16, 1, 5000, 10)
    assert span == 1 and len(cont) == 3
    _, cont = store.retrieve([2, 3], 16, 2, 2, 10)
    assert len(cont) == 2


def test_retrieval_is_stateless_and_keyed_on_the_whole_span():
    """Issue 17: the PyPI `draftretriever` 0.1.1 wheel that Spec-Bench's REST installs is ADED's trigram drafter: it
    keys on the last 2 tokens and learns the trigrams of every query, so its drafts copy the decoding context and
    earlier questions (MAT 1.80 vs our 1.345 on code_offline). REST's retriever, and ours, does neither."""
    store = toy()
    tokens, sa = store.tokens.copy(), store.sa.copy()
    sep = store.sep
    # [9, 2, 3] is only in doc 2: its continuation alone, not those of [2, 3] in docs 0 and 1.
    span, cont = store.retrieve([9, 2, 3], 16, 2, 5000, 10)
    assert span == 3 and cont.tolist() == [[4, 10] + [sep] * 8]
    first = draft_tree(cont, sep, 64)
    assert store.retrieve([50, 51], 16, 2, 5000, 10) == (0, None)
    store.retrieve([50, 51, 52, 53, 54, 55], 16, 2, 5000, 10)  # the wheel would learn 52..55 after [50, 51]
    assert store.retrieve([50, 51], 16, 2, 5000, 10) == (0, None)
    assert np.array_equal(store.tokens, tokens) and np.array_equal(store.sa, sa)
    again = draft_tree(store.retrieve([9, 2, 3], 16, 2, 5000, 10)[1], sep, 64)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))


def test_no_match_and_document_end_give_nothing():
    store = toy()
    assert store.retrieve([42, 43], 16, 2, 5000, 10) == (0, None)
    # [5, 6] ends doc 0: a match with no continuation counts as no match (never crosses into doc 1).
    assert store.retrieve([5, 6], 16, 2, 5000, 10) == (0, None)
    assert store.find([]) == (0, 0)
    assert store.find([store.sep]) == (0, 0)


def test_save_load_roundtrip(tmp_path):
    store = Datastore.from_documents(DOCS, VOCAB, {"corpus": "toy"})
    prefix = tmp_path / "m-toy"
    store.save(prefix)
    loaded = open_store(tmp_path, "m", "toy")
    assert loaded.tokens.tolist() == store.tokens.tolist() and loaded.sa.tolist() == store.sa.tolist()
    assert loaded.meta["corpus"] == "toy" and loaded.sep == store.sep


def test_missing_store_is_one_line(tmp_path):
    with pytest.raises(HarnessError) as err:
        open_store(tmp_path, "smollm2-135m", "chat_offline")
    assert "make datastore" in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------- trie -> tree


def prefixes_of(parents, tokens):
    """Token path of every tree node (slot 1..N)."""
    paths = [()]
    for i in range(1, len(parents)):
        paths.append(paths[parents[i]] + (int(tokens[i - 1]),))
    return paths[1:]


def test_draft_tree_counts_every_prefix():
    s = 99
    cont = np.array([
        [4, 5, 6, s],
        [4, 5, 7, s],
        [4, 5, 7, 8],
        [4, 9, s, s],
        [7, 8, s, s],
    ])
    parents, tokens = draft_tree(cont, s, 64)
    paths = prefixes_of(parents.tolist(), tokens)
    assert parents[0] == -1
    assert sorted(paths) == sorted({
        (4,), (4, 5), (4, 5, 6), (4, 5, 7), (4, 5, 7, 8), (4, 9), (7,), (7, 8),
    })
    depth = [len(p) for p in paths]
    assert depth == sorted(depth)  # breadth first


def test_draft_tree_keeps_the_most_frequent_prefixes_prefix_closed():
    rng = np.random.default_rng(3)
    for trial in range(20):
        cont = np.sort(rng.integers(0, 4, size=(300, 10)).view("i8,i8,i8,i8,i8,i8,i8,i8,i8,i8"), axis=0)
        cont = cont.view(np.int64).reshape(300, 10)
        counts: dict[tuple, int] = {}
        for row in cont.tolist():
            for d in range(1, 11):
                counts[tuple(row[:d])] = counts.get(tuple(row[:d]), 0) + 1
        parents, tokens = draft_tree(cont, 99, 64)
        paths = prefixes_of(parents.tolist(), tokens)
        assert len(paths) == len(set(paths))
        assert all(p[:-1] in set(paths) or len(p) == 1 for p in paths)  # prefix-closed
        best = sorted(counts.values(), reverse=True)[:64]
        assert min(counts[p] for p in paths) >= best[-1]  # among the 64 highest counts
        # REST's cut: drop the paths with the most distinct tokens until the rest add up to <= 64 of them
        distinct = {p: len(set(p)) for p in paths}
        assert sum(distinct.values()) <= 64
        top = sorted(counts, key=lambda p: (-counts[p], len(p)))[:64]  # the 64 highest counts, shallower first
        dropped = [p for p in top if p not in distinct]
        assert sum(distinct.values()) + min((len(set(p)) for p in dropped), default=0) > 64 or not dropped


def test_draft_tree_empty():
    parents, tokens = draft_tree(np.zeros((0, 10), dtype=np.int64), 99, 64)
    assert parents.tolist() == [-1] and len(tokens) == 0


def test_draft_tree_from_toy_store_is_a_valid_tree():
    from bench.core.tree import tree_from_parents

    store = toy()
    _, cont = store.retrieve([2, 3], 16, 2, 5000, 10)
    parents, tokens = draft_tree(cont, store.sep, 4)
    tree = tree_from_parents(parents.tolist())
    assert tree.size == 3
    # counts 2, 1, 1, 1 keep (4,), (7,), (4, 5), (4, 10): 6 distinct tokens over 4, so REST's cut drops one path
    # of two (the first in their order)
    assert prefixes_of(parents.tolist(), tokens) == [(4,), (7,), (4, 10)]


# ---------------------------------------------------------------------------------------------- corpora
# The evaluation sets each offline corpus serves, written here independently of the corpus YAMLs: prompts
# come from data.loaders + conf/dataset/, answers from the raw mirror rows (field names per the MANIFEST).
SERVES = {
    "chat_offline": {  # used for spec_bench (incl. MT-Bench, GSM8K items) and humaneval
        "spec_bench": ["reference"], "mt_bench": ["reference"], "gsm8k": ["answer"],
        "humaneval": ["canonical_solution"],
    },
    "code_offline": {"mbpp_tr": [], "mbpp": ["code", "test_list"]},  # used for mbpp_tr
}
WINDOW = 12  # consecutive words (lowercased \w+ runs) that may not be shared
needs_mirror = pytest.mark.skipif(not MIRROR.is_dir(), reason=f"data mirror {MIRROR} absent")


def word_windows(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i : i + WINDOW]) for i in range(len(words) - WINDOW + 1)}


def flatten(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [s for v in value for s in flatten(v)] if isinstance(value, list) else []


def serve_texts(corpus_name: str) -> list[tuple[str, str]]:
    out = []
    for name, answer_fields in SERVES[corpus_name].items():
        ds = compose_cfg(f"dataset={name}").dataset
        out += [(name, t) for it in load_items(ds, str(MIRROR), "/nonexistent") for t in it["turns"]]
        if answer_fields:
            path = MIRROR / ds.mirror_path
            with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8") as f:
                rows = [json.loads(line) for line in f if line.strip()]
            out += [(name, s) for r in rows for field in answer_fields for s in flatten(r.get(field))]
    return out


def shared(texts: list[tuple[str, str]], docs: list[str]) -> list[str]:
    """One line per document that shares a window with an evaluation text (a separate implementation from
    data.corpus.OverlapIndex, which the build uses)."""
    index: dict[tuple[str, ...], str] = {}
    for name, t in texts:
        for w in word_windows(t):
            index.setdefault(w, name)
    out = []
    for doc in docs:
        hit = next((w for w in word_windows(doc) if w in index), None)
        if hit:
            out.append(f"{index[hit]}: {' '.join(hit)!r} in {doc[:60]!r}")
    return out


@pytest.fixture(scope="module")
def eval_sets():
    return {name: serve_texts(name) for name in SERVES}


def test_every_offline_corpus_has_its_eval_sets_listed_here():
    assert set(corpus_names(offline_only=True)) <= set(SERVES)


@needs_mirror
@pytest.mark.parametrize("name", sorted(SERVES))
def test_offline_corpus_is_disjoint_from_the_sets_it_serves(name, eval_sets):
    """The documents a store is built from share no 12-word window with any prompt or answer. (The raw
    sources do: AlpacaEval holds MT-Bench questions; the build drops those documents.)"""
    stats: dict = {}
    docs = list(corpus_documents(load_corpus(name), str(MIRROR), "/nonexistent", stats))
    assert len(docs) > 1000 and stats["kept"] == len(docs)
    assert stats["dropped"].get("documents", 0) < 0.01 * len(docs)
    bad = shared(eval_sets[name], docs)
    assert not bad, f"{len(bad)} documents of {name} overlap: {bad[:3]}"


@needs_mirror
def test_raw_sources_do_overlap_so_the_check_is_live(eval_sets):
    """Positive control on real data: without the build's filter the check finds the AlpacaEval copies of
    MT-Bench questions, and an eval prompt injected in another case and spacing is caught."""
    raw = [d for _, d in iter_documents(load_corpus("chat_offline"), str(MIRROR))]
    found = shared(eval_sets["chat_offline"], raw)
    assert any(line.startswith(("mt_bench", "spec_bench")) for line in found)
    prompt = next(t for n, t in eval_sets["chat_offline"] if n == "spec_bench" and len(t.split()) > 30)
    injected = "some unrelated words first, then " + "   ".join(prompt.upper().split()[:13])
    assert len(shared(eval_sets["chat_offline"], ["a harmless document about baking bread", injected])) == 1


@needs_mirror
def test_build_filter_drops_an_injected_eval_prompt_and_answer(tmp_path, eval_sets):
    """Positive control through the build path: a corpus source holding a SpecBench prompt and a GSM8K
    answer loses exactly those two documents."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for sub in MIRROR.iterdir():
        (mirror / sub.name).symlink_to(sub)
    prompt = next(t for n, t in eval_sets["chat_offline"] if n == "spec_bench" and len(t.split()) > 30)
    answer = next(t for n, t in eval_sets["chat_offline"] if n == "gsm8k" and len(t.split()) > 30)
    rows = [{"text": "A clean document about the weather in spring and summer."}, {"text": prompt},
            {"text": "Preamble. " + answer.lower()}, {"text": "Another clean document about trains."}]
    (mirror / "injected.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    corpus = {
        "name": "injected", "sources": [{"name": "injected", "mirror_path": "injected.jsonl",
                                         "documents": ["{text}"]}],
        "disjoint_from": load_corpus("chat_offline")["disjoint_from"],
    }
    stats: dict = {}
    docs = list(corpus_documents(corpus, str(mirror), "/nonexistent", stats))
    assert docs == [rows[0]["text"], rows[3]["text"]]
    assert stats["dropped"]["documents"] == 2 and "gsm8k" in stats["dropped"]


@needs_mirror
@pytest.mark.parametrize("name", sorted(SERVES))
def test_built_store_is_disjoint(name, eval_sets):
    """If `make datastore` built this corpus for the embedded model, decode the store itself and check it."""
    from transformers import AutoTokenizer

    sidecar = PROJECT / "data" / "cache" / "datastores" / f"smollm2-135m-{name}.json"
    models = sorted((PROJECT / "data" / "cache" / "models").glob("SmolLM2*/tokenizer.json"))
    if not sidecar.is_file() or not models:
        pytest.skip(f"no built smollm2-135m {name} store (run `make datastore`)")
    store = Datastore.load(sidecar.with_name(sidecar.name[: -len(".json")]))
    tok = AutoTokenizer.from_pretrained(models[-1].parent)
    cuts = np.flatnonzero(store.tokens == store.sep)
    docs = tok.batch_decode(np.split(store.tokens.astype(np.int64), cuts + 1)[:-1])
    assert len(docs) == store.meta["documents"]
    bad = shared(eval_sets[name], docs)
    assert not bad, f"{len(bad)} stored documents overlap: {bad[:3]}"


def test_code_corpus_has_humaneval_and_the_chat_sources():
    names = {s["name"] for s in load_corpus("code_offline")["sources"]}
    assert {"humaneval", "alpaca_eval", "c4", "openwebtext"} <= names


def test_missing_source_is_one_line(tmp_path):
    with pytest.raises(DataError) as err:
        list(iter_documents(load_corpus("chat_offline"), str(tmp_path)))
    assert "alpaca_eval" in str(err.value) and "\n" not in str(err.value)


def test_hub_corpus_fails_offline_with_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError) as err:
        list(iter_documents(load_corpus("ultrachat"), str(tmp_path)))
    assert "stingning/ultrachat" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("cap", [0, -1, "abc", True])
def test_a_corpus_cap_below_one_is_refused(cap):
    """datastore.max_documents=0 built an empty store in the real one's place (and -1 a full one)."""
    from data.corpus import load_corpus
    from data.loaders import DataError

    with pytest.raises(DataError, match="max_documents must be an integer >= 1 or null"):
        load_corpus({**load_corpus("chat_offline"), "max_documents": cap})
