"""`make datastore`: build REST datastores for a model's tokenizer under data/cache/datastores/.

    python scripts/build_datastore.py [model=smollm2-135m] [datastore=chat_offline,code_offline] [--force]

Without `datastore=`, builds every offline corpus of conf/datastore/ (`offline: true`). Other Hydra
overrides (e.g. paths.data_mirror=/x, datastore.max_documents=500 with one datastore) are passed on. A store
whose sidecar already matches the corpus config and the tokenizer is kept unless --force. Prints one line
per store (documents, tokens, size, build seconds); a missing corpus source or tokenizer is one `error:`
line and a non-zero exit.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from bench.cachefile import READ_ERRORS, lock, report_corrupt
from bench.cli import run_script
from bench.errors import HarnessError
from bench.models.loading import load_tokenizer
from bench.paths import project_path
from bench.run.compose import compose_config, split_flags, usage_of
from data.corpus import corpus_names, load_corpus
from data.loaders import DataError
from methods.rest.datastore import Datastore, build, store_prefix, tokenizer_fingerprint


def size_mb(prefix: Path) -> float:
    files = [prefix.with_name(prefix.name + s) for s in (".tokens.npy", ".sa.npy", ".json")]
    return sum(f.stat().st_size for f in files if f.is_file()) / 2**20


def up_to_date(prefix: Path, corpus: dict, fingerprint: str) -> dict | None:
    """The sidecar of a whole store built from this corpus config and tokenizer; None if there is none, if it was
    built otherwise, or if the store is damaged (reported in one line, then rebuilt)."""
    if not prefix.with_name(prefix.name + ".json").is_file():
        return None
    try:
        meta = Datastore.load(prefix).meta
    except READ_ERRORS as err:
        report_corrupt(f"REST datastore {prefix}.*", err)
        return None
    same = meta.get("corpus_config") == corpus and meta.get("tokenizer_fingerprint") == fingerprint
    return meta if same else None


def build_stores(names: list[str], overrides: list[str], force: bool) -> None:
    """Build (or keep, if up to date) each named store; one line per store. Under each store's lock, so two
    `make datastore` build a store once."""
    tokenizer = None
    for name in names:
        cfg = compose_config(overrides + [f"datastore={name}"])
        if tokenizer is None:
            tokenizer = load_tokenizer(cfg.model, cfg.paths.model_cache)
            fingerprint = tokenizer_fingerprint(tokenizer)
        corpus = load_corpus(OmegaConf.to_container(cfg.datastore, resolve=True))
        prefix = store_prefix(project_path(cfg.paths.data_cache) / "datastores", cfg.model.name, name)
        with lock(prefix):
            meta = None if force else up_to_date(prefix, corpus, fingerprint)
            state = "up to date"
            if meta is None:
                store = build(corpus, tokenizer, str(project_path(cfg.paths.data_mirror)),
                              str(project_path(cfg.paths.data_cache)), cfg.model.name)
                store.save(prefix)
                meta, state = store.meta, "built"
        print(
            f"{name}: {state}, {meta['documents']} documents, {meta['tokens']} tokens, "
            f"{size_mb(prefix):.1f} MB, build {meta['build_seconds']:.1f} s, "
            f"dropped (overlap with eval sets) {meta['dropped_overlapping_eval'].get('documents', 0)} -> {prefix}.*"
        )


def main(argv: list[str]) -> int:
    try:
        args, flags = split_flags(argv, ("--force",), usage_of(__doc__))
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    chosen = [a.split("=", 1)[1] for a in args if a.startswith("datastore=")]
    overrides = [a for a in args if not a.startswith("datastore=")]
    names = [n for c in chosen for n in c.split(",") if n] or corpus_names(offline_only=True)
    known = corpus_names()
    bad = [n for n in names if n not in known]
    if bad:
        print(f"error: unknown datastore '{bad[0]}' (known: {', '.join(known)})", file=sys.stderr)
        return 2
    try:
        build_stores(names, overrides, force="--force" in flags)
        return 0
    except (HarnessError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    run_script(main)
