"""Greedy AR reference outputs, cached on disk, for the losslessness check of every run.

Keyed by model, dtype, device, max_new_tokens and the exact prompt ids, so a method whose second
MT-Bench turn differs (it saw a different first answer) gets its own reference.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


class ReferenceStore:
    def __init__(self, folder: str | Path, model_key: str):
        self.path = Path(folder) / f"{model_key}.jsonl"
        self.entries: dict[str, list[int]] = {}
        if self.path.is_file():
            for line in self.path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.entries[row["key"]] = row["output_ids"]

    @staticmethod
    def key(prompt_ids: list[int], max_new_tokens: int) -> str:
        return hashlib.sha1(json.dumps([max_new_tokens, prompt_ids]).encode()).hexdigest()

    def get(self, prompt_ids, max_new_tokens) -> list[int] | None:
        return self.entries.get(self.key(prompt_ids, max_new_tokens))

    def put(self, prompt_ids, max_new_tokens, output_ids: list[int]) -> None:
        k = self.key(prompt_ids, max_new_tokens)
        if k in self.entries:
            return
        self.entries[k] = list(output_ids)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:  # one whole line per append: a crash loses at most that entry
            f.write(json.dumps({"key": k, "output_ids": list(output_ids)}) + "\n")
