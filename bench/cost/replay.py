"""A run's time replayed step by step on a cost profile (bench/cost/profiles.py): what the acceptance measured here takes
on another machine, model shape or dtype.

A record (one prompt-turn) holds, per step, the tokens it committed (`accept_lengths`, the prefill's one token first)
and, per verification step, the tree nodes the target verified (`verified_nodes`, the root left out). Its target
work on a profile is the prefill's forward over the prompt plus, for each verification step, one forward over the
verified nodes and the root after the context committed so far. The rest of the record's time (drafting, the
tree, verification, updates: everything outside `prefill` and `target_forward`) is added as measured, so a replay
onto this machine's own profile gives back the measured wall time when the profile is right. Draft-model work is
inside that rest: projected onto another machine it stays as measured here (a note says so), until the records
keep the draft's forwards per step.
"""

from __future__ import annotations

import numpy as np

from bench.cost.profiles import Profile
from bench.run.metrics import speedup, speedup_interval

TARGET_PHASES = ("prefill", "target_forward")


def target_steps(record: dict) -> tuple[np.ndarray, np.ndarray]:
    """(n, context) of every target forward of a record: the prefill (the prompt, no context), then one per
    verification step (verified nodes + the root, after the prompt and the tokens committed before it)."""
    prompt, accepted = record["prompt_tokens"], np.asarray(record["accept_lengths"], int)
    verified = np.asarray(record.get("verified_nodes") or record.get("draft_nodes") or [0] * (len(accepted) - 1))
    context = prompt + np.cumsum(accepted)[: len(verified)]
    return np.concatenate([[prompt], verified + 1]), np.concatenate([[0], context])


def target_ms(record: dict, profile: Profile) -> float:
    n, context = target_steps(record)
    return float(profile.cost(n, context).sum())


def rest_s(record: dict) -> float:
    """The record's measured time outside target forwards (drafting, tree, verification, updates, untimed)."""
    phases = record.get("phase_times") or {}
    return record["wall_time"] - sum(phases.get(p, 0.0) for p in TARGET_PHASES)


def replay_s(record: dict, profile: Profile) -> float:
    """Projected wall time of one record on the profile: its target forwards there, the rest as measured."""
    return target_ms(record, profile) / 1000 + rest_s(record)


def run_error(records: list[dict], profile: Profile) -> float:
    """(projected - measured) / measured wall time over all records of a run."""
    measured = sum(r["wall_time"] for r in records)
    return (sum(replay_s(r, profile) for r in records) - measured) / measured


GOALS = {"median": 0.05, "p90": 0.15}  # |projected - measured| / measured over prompt-turns, per method


def replayed(records: list[dict], profile: Profile) -> list[dict]:
    """The records with their wall time replayed on the profile."""
    return [{**r, "wall_time": replay_s(r, profile)} for r in records]


def label(run) -> str:
    """A run's row in a validation table: method[_variant]."""
    return run.method + (f"_{run.variant}" if run.variant else "")


def validate(runs: list, profile: Profile) -> dict:
    """Per run (label: method[_variant]): the replay's relative error over its prompt-turns (median, 90th
    percentile) and, beside the AR run's, its speedup measured (with interval) and replayed."""
    ar = next(r for r in runs if r.method == "ar")
    out = {}
    for run in runs:
        errors = [abs(replay_s(r, profile) / r["wall_time"] - 1) for r in run.records]
        row = {"run_id": run.run_id, "prompt_turns": len(errors), "median": float(np.median(errors)),
               "p90": float(np.percentile(errors, 90))}
        if run is not ar:
            row |= {"speedup": speedup(run.records, ar.records),
                    "speedup_interval": speedup_interval(run.records, ar.records),
                    "speedup_replayed": speedup(replayed(run.records, profile), replayed(ar.records, profile))}
        out[label(run)] = row
    return out


def misses(table: dict) -> list[str]:
    """Each goal a validation table misses: an error over GOALS, a replayed speedup outside the measured interval."""
    bad = [f"{m}: {k} {row[k]:.1%} > {GOALS[k]:.0%}" for m, row in table.items() for k in GOALS if row[k] > GOALS[k]]
    for m, row in table.items():
        lo_hi = row.get("speedup_interval")
        if lo_hi and not lo_hi[0] <= row["speedup_replayed"] <= lo_hi[1]:
            bad.append(f"{m}: replayed speedup {row['speedup_replayed']:.3f} outside [{lo_hi[0]:.3f}, {lo_hi[1]:.3f}]")
    return bad
