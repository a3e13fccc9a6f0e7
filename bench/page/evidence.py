"""The evidence behind REPRODUCED.md (`make evidence`; evidence/README.md): rebuilt from scratch each time."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from bench.cachefile import atomic_dir, atomic_write
from bench.errors import HarnessError
from bench.page.reproduced import EVIDENCE, build_sections, scrub, scrub_paths
from bench.paths import project_path
from bench.run.store import Run, load_runs

# results/ subfolders of measurement files (*.json) an artifact on the page reads: ProPD Figure 3's, tree=auto's.
FILES = ("propd", "cache/forward_cost")
# Token ids, in a record or among its counters, and every key ending in `_ids` (per-step draft lists are kept).
TOKEN_FIELDS = ("output_ids", "step_tokens")
IGNORED = "tables/\nfigures/\n"
# `make gpu-check` folders (results/gpu_check/<machine>-<time>/), added, never removed: a node may not come back.
CHECKS = "gpu_check"


def no_tokens(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in TOKEN_FIELDS and not k.endswith("_ids")}


def turn(record: dict) -> dict:
    """A record without its token ids (the evidence keeps metrics, not text)."""
    out = no_tokens(record)
    if isinstance(out.get("counters"), dict):
        out["counters"] = no_tokens(out["counters"])
    return out


def write_run(run: Run, folder: Path) -> None:
    d = folder / run.path.name
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps(scrub(run.meta), indent=2) + "\n")
    config = run.path / "config.yaml"
    (d / "config.yaml").write_text(scrub_paths(config.read_text()) if config.is_file() else "")
    turns = "".join(json.dumps(turn(r)) + "\n" for r in run.records).encode()
    # gzipped (a fifth of the bytes; every lease call carries the tree: scripts/gpu_session.sh carry), with no
    # timestamp, so the same records give the same file
    (d / "turns.jsonl.gz").write_bytes(gzip.compress(turns, compresslevel=9, mtime=0))


def build_evidence(results_dir: str | Path = "results", out: str | None = None) -> str:
    """Copies the runs the page uses from results_dir into `out` (default evidence/); returns what it did."""
    results = project_path(results_dir)
    if not (results / "runs").is_dir():
        raise HarnessError(f"no runs/ under {results_dir!r}: the evidence folder is left as it is")
    folder = project_path(out or EVIDENCE)
    runs = load_runs(results)
    used = {r.run_id: r for s in build_sections(results, runs) for r in s.used}
    if not used:
        raise HarnessError(f"no run under {results_dir!r} is used by the page: the evidence folder is left as it is")
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_dir(folder / "runs") as tmp:
        for run in sorted(used.values(), key=lambda r: r.run_id):
            write_run(run, Path(tmp))
    for sub in FILES:
        shutil.rmtree(folder / sub, ignore_errors=True)
        for f in sorted(Path(results, sub).glob("*.json")):
            atomic_write(folder / sub / f.name, scrub_paths(f.read_text()))
    copy_checks(results, folder)
    atomic_write(folder / ".gitignore", IGNORED)
    return f"{len(used)} runs -> {out or EVIDENCE}/runs (then `make reproduced`)\n"


def copy_checks(results: Path, folder: Path) -> list[Path]:
    """Every results/gpu_check/<stamp>/ into <folder>/gpu_check/<stamp>/ (.json, .csv and .md files)."""
    copied, root = [], Path(results, CHECKS)
    for f in sorted(root.glob("*/**/*.*")):
        if f.suffix in (".json", ".csv", ".md"):
            # bytes decoded as they are: read_text would turn the csv module's CRLF rows into LF
            atomic_write(folder / CHECKS / f.relative_to(root), scrub_paths(f.read_bytes().decode()))
            copied.append(folder / CHECKS / f.relative_to(root))
    return copied
