"""A run in progress, checkpointed after every prompt-turn, so that a killed run continues where it stopped.

results/runs/.partial/<key>/ holds
  records.jsonl  one line per finished prompt-turn, appended and fsynced;
  state.pt       {"n_records", "run_id", "resumes", "boot_id", "proposer"}: replaced atomically AFTER each record, so it
                 says how many records are complete and carries the proposer's `state_dict` (what a stateful
                 method learned so far). Lines beyond n_records (a kill between the two writes) and a torn
                 last line are dropped on resume, and those prompt-turns run again.
and `.partial/<key>.lock` is held while a process runs the job: a second process on the same job stops with
one line instead of interleaving records. The key hashes the resolved config (less what cannot change a
measurement: logger, paths, run.resume) and the machine label. When the run completes, the store writes
results/runs/<run_id>/ and the partial directory is removed: a completed run is never resumed into.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import sys
from datetime import datetime
from pathlib import Path

import torch
from filelock import FileLock, Timeout
from omegaconf import OmegaConf

from bench.cachefile import atomic_file, atomic_write, reason
from bench.errors import HarnessError
from bench.run.provenance import boot_id

STATE, RECORDS = "state.pt", "records.jsonl"


def config_key(cfg) -> str:
    """A run's identity: the resolved config without the settings that do not change what is measured."""
    c = OmegaConf.to_container(cfg, resolve=True)
    for k in ("logger", "paths"):
        c.pop(k, None)
    c.get("run", {}).pop("resume", None)
    if not c.get("run", {}).get("record_steps", True):  # off: the key of runs made before the switch existed
        c["run"].pop("record_steps")
    return hashlib.sha1(json.dumps(c, sort_keys=True, default=str).encode()).hexdigest()[:16]


def job_key(cfg, machine: str, weights: str = "") -> str:
    """A checkpoint's folder: the config, the machine and the target's weights (identity.weights_id: weights edited
    in place start a new checkpoint, never extend the old one)."""
    return hashlib.sha1(f"{config_key(cfg)}|{machine}{'|' + weights if weights else ''}".encode()).hexdigest()[:16]


def read_jsonl_prefix(path: Path) -> list[dict]:
    """Whole JSON lines up to the first torn or unreadable one."""
    rows = []
    if path.is_file():
        for line in path.read_text().split("\n"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return rows


class Checkpoint:
    def __init__(self, results_dir: str | Path, key: str):
        root = Path(results_dir) / "runs" / ".partial"
        self.dir = root / key
        self.runs = Path(results_dir) / "runs"
        self.lock = FileLock(str(root / f"{key}.lock"))
        self.records: list[dict] = []
        self.run_id: str | None = None
        self.proposer_state: dict | None = None
        self.resumes: list[dict] = []  # {"at_record", "time", "boot_id"} each time a killed run was continued
        self.started_boot: str | None = None  # the boot id of the process that started the run

    @property
    def resumed_at(self) -> int | None:
        return self.resumes[-1]["at_record"] if self.resumes else None

    def open(self, new_run_id: str, resume: bool = True) -> Checkpoint:
        """Take the job (one process at a time) and load what a killed run of it left, if resuming."""
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.lock.acquire(timeout=0)
        except Timeout:
            raise HarnessError(f"this run is in progress in another process ({self.dir})") from None
        state = self.load_state() if resume else None
        if state and (self.runs / state["run_id"] / "summary.json").is_file():
            state = None  # it completed before its checkpoint was removed: measure anew, never append to it
        if state is None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir.mkdir(parents=True)
            self.run_id, self.started_boot = new_run_id, boot_id()
            return self
        n = state["n_records"]
        self.records = read_jsonl_prefix(self.dir / RECORDS)[:n]
        self.rewrite_records()  # drop lines of a prompt-turn whose state was not saved
        self.run_id, self.proposer_state = state["run_id"], state["proposer"]
        self.started_boot = state.get("boot_id")
        self.resumes = state.get("resumes", []) + [{"at_record": n, "time": now(), "boot_id": boot_id()}]
        return self

    def boots(self) -> list[str]:
        """The machine instances (boot ids) the run's records were measured on, in order, each once: more than
        one is a run resumed in another sitting, whose speed is no one sitting's."""
        return list(dict.fromkeys(b for b in [self.started_boot, *(r.get("boot_id") for r in self.resumes)] if b))

    def load_state(self) -> dict | None:
        path = self.dir / STATE
        if not path.is_file():
            return None
        try:
            state = torch.load(path, weights_only=True)
            n = state["n_records"]
            if len(read_jsonl_prefix(self.dir / RECORDS)) < n:
                path = self.dir / RECORDS  # the file at fault, named in the line below
                raise ValueError(f"fewer whole lines than the {n} prompt-turns {STATE} counts")
        except (OSError, EOFError, RuntimeError, ValueError, KeyError, TypeError, pickle.UnpicklingError) as err:
            # an unreadable checkpoint: say so in one line and start the run over
            print(f"checkpoint: {path} is unreadable ({reason(err)}); starting the run over", file=sys.stderr)
            return None
        return state if state["n_records"] else None

    def rewrite_records(self) -> None:
        atomic_write(self.dir / RECORDS, "".join(json.dumps(r) + "\n" for r in self.records))

    def save(self, record: dict, proposer_state: dict) -> None:
        """After each prompt-turn: the record first (fsynced), then the state that counts it."""
        with (self.dir / RECORDS).open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.records.append(record)
        state = {"n_records": len(self.records), "run_id": self.run_id, "resumes": self.resumes,
                 "boot_id": self.started_boot, "proposer": proposer_state}
        with atomic_file(self.dir / STATE) as f:
            torch.save(state, f)

    def drop_leftover(self) -> None:
        """Remove the checkpoint of a job whose run is complete. A process killed after writing its run and before
        removing the checkpoint leaves both; the sweep then skips the job and would never come back to it. A job
        another process holds is left to that process."""
        if not self.dir.exists():
            return
        try:
            self.lock.acquire(timeout=0)
        except Timeout:
            return
        self.close(done=True)

    def close(self, done: bool) -> None:
        """Release the job; a completed run's checkpoint is removed, a failed one's kept for the next try."""
        if done or not self.records:
            shutil.rmtree(self.dir, ignore_errors=True)
        if self.lock.is_locked:
            self.lock.release()
            if not self.dir.exists():
                Path(self.lock.lock_file).unlink(missing_ok=True)


def now() -> str:
    return datetime.now().isoformat(timespec="seconds")
