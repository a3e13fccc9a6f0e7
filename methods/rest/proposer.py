"""REST (He et al. 2024): retrieval-based speculative decoding from a datastore of tokenized text.

Per step the query is the last s tokens of the committed context (the tree root included) for
s = max_span..min_span (16..2); the first s with a match wins. Up to `max_matches` (5000) matches each
give their next `continuation` (10) tokens; every prefix of every continuation is counted (a trie with
counts), the `num_draft` (64) most frequent prefixes are cut as REST's DraftRetriever does (`cut_to_choices`:
those with the most distinct tokens go until the rest hold at most num_draft), and what is left, a prefix-closed
set, is drafted as one tree.
No match: an empty draft (a plain AR step). Search, trie and datastore: methods/rest/datastore.py; build the
store with `make datastore` (scripts/build_datastore.py). The engine's greedy verification keeps the
longest accepted path, as REST's greedy mode.

The store is chosen by `method.store`: by default the dataset's `rest_datastore` (mbpp_tr: code_offline),
else the `datastore` config group (default chat_offline).
"""

from __future__ import annotations

import sys
from functools import lru_cache

import numpy as np
import torch

from bench.core.proposer import Draft, Proposer, empty_draft
from bench.core.settings import TEXT, Rule, declare, integer
from bench.core.tree import tree_from_parents
from bench.errors import HarnessError
from data.corpus import corpus_names, load_corpus
from methods.rest.datastore import draft_tree, open_store, tokenizer_fingerprint


@lru_cache(maxsize=4096)
def _tree(parents: tuple[int, ...]):
    """Trees repeat (chains, common shapes), so their masks are built once."""
    return tree_from_parents(list(parents))


class Rest(Proposer):
    host_tokens = True  # its context is looked up on the host
    settings = declare({"store": TEXT, "store_dir": TEXT, "model": TEXT, "max_span": integer(1), "min_span": integer(1),
                                "max_matches": integer(1), "continuation": integer(1), "num_draft": integer(1)})
    requires = (Rule("min_span <= max_span", ("min_span", "max_span"), lambda lo, hi: lo <= hi),)

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.max_span, self.min_span = int(cfg.max_span), int(cfg.min_span)
        self.max_matches = int(cfg.max_matches)
        self.continuation = int(cfg.continuation)
        self.num_draft = int(cfg.num_draft)
        self.store_name = str(cfg.store)
        self.store = open_store(cfg.store_dir, str(cfg.model), self.store_name)
        meta = self.store.meta
        if bundle is not None and meta.get("tokenizer_fingerprint") != tokenizer_fingerprint(bundle.tokenizer):
            raise HarnessError(
                f"REST datastore '{self.store_name}' was built with another tokenizer than model "
                f"'{bundle.name}'s: rebuild it with `make datastore MODEL={cfg.model}`"
            )
        self.max_context = bundle.max_context if bundle is not None else None
        # A store built with overrides (datastore.max_documents=500 for a quick test) sits where the configured one
        # would: the run says so and records it, rather than pass a smaller store for the corpus it names.
        wanted = load_corpus(self.store_name) if self.store_name in corpus_names() else None
        built = meta.get("corpus_config") or {}
        self.settings_differ = [] if wanted is None else sorted(
            k for k in set(wanted) | set(built) if wanted.get(k) != built.get(k))
        if not meta.get("documents"):
            raise HarnessError(f"REST datastore '{self.store_name}' holds no documents: rebuild it with "
                               f"`make datastore MODEL={cfg.model}`")
        if self.settings_differ:
            print(f"warning: REST datastore '{self.store_name}' was built with other settings than "
                  f"conf/datastore/{self.store_name}.yaml ({', '.join(self.settings_differ)}; "
                  f"{meta.get('documents')} documents): `make datastore MODEL={cfg.model}` rebuilds it",
                  file=sys.stderr)

    @property
    def max_draft_tokens(self) -> int:
        return self.num_draft

    def describe(self):
        meta = self.store.meta
        return {
            "datastore": self.store_name,
            "datastore_model": meta.get("model"),
            "datastore_documents": meta.get("documents"),
            "datastore_settings_differ": self.settings_differ or None,  # from conf/datastore/<store>.yaml
            "datastore_tokens": meta.get("tokens"),
            "datastore_build_seconds": meta.get("build_seconds"),
            "backend": meta.get("backend"),
            "num_draft": self.num_draft,
            "max_span": self.max_span,
            "min_span": self.min_span,
            "max_matches": self.max_matches,
            "continuation": self.continuation,
        }

    def propose(self, seq, length):
        num_draft = self.num_draft
        if self.max_context is not None:  # the engine refuses a tree past the context: draft less
            num_draft = min(num_draft, self.max_context - length)
        context = seq[max(0, length - self.max_span) : length].tolist()
        _, cont = self.store.retrieve(context, self.max_span, self.min_span, self.max_matches, self.continuation)
        if cont is None or num_draft <= 0:
            return empty_draft()
        parents, tokens = draft_tree(cont, self.store.sep, num_draft)
        # (as_tensor, not from_numpy: a torch-function mode sees it, so the suite counts the copy its tokens cost a GPU)
        return Draft(_tree(tuple(parents.tolist())), torch.as_tensor(np.ascontiguousarray(tokens)))
