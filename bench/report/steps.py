"""The per-node draft records of runs made with `run.record_steps=true` (docs/runs.md): each verification step's
draft tokens, parents, draft probabilities and accepted flags (counters step_*), read by the step figures."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from bench.metrics import bootstrap_interval, ratio_of_sums
from bench.run.store import Run

TOKENS = "step_tokens"  # token ids: the committed evidence drops them (bench/page/evidence.py)
LISTS = ("step_parents", "step_conf", "step_accepted")
SWITCH = "run.record_steps=true"


def has_steps(run: Run) -> bool:
    return any((r.get("counters") or {}).get("step_accepted") for r in run.records)


def steps(record: dict) -> list[dict]:
    """One dict per verification step of a record: tokens (None without token ids), parents, conf, accepted
    (drafting order) and `start`, the output tokens committed before that step's draft."""
    c = record.get("counters") or {}
    if not all(c.get(k) for k in LISTS):
        return []
    tokens = c.get(TOKENS) or [None] * len(c["step_accepted"])
    starts = np.cumsum(record["accept_lengths"]).tolist()  # [0] is the prefill's token: step i starts after i+1
    return [{"tokens": t, "parents": p, "conf": q, "accepted": a, "start": starts[i]}
            for i, (t, p, q, a) in enumerate(zip(tokens, *(c[k] for k in LISTS)))]


def nodes(run: Run) -> pd.DataFrame:
    """One row per drafted node: question_id, turn, step, node, depth, conf (the draft's probability of the token),
    accepted, reached (verification tested it: its parent the root or accepted and, when sampling, no earlier
    sibling accepted, since the walk tries a node's children in drafting order and stops at the first it accepts;
    greedy verification compares every child with the target's choice), path_conf (conf's product)."""
    rows, sampled = [], run.temperature > 0
    for r in run.records:
        for s, st in enumerate(steps(r)):
            depth, path, taken = {}, {}, set()  # taken: parents with a child accepted so far
            for i, (parent, conf, acc) in enumerate(zip(st["parents"], st["conf"], st["accepted"])):
                depth[i] = 1 if parent < 0 else depth[parent] + 1
                c = np.nan if conf is None else float(conf)
                path[i] = c if parent < 0 else path[parent] * c
                reached = (parent < 0 or bool(st["accepted"][parent])) and not (sampled and parent in taken)
                if acc:
                    taken.add(parent)
                rows.append({"question_id": r["question_id"], "turn": r.get("turn", 0), "step": s, "node": i,
                             "depth": depth[i], "conf": c, "path_conf": path[i], "accepted": int(acc),
                             "reached": int(reached)})
    return pd.DataFrame(rows, columns=["question_id", "turn", "step", "node", "depth", "conf", "path_conf",
                                       "accepted", "reached"])


def binned_rate(df: pd.DataFrame, x: str, edges, y: str = "accepted") -> pd.DataFrame:
    """Per bin of column `x` (right-open bins between `edges`, the last closed): the nodes, the mean of `y` and its
    95% interval over questions."""
    out = []
    for lo, hi in itertools.pairwise(edges):
        last = hi == edges[-1]
        sub = df[(df[x] >= lo) & ((df[x] <= hi) if last else (df[x] < hi))]
        per_q = sub.groupby("question_id")[y].agg(["sum", "count"])
        interval = bootstrap_interval([per_q["sum"].tolist(), per_q["count"].tolist()], ratio_of_sums) \
            if len(per_q) else None
        out.append({"bin_low": lo, "bin_high": hi, "nodes": len(sub),
                    "rate": float(sub[y].mean()) if len(sub) else np.nan,
                    "rate_low": interval[0] if interval else np.nan,
                    "rate_high": interval[1] if interval else np.nan})
    return pd.DataFrame(out)


def rises(bins: pd.DataFrame) -> str:
    """Whether the rate rises with the binned quantity: the highest filled bin's interval against the lowest's."""
    filled = bins.dropna(subset=["rate_low", "rate_high"])
    filled = filled[filled["nodes"] > 0]
    if len(filled) < 2:
        return "undecided"
    lo, hi = filled.iloc[0], filled.iloc[-1]
    if hi["rate_low"] > lo["rate_high"]:
        return "holds"
    return "does not hold" if hi["rate_high"] < lo["rate_low"] else "undecided"
