"""`make data`: write each prompt set, already normalized, to <cache>/<name>/items.jsonl.

Afterwards runs need neither the mirror nor the network. The cache is always rebuilt from an original
source (mirror, package, hub), never from itself, so editing a dataset YAML and re-running takes effect.
Where each set came from is written beside it (source.txt) and shows in run summaries. With no names given, a
hub-only set (no mirror_path or package_file) that cannot be reached is skipped, not an error.

    python scripts/fetch_data.py [--mirror DIR] [--cache data/cache] [names...]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from omegaconf import OmegaConf

from bench.cachefile import atomic_write, lock
from bench.cli import OneLineParser, run_script
from bench.paths import PROJECT
from data.loaders import DataError, cache_path, cache_source_path, resolve_items

CONF_DIR = PROJECT / "conf" / "dataset"


def default_mirror() -> str | None:
    """$SPECREPRO_DATA_MIRROR, else ../shared/data beside the repo if it exists."""
    if os.environ.get("SPECREPRO_DATA_MIRROR"):
        return os.environ["SPECREPRO_DATA_MIRROR"]
    beside = PROJECT.parent / "shared" / "data"
    return str(beside) if beside.is_dir() else None


def write_items(path: Path, items: list[dict], source: str = "") -> None:
    """Write atomically under the file's lock (bench.cachefile), so an interrupted run never leaves a half-written
    cache that later loads, and two `make data` never interleave. `source` (where the items came from) goes to
    source.txt beside them, so runs on the cache still say e.g. that a mirror subset was used. The old source.txt
    goes first and the new one is written last: cut anywhere, the cache never names a source its items did not
    come from (a cache without one says only that it is a cache)."""
    with lock(path):
        cache_source_path(path).unlink(missing_ok=True)
        atomic_write(path, "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items))
        atomic_write(cache_source_path(path), source + "\n")


def main(argv: list[str] | None = None) -> int:
    known = sorted(p.stem for p in CONF_DIR.glob("*.yaml"))
    parser = OneLineParser(prog="fetch_data.py", description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", default=default_mirror(), help="mirror dir (default: %(default)s)")
    parser.add_argument(
        "--cache", default=str(PROJECT / "data" / "cache"), help="cache dir (default: %(default)s)"
    )
    parser.add_argument("names", nargs="*", help=f"datasets (default: all of {', '.join(known)})")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(known))
    if unknown:
        parser.error(f"unknown dataset(s) {', '.join(unknown)}; known: {', '.join(known)}")

    if args.mirror and not Path(args.mirror).is_dir():  # each set then comes from a package or the hub
        print(f"warning: no mirror folder at {args.mirror}: sets come from packages or the hub", file=sys.stderr)
    failed = 0
    for name in args.names or known:
        cfg = OmegaConf.load(CONF_DIR / f"{name}.yaml")
        try:
            items, source = resolve_items(cfg, args.mirror, args.cache, use_cache=False)
        except DataError as e:
            if not args.names and not (cfg.get("mirror_path") or cfg.get("package_file")):
                # A hub-only set (chatgpt_prompts) offline: `make data` still fills the rest; naming it fails.
                print(f"{name:<11} SKIPPED (hub only, no offline copy): {e}", file=sys.stderr)
                continue
            print(f"{name:<11} FAILED: {e}", file=sys.stderr)
            failed += 1
            continue
        write_items(cache_path(args.cache, name), items, source)
        print(f"{name:<11} {len(items):>5} items  from {source}")
    return 1 if failed else 0


if __name__ == "__main__":
    run_script(main)
