"""Greedy AR reference outputs, cached on disk, for the losslessness check of every run.

Keyed by model, dtype, device, max_new_tokens and the exact prompt ids, so a method whose second
MT-Bench turn differs (it saw a different first answer) gets its own reference.

One JSONL file per model is shared by every process that runs the model (a sweep's parallel jobs): reads and
appends happen under its lock (bench.cachefile), an append is one write of one whole line, and a key this process
does not know is looked up again in the file, which other processes may have extended. A line that does not
parse (a kill mid-append before appends were locked, a full disk) is reported in one line and dropped, and the
file rewritten atomically with the good entries.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from bench.cachefile import atomic_write, lock, report_corrupt


def parse_lines(chunk: bytes) -> tuple[dict[str, list[int]], list[str]]:
    """(entries, one reason per bad line) of JSONL bytes; text after the last newline is a truncated line."""
    *lines, tail = chunk.split(b"\n")
    entries, bad = {}, [f"line cut off: {tail[:40]!r}"] if tail.strip() else []
    for line in filter(bytes.strip, lines):
        try:
            row = json.loads(line)
            key, ids = row["key"], row["output_ids"]
            if not isinstance(key, str) or not all(isinstance(t, int) for t in ids):
                raise TypeError("key or output_ids of the wrong type")
        except (ValueError, KeyError, TypeError) as err:
            bad.append(f"{type(err).__name__}: {str(err)[:60]}")
            continue
        entries.setdefault(key, ids)
    return entries, bad


class ReferenceStore:
    def __init__(self, folder: str | Path, model_key: str):
        self.path = Path(folder) / f"{model_key}.jsonl"
        self.entries: dict[str, list[int]] = {}
        self.seen = (None, 0)  # (inode, bytes) of the file already read: later reads take only what was appended
        self.refresh()

    @staticmethod
    def key(prompt_ids: list[int], max_new_tokens: int) -> str:
        return hashlib.sha1(json.dumps([max_new_tokens, prompt_ids]).encode()).hexdigest()

    def get(self, prompt_ids, max_new_tokens) -> list[int] | None:
        k = self.key(prompt_ids, max_new_tokens)
        if k not in self.entries:
            self.refresh()  # another process may have computed it since
        return self.entries.get(k)

    def put(self, prompt_ids, max_new_tokens, output_ids: list[int]) -> None:
        k = self.key(prompt_ids, max_new_tokens)
        if k in self.entries:
            return
        with lock(self.path):
            self.read_locked()
            if k in self.entries:  # another process wrote it meanwhile: the first entry stays
                return
            self.entries[k] = list(output_ids)
            with self.path.open("ab") as f:
                f.write((json.dumps({"key": k, "output_ids": list(output_ids)}) + "\n").encode())
                self.seen = (os.fstat(f.fileno()).st_ino, f.tell())

    def refresh(self) -> None:
        """Take in what other processes appended since the last look."""
        if self.path.is_file():
            with lock(self.path):
                self.read_locked()

    def read_locked(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return
        inode, done = self.seen
        if st.st_ino != inode or st.st_size < done:  # replaced (repaired) by another process: read it whole
            done = 0
        with self.path.open("rb") as f:
            f.seek(done)
            chunk = f.read()
        entries, bad = parse_lines(chunk)
        for k, ids in entries.items():
            self.entries.setdefault(k, ids)
        if bad:  # we hold the lock, so no append is under way: these lines are damaged for good
            report_corrupt(self.path, ValueError(f"{len(bad)} bad line(s), first: {bad[0]}"),
                           f"dropping them, keeping {len(self.entries)} good entries")
            text = "".join(json.dumps({"key": k, "output_ids": v}) + "\n" for k, v in self.entries.items())
            atomic_write(self.path, text)
            st, done, chunk = self.path.stat(), 0, text.encode()
        self.seen = (st.st_ino, done + len(chunk))
