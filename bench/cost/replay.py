"""A run's time replayed step by step on a cost profile (bench/cost/profiles.py): what the acceptance measured here takes
on another machine, model shape or dtype.

A record (one prompt-turn) holds, per step, the tokens it committed (`accept_lengths`, the prefill's one token first)
and, per verification step, the tree nodes the target verified (`verified_nodes`, the root left out). Its target
work on a profile is the prefill's forward over the prompt plus, for each verification step, one forward over the
verified nodes and the root after the context committed so far. The rest of the record's time (drafting, the
tree, verification, updates: everything outside `prefill` and `target_forward`) is added as measured, so a replay
onto this machine's own profile gives back the measured wall time when the profile is right.

Given a draft profile too, a draft-model method's forwards (`draft_steps`) are replayed on it in place of its
measured `draft_forward` phase. A head drafting from the target's states (EAGLE, Medusa) keeps its time as measured.
A `Setting` is a paper's hardware as its text describes it: the target's profile and the draft's.

At batch > 1 a batch (the records sharing `batch.id` and wall time: bench.metrics.batch_key) is replayed whole: its prefill over the rows' prompts padded to
the longest, then per step one forward of the rows still in the batch over the widest row's nodes (the rows are
padded to it) at their mean context, priced as `batched_ms`; the batch's time outside target forwards is kept as
measured, draft forwards included. Each row's replayed wall time is its measured one scaled like its batch's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bench.cost.host import DRAFT_PHASE, TARGET_PHASES, HostCost, decode_steps, priced_rest_s, step_costs_at
from bench.cost.profiles import Profile, hardware_of, load_profile, mean_profile
from bench.metrics import batch_key, speedup, speedup_interval


def target_steps(record: dict) -> tuple[np.ndarray, np.ndarray]:
    """(n, context) of every target forward of a record: the prefill (the prompt, no context), then one per
    verification step (verified nodes + the root, after the prompt and the tokens committed before it)."""
    prompt, accepted = record["prompt_tokens"], np.asarray(record["accept_lengths"], int)
    verified = np.asarray(record.get("verified_nodes") or record.get("draft_nodes") or [0] * (len(accepted) - 1))
    context = prompt + np.cumsum(accepted)[: len(verified)]
    return np.concatenate([[prompt], verified + 1]), np.concatenate([[0], context])


def draft_steps(record: dict) -> tuple[np.ndarray, np.ndarray] | None:
    """(n, context) of every draft-model forward of a record; None when it counted none (no draft model). Records
    keep each forward's tokens (counters `draft_sizes`, from 2026-11-26); for older ones, a step's first
    forward catches up the tokens committed since the last (the prompt and the first token at the first step)
    and its others share the step's drafted tokens evenly. Each at the context the target's step had."""
    c = record.get("counters") or {}
    calls = c.get("draft_calls")
    if not calls:
        return None
    prompt, accepted = record["prompt_tokens"], np.asarray(record["accept_lengths"], int)
    sizes = c.get("draft_sizes") or [
        [prompt + 1 if i == 0 else accepted[i]] + [max(tokens / max(k - 1, 1), 1.0)] * (k - 1)
        for i, (k, tokens) in enumerate(zip(calls, c.get("draft_tokens") or [0] * len(calls)))]
    context = prompt + np.cumsum(accepted)[: len(sizes)]
    return (np.concatenate([np.asarray(s, float) for s in sizes]),
            np.repeat(context, [len(s) for s in sizes]).astype(float))


def target_step_ms(record: dict, profile: Profile) -> np.ndarray:
    """ms of each of the record's target forwards on the profile: its prefill (`Profile.prefill`), then its
    verifications."""
    n, context = target_steps(record)
    ms = profile.cost(n, context)
    ms[0] = profile.prefill(n[0])
    return ms


def target_ms(record: dict, profile: Profile) -> float:
    """The record's target forwards on the profile, in all."""
    return float(target_step_ms(record, profile).sum())


def batched_ms(profile: Profile, n, context, rows) -> np.ndarray:
    """ms of forwards of `rows` rows over n tokens each at a mean context (arrays broadcast): one row of rows * n
    tokens (the weights read once, the FLOPs of every token), plus for each row past the first the read of its own
    cache, T(1, context) - T(1, 0). Exact for a roofline where memory decides, an overestimate by those reads
    where FLOPs do; batch 1 is `cost`."""
    n, context, rows = np.broadcast_arrays(*(np.asarray(x, float) for x in (n, context, rows)))
    return profile.cost(rows * n, context) + (rows - 1) * (profile.cost(1, context) - profile.cost(1, 0))


def batch_target_ms(rows: list[dict], profile: Profile) -> float:
    """One batch's target forwards on the profile: the prefill of its rows' prompts padded to the longest, then
    per verification step the rows still in the batch over the widest row's nodes at their mean context."""
    steps = [target_steps(r) for r in rows]
    shape = (len(rows), max(len(n) for n, _ in steps))
    n, context, active = np.zeros(shape), np.zeros(shape), np.zeros(shape, bool)
    for i, (ni, ci) in enumerate(steps):
        n[i, : len(ni)], context[i, : len(ci)], active[i, : len(ni)] = ni, ci, True
    count = active.sum(0)[1:]
    ms = batched_ms(profile, n.max(0)[1:], (context * active).sum(0)[1:] / count, count)
    return float(profile.prefill(len(rows) * n[:, 0].max()) + ms.sum())


def phases_of(record: dict) -> dict:
    """The phase times that cover a record: its own at batch 1, its batch's at batch > 1."""
    return (record.get("batch") or {}).get("phase_times") or record.get("phase_times") or {}


def rest_s(record: dict) -> float:
    """The record's (or a batch's) measured time outside target forwards (drafting, tree, verification, updates,
    untimed)."""
    phases = record.get("phase_times") or {}
    return record["wall_time"] - sum(phases.get(p, 0.0) for p in TARGET_PHASES)


def replayable(records: list[dict]) -> bool:
    """Whether the records keep their steps and time their target forwards apart (the engine's do; HF's own loop
    times `generate`)."""
    return bool(records) and all("prompt_tokens" in r and "accept_lengths" in r
                                 and set(TARGET_PHASES) & set(phases_of(r)) for r in records)


def forwards_priced(records: list[dict], here: Profile) -> list[dict]:
    """Records of a loop that times no target forward apart (HF's `generate`), their target forwards priced on
    `here`, a profile of the machine they ran on (e.g. `fitted_profile` of the timed runs measured beside them), as
    `prefill` and `target_forward` phases, never more than the wall time: what is left is the loop's own time.
    Batch 1; records that time their forwards are returned as they are."""
    out = []
    for r in records:
        if r.get("batch") or set(TARGET_PHASES) & set(phases_of(r)):
            out.append(r)
            continue
        ms = target_step_ms(r, here)
        scale = min(1.0, 1000 * r["wall_time"] / ms.sum()) / 1000
        out.append({**r, "phase_times": {**(r.get("phase_times") or {}), "prefill": float(ms[0]) * scale,
                                         "target_forward": float(ms[1:].sum()) * scale}})
    return out


# The rest of a step on the target: (phases, wall time, decode steps, draft forwards replayed) -> seconds. True keeps
# it as measured (`kept`), False leaves it out (the bound of no overhead); bench.cost.host prices it for a GPU.
RestRule = Callable[[dict, float, int, bool], float]


def kept(phases: dict, wall: float, steps: int, draft_replayed: bool = False) -> float:
    """The rest as measured: the time outside target forwards, less the draft forwards when replayed."""
    return wall - sum(phases.get(p, 0.0) for p in (*TARGET_PHASES, *([DRAFT_PHASE] if draft_replayed else [])))


def rule_of(rest: bool | RestRule) -> RestRule:
    return rest if callable(rest) else kept if rest else (lambda *_: 0.0)


def loops_priced(runs: list[list[dict]]) -> list[list[dict]]:
    """Each run's records with HF's own loop's forwards priced at this machine's cost (`forwards_priced`), on a
    profile fitted to the timed batch-1 records among them (`fitted_profile`); as they are when none is timed."""
    timed = [r for records in runs if replayable(records) for r in records if not r.get("batch")]
    if not timed:
        return runs
    here = fitted_profile(timed, "fitted", "here")
    return [forwards_priced(records, here) for records in runs]


def replay_s(record: dict, profile: Profile, draft: Profile | None = None, rest: bool | RestRule = True) -> float:
    """Projected wall time of one record on the profile: its target forwards there, with a draft profile its
    draft-model forwards on that, and its rest by `rest` (RestRule)."""
    steps = draft_steps(record) if draft is not None else None
    ms = target_ms(record, profile) + (float(draft.cost(*steps).sum()) if steps is not None else 0.0)
    return ms / 1000 + rule_of(rest)(record.get("phase_times") or {}, record["wall_time"], decode_steps(record),
                                     steps is not None)


def run_error(records: list[dict], profile: Profile) -> float:
    """(projected - measured) / measured wall time over all records of a run."""
    measured = sum(r["wall_time"] for r in records)
    return (sum(replay_s(r, profile) for r in records) - measured) / measured


GOALS = {"median": 0.05, "p90": 0.15}  # |projected - measured| / measured over prompt-turns, per method


def replayed(records: list[dict], profile: Profile, draft: Profile | None = None,
             rest: bool | RestRule = True) -> list[dict]:
    """The records with their wall time replayed on the profile (and the draft's); at batch > 1 their batch's too
    (each batch whole, its draft forwards as measured, its rest over its longest row's steps)."""
    batches: dict[tuple, list[dict]] = {}
    for r in records:
        if r.get("batch"):
            batches.setdefault(batch_key(r["batch"]), []).append(r)
    walls, rule = {}, rule_of(rest)
    for key, rows in batches.items():
        b = rows[0]["batch"]
        walls[key] = batch_target_ms(rows, profile) / 1000 + rule(b.get("phase_times") or {}, b["wall_time"],
                                                                  max(map(decode_steps, rows)), False)
    out = []
    for r in records:
        if r.get("batch"):
            b, wall = r["batch"], walls[batch_key(r["batch"])]
            out.append({**r, "wall_time": r["wall_time"] * wall / b["wall_time"], "batch": {**b, "wall_time": wall}})
        else:
            out.append({**r, "wall_time": replay_s(r, profile, draft, rest)})
    return out


@dataclass(frozen=True)
class Setting:
    """A paper's hardware setting as its text describes it (label), as profile names (bench.cost.profiles
    .load_profile): the target's and, for a draft-model paper, the draft's."""

    label: str
    target: str
    draft: str | None = None

    @property
    def host(self) -> HostCost | None:
        return host_cost(self.target)

    def run_replayed(self, run, rest: bool = True) -> list[dict]:
        """A run's records (bench.run.store.Run) replayed on the setting, the rest priced for its method,
        temperature and batch size: what every projected figure of a run is made of."""
        return self.replayed(run.records, rest, run.method, run.temperature, run.batch_size,
                             run.before_batched_drafting)

    def replayed(self, records: list[dict], rest: bool = True, method: str | None = None,
                 temperature: float = 0.0, batch_size: int = 1, before_batched_drafting: bool = False) -> list[dict]:
        """The records replayed on the setting; given their method (and its run's temperature and batch size), the
        rest priced on the target's host where it can be (`priced`), else kept as measured."""
        rule = (priced(method, self.host, temperature=temperature, batch_size=batch_size,
                       before_batched_drafting=before_batched_drafting) if rest and method
                else None) or rest
        return replayed(records, load_profile(self.target), load_profile(self.draft) if self.draft else None, rule)


def host_cost(profile_name: str) -> HostCost | None:
    """The launch cost and host factor of a profile's hardware (bench/cost/hardware/*.yaml); None without them."""
    hw = hardware_of(profile_name)
    if hw is None or hw.launch_us is None or hw.host_factor is None:
        return None
    return HostCost(hw.launch_us, hw.host_factor, hw.host_source or hw.name)


def priced(method: str, host: HostCost | None, costs=None, temperature: float = 0.0,
           batch_size: int = 1, before_batched_drafting: bool = False) -> RestRule | None:
    """A method's rest priced on `host` from its step costs (bench.cost.host; by default those measured at the
    run's temperature and batch size, `step_costs_at`); None without a host price or step costs for the method (its
    rest is then kept as measured)."""
    costs = costs or step_costs_at(temperature, method, batch_size, before_batched_drafting)
    if host is None or costs is None or method not in costs.methods:
        return None
    return lambda phases, wall, steps, draft: priced_rest_s(phases, wall, steps, method, costs, host, draft)


def label(run) -> str:
    """A run's row in a validation table: method[_variant]."""
    return run.method + (f"_{run.variant}" if run.variant else "")


def validate(runs: list, profile: Profile | Callable[[object, dict], Profile]) -> dict:
    """Per run (label: method[_variant]): the replay's relative error over its prompt-turns (median, 90th
    percentile) and, beside the AR run's, its speedup measured (with interval) and replayed. `profile`: one for
    every record, or a function of (run, record) giving each record its own (the profiles measured next to it;
    batch-1 runs, each record replayed alone)."""
    on = profile if callable(profile) else lambda run, record: profile
    ar = next(r for r in runs if r.method == "ar")

    replays = {run.run_id: [x for r in run.records for x in replayed([r], on(run, r))] for run in runs}  # once each
    out = {}
    for run in runs:
        errors = [abs(x["wall_time"] / r["wall_time"] - 1) for x, r in zip(replays[run.run_id], run.records)]
        row = {"run_id": run.run_id, "prompt_turns": len(errors), "median": float(np.median(errors)),
               "p90": float(np.percentile(errors, 90))}
        if run is not ar:
            row |= {"speedup": speedup(run.records, ar.records),
                    "speedup_interval": speedup_interval(run.records, ar.records),
                    "speedup_replayed": speedup(replays[run.run_id], replays[ar.run_id])}
        out[label(run)] = row
    return out


def next_to(schedule: list[list], profiles: list[Profile]) -> Callable[[object, dict], Profile]:
    """(run, record) -> the mean of the profiles measured just before and after the record's question was run by
    the run's method: `schedule[k]` = [run label, question_id] lay between profiles[k] and profiles[k + 1] (an
    interleaved sitting: scripts/validate_projection.py)."""
    at = {(name, q): mean_profile(profiles[k : k + 2]) for k, (name, q) in enumerate(schedule)}
    return lambda run, record: at[label(run), record["question_id"]]


def fitted_profile(records: list[dict], name: str, machine: str, ns=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
                   contexts=(0, 1000)) -> Profile:
    """A profile fitted to records' own timed target forwards (their `prefill` + `target_forward` phases over
    their steps, `target_steps`): T(n, c) = a(n) + b(n) c / 1000, a and b piecewise linear in n on `ns` and
    non-decreasing, by least squares of the relative error per record (scipy's nnls on the increments). For runs
    measured before a profile was, e.g. the older evidence (docs/cost_model.md); in-sample, so its error is a
    floor, not a validation."""
    from scipy.optimize import nnls

    knots = np.asarray(ns, float)
    rise = np.tril(np.ones((len(knots), len(knots))))  # values = rise @ increments, increments >= 0

    def features(record: dict) -> np.ndarray:
        n, c = target_steps(record)
        i = np.clip(np.searchsorted(knots, n, side="right") - 1, 0, len(knots) - 2)
        t = (n - knots[i]) / (knots[i + 1] - knots[i])  # past the last knot: extrapolated along the last segment
        w = np.zeros((len(n), len(knots)))
        np.add.at(w, (np.arange(len(n)), i), 1 - t)
        np.add.at(w, (np.arange(len(n)), i + 1), t)
        w = w @ rise
        return np.concatenate([w.sum(0), (w * c[:, None]).sum(0) / 1000])

    x = np.array([features(r) for r in records])
    y = np.array([1000 * sum((r.get("phase_times") or {}).get(p, 0.0) for p in TARGET_PHASES) for r in records])
    coef = nnls(x / y[:, None], np.ones_like(y))[0]
    a, b = rise @ coef[: len(knots)], rise @ coef[len(knots):]
    grid = [[float(a[j] + b[j] * c / 1000) for j in range(len(knots))] for c in contexts]
    return Profile(name, "fitted", name, machine, "float32", [int(n) for n in ns], list(contexts), grid)


def misses(table: dict) -> list[str]:
    """Each goal a validation table misses: an error over GOALS, a replayed speedup outside the measured interval."""
    bad = [f"{m}: {k} {row[k]:.1%} > {GOALS[k]:.0%}" for m, row in table.items() for k in GOALS if row[k] > GOALS[k]]
    for m, row in table.items():
        lo_hi = row.get("speedup_interval")
        if lo_hi and not lo_hi[0] <= row["speedup_replayed"] <= lo_hi[1]:
            bad.append(f"{m}: replayed speedup {row['speedup_replayed']:.3f} outside [{lo_hi[0]:.3f}, {lo_hi[1]:.3f}]")
    return bad
