"""The results store: the one module that reads and writes results/runs/<run_id>/.

A run directory holds records.jsonl (one line per prompt-turn), summary.json and config.yaml; a run in the
committed evidence folder (bench/page/evidence.py) holds turns.jsonl.gz instead of records.jsonl: the same records
without their token ids, which every report reads the same way. A run is written
into a hidden temp directory and renamed when complete, so a directory without summary.json is still being
written, or died, and readers skip it (a run in progress is checkpointed under runs/.partial/ by
bench.run.checkpoint). Records are the source of truth; summary.json says what the run was.

Writing: the runner builds a run's summary (bench.run.runner.run_summary) and `write_run` writes it, as do the
test fixtures. Reading: `load_runs` (reports choose among them with bench.report.select), `read_run` (W&B's copy),
`find_baseline` and `find_complete` (the runner's speedups and a sweep's skip-if-complete).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

from bench.errors import HarnessError


@dataclass
class Run:
    """One complete run: its directory, its summary.json as written (`meta`: the store's, W&B's and the evidence
    copy's), and its labels as attributes, which is how reports read them (a misspelled label is an
    AttributeError, not a silent None). Records load when first asked for."""

    path: Path
    meta: dict = field(repr=False)

    @classmethod
    def of(cls, meta: dict, records: list[dict]) -> Run:
        """A run made in memory (tests build reports from these): no directory, its records given."""
        run = cls(Path(meta.get("run_id") or "in-memory"), meta)
        run.__dict__["records"] = records  # the cached_property's slot
        return run

    # -- labels: what the run was ------------------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.meta.get("run_id") or self.path.name

    @property
    def method(self) -> str | None:
        return self.meta.get("method")

    @property
    def variant(self) -> str | None:
        """The run's variant label; "" and null both mean the method's default configuration (None here)."""
        return self.meta.get("variant") or None

    @property
    def dataset(self) -> str | None:
        return self.meta.get("dataset")

    @property
    def model(self) -> str | None:
        return self.meta.get("model")

    @property
    def machine(self) -> str | None:
        return self.meta.get("machine")

    @property
    def experiment(self) -> str | None:
        return self.meta.get("experiment")

    @property
    def max_new_tokens(self) -> int | None:
        return self.meta.get("max_new_tokens")

    @property
    def paper_size(self) -> str | None:
        return self.meta.get("paper_size")

    @property
    def settings(self) -> dict:
        """The method's settings as the run recorded them ({} for summaries before they were recorded)."""
        return self.meta.get("method_settings") or {}

    @property
    def overrides(self) -> dict:
        return self.meta.get("overrides") or {}

    @property
    def selection(self) -> dict | None:
        return self.meta.get("selection")

    @property
    def sync_phases(self) -> bool | None:
        return self.meta.get("sync_phases")

    @property
    def config_key(self) -> str | None:
        return self.meta.get("config_key")

    @property
    def temperature(self) -> float:
        # Summaries before sampling existed have no temperature: they were greedy.
        return round(float(self.meta.get("temperature") or 0.0), 6)

    @property
    def batch_size(self) -> int:
        return int(self.meta.get("batch_size") or 1)  # summaries before batching were batch 1

    @property
    def before_batched_drafting(self) -> bool:
        """Recorded before a batch's rows could draft at once (4b29af0): every method drafted them one by one."""
        return "draft_rows_at_once" not in self.meta

    # -- what was measured -------------------------------------------------------------------------------------
    @property
    def summary(self) -> dict:
        """The run's measured summary (MAT, rates, losslessness, ...); {} if it has none."""
        return self.meta.get("summary") or {}

    @property
    def provenance(self) -> dict:
        """Versions, device, dtype, ... of the process that measured it; {} if unrecorded."""
        return self.meta.get("provenance") or {}

    @property
    def speedup(self) -> dict | None:
        return self.meta.get("speedup")

    @property
    def graphs(self) -> bool:
        """Decoded in the engine's graph mode (run.graphs): reports leave such runs out unless asked."""
        return bool(self.meta.get("graphs"))

    @property
    def key(self) -> tuple:
        # The temperature is part of the key so runs at 0 and 0.6 (DySpec's tables) never shadow each other.
        # (Graph-mode runs never meet eager ones here: `where` keeps one regime, eager unless asked.)
        return (self.model, self.method, self.variant, self.dataset, self.temperature)

    @property
    def created(self) -> datetime:
        # Naive and aware stamps cannot be compared; treat naive ones as UTC.
        try:
            t = datetime.fromisoformat(self.meta.get("created") or "")
        except ValueError:
            return datetime.min.replace(tzinfo=UTC)
        return t if t.tzinfo else t.replace(tzinfo=UTC)

    @cached_property
    def records(self) -> list[dict]:
        return read_records(self.path)


# a results run's; an evidence run's (records less token ids, gzipped: every lease call carries the tree; as
# bench/page/evidence.py wrote them before 2026-11-29, uncompressed)
RECORD_FILES = ("records.jsonl", "turns.jsonl.gz", "turns.jsonl")


def records_file(run_dir: Path) -> Path | None:
    return next((Path(run_dir, n) for n in RECORD_FILES if Path(run_dir, n).is_file()), None)


def read_records(run_dir: Path) -> list[dict]:
    """A run's records; HarnessError (one line) where the file is cut or not JSON lines: runs are written whole
    (write_run), so such a file was damaged after, and no report should count what is left of it."""
    path = records_file(run_dir) or Path(run_dir) / RECORD_FILES[0]
    n = 0
    try:
        with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as f:
            records = []
            for n, line in enumerate(f, start=1):
                if line.strip():
                    records.append(json.loads(line))
            return records
    except (json.JSONDecodeError, EOFError, gzip.BadGzipFile, zlib.error, UnicodeDecodeError) as err:
        # a line that does not parse is line n; a file that does not read fails on the line after the last good one
        line = n if isinstance(err, json.JSONDecodeError) else n + 1
        why = err.msg if isinstance(err, json.JSONDecodeError) else str(err) or type(err).__name__
        raise HarnessError(f"{path} is damaged at line {line} ({why}): rerun that run, or move its folder out of "
                           "runs/") from None


def load_runs(results_dir: str | Path) -> list[Run]:
    """Complete runs under results_dir/runs, oldest first."""
    runs = []
    for d in sorted(Path(results_dir, "runs").glob("*/")):
        if not (d / "summary.json").is_file() or records_file(d) is None:
            continue
        try:
            runs.append(Run(d, json.loads((d / "summary.json").read_text())))
        except json.JSONDecodeError:
            print(f"report: skipping {d} (unreadable summary.json)", file=sys.stderr)
    return sorted(runs, key=lambda r: (r.created, r.run_id))


def find_baseline(results_dir: str | Path, summary: dict, method: str) -> Run | None:
    """Latest complete run of `method` with the same model, dataset, max_new_tokens, machine, temperature, batch
    size (speedups at batch B are against the baseline at batch B) and engine mode (run.graphs, run.graph_compile,
    the static cache's size)."""
    runs = (Run(s.parent, json.loads(s.read_text())) for s in sorted(Path(results_dir, "runs").glob("*/summary.json")))
    return latest_baseline(runs, summary, method)


def latest_baseline(runs, summary: dict, method: str) -> Run | None:
    """find_baseline's rule over runs given in run-id order (the last one measured alike wins)."""
    best = None
    for run in runs:
        other = run.meta
        same = all(other.get(k) == summary[k] for k in ("model", "dataset", "max_new_tokens", "machine"))
        same = same and same_weights(other, summary)
        same = same and other.get("temperature", 0.0) == summary.get("temperature", 0.0)
        same = same and (other.get("batch_size") or 1) == summary.get("batch_size", 1)
        same = same and bool(other.get("graphs")) == bool(summary.get("graphs"))  # graph mode against its own AR
        same = same and other.get("graph_compile") == summary.get("graph_compile")  # compiled against compiled
        same = same and other.get("graph_capacity") == summary.get("graph_capacity")  # attending over as many
        if same and other["method"] == method and not other.get("variant"):
            best = run
    return best


def same_weights(a: dict, b: dict) -> bool:
    """Two summaries' targets hold the same weights, as far as both say (runs made before 2026-11-30 do not)."""
    return not a.get("weights") or not b.get("weights") or a["weights"] == b["weights"]


def find_complete(results_dir: str | Path, config_key: str, machine: str, weights: str = "") -> Run | None:
    """The latest complete run of the same config (bench.run.checkpoint.config_key) on the same machine label, over
    the same weights as far as it says."""
    found = [r for r in load_runs(results_dir) if r.config_key == config_key and r.machine == machine
             and same_weights(r.meta, {"weights": weights})]
    return found[-1] if found else None


def write_run(results_dir: str | Path, records: list[dict], summary: dict, config_yaml: str) -> Path:
    """The one writer of a run: results_dir/runs/<summary's run_id>/ with records.jsonl, summary.json and
    config.yaml, written into a hidden temp dir and renamed: a crash never leaves a run that looks complete."""
    run_id = summary["run_id"]
    runs = Path(results_dir) / "runs"
    final, tmp = runs / run_id, runs / f".tmp-{run_id}"
    shutil.rmtree(tmp, ignore_errors=True)  # left by a process killed while writing this (resumed) run
    tmp.mkdir(parents=True)
    try:
        with (tmp / "records.jsonl").open("w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        (tmp / "config.yaml").write_text(config_yaml)
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2))
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def read_summary(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "summary.json").read_text())


def read_run(run_dir: str | Path) -> Run:
    """One complete run by its directory (its records load when first asked for)."""
    return Run(Path(run_dir), read_summary(run_dir))
