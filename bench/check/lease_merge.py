"""`gpu-check --merge`: one lease's calls (each call's `--partial` or results.json) as one results file, which
bench.check.gpu_check writes as a folder."""

from __future__ import annotations

import json
from pathlib import Path

from bench.errors import HarnessError

# The parts whose rows a lease may run over several calls (`--methods` a few at a time): one row a method, batch and
# temperature
SPLIT = ("methods", "graph_methods")


def row_key(row: dict) -> tuple:
    return row["method"], row["batch"], row["temperature"]


def merged(paths: list[Path]) -> dict:
    """One lease's results files (each call's `--partial` or results.json) as one: each part from the file that
    ran it, `seconds` joined, the first file's `sizes` and environment, and `environment.calls`: per file its
    name, parts, tree and sizes. A part in two files, or files from two machines, is an error (HarnessError), but for
    the methods parts' rows (SPLIT: a lease may check their methods over several calls), which join, a row in two
    files the error."""
    out: dict = {"seconds": {}}
    calls = []
    for path in paths:
        try:
            one = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise HarnessError(f"--merge {path}: not a results file ({type(err).__name__})") from None
        if "environment" not in one:
            raise HarnessError(f"--merge {path}: no environment (not gpu-check's results)")
        env = one["environment"]
        if calls and env.get("machine") != out["environment"].get("machine"):
            raise HarnessError(f"--merge {path}: machine {env.get('machine')!r}, not {out['environment'].get('machine')!r}")
        parts = [k for k in one if k not in ("sizes", "environment", "seconds")]
        if twice := [k for k in parts if k in out and k not in SPLIT]:
            raise HarnessError(f"--merge {path}: part(s) {', '.join(twice)} already in an earlier file")
        seconds = dict(one.get("seconds", {}))
        for k in (k for k in parts if k in out):  # a SPLIT part run before: its rows join, its seconds add
            if again := sorted({row_key(r) for r in one[k]} & {row_key(r) for r in out[k]}):
                raise HarnessError(f"--merge {path}: {k} row(s) {again} already in an earlier file")
            one[k], seconds[k] = out[k] + one[k], round(out["seconds"].get(k, 0) + seconds.get(k, 0), 1)
        out.setdefault("sizes", one.get("sizes", {}))
        out.setdefault("environment", dict(env))
        out["seconds"] |= seconds
        out |= {k: one[k] for k in parts}
        calls.append({"file": path.name, "parts": parts, "git_sha": env.get("git_sha"),
                      "git_dirty": env.get("git_dirty"), "sizes": one.get("sizes")})
    out["environment"]["calls"] = calls
    return out
