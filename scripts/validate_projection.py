"""`make validate-projection`: does a run replayed on this machine's cost profile give back its measured time?

    python scripts/validate_projection.py [model=smollm2-135m] [--limit 3] [--max-new-tokens 128] [--out DIR]
                                          [--evidence DIR]
    python scripts/validate_projection.py --fitted evidence    # the older runs against profiles fitted to them

In one sitting, in one process, on one machine: runs AR, PLD, Token Recycling with the paper's 80-node tree and with
Medusa's 63-node one, sd (the EAGLE head, untrained, as its draft: its acceptance does not matter here, its time
does) and EAGLE-2 on LIMIT MT-Bench questions (both turns, 128 new tokens), and measures this machine's T(n,
context) (bench/cost/profiles.py) before the first run and after each. Every run is replayed (bench/cost/replay.py)
on the mean of the sitting's profiles: on this VM one forward's time moves by +-15% within seconds, on each core
apart (a probe on 2026-11-26), so profiles minutes apart differ by noise more than by drift: in the sitting of
2026-11-26 (64-token turns) the mean of the seven profiles gave four of six methods smaller errors than the two next
to each run (docs/cost_model.md). 128-token turns average more of that noise. Prints, per method, the median and
90th percentile of |projected - measured| / measured wall time over prompt-turns (goals: 5% and 15%) and the speedup
over AR measured and replayed (the replayed one must lie in the measured one's interval), then the same against the
two profiles next to each run and against a profile fitted to the runs' own timed forwards (in-sample: a floor).
Writes the runs under OUT/runs, the profiles to OUT/profile.json (their mean) and OUT/profiles.json (each, in the
order measured: before the first run, after each) and the table to OUT/validation.json; `--evidence
evidence/projection` copies them there as the evidence folder keeps runs (records without token ids), which
tests/test_projection.py checks.

`--fitted DIR`: for runs measured before any profile was (the evidence), the replay's error per method against a
profile fitted to each sitting's own timed forwards (one per machine label and day).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench.cachefile import atomic_write
from bench.core.machine import machine_id
from bench.cost.profiles import Profile
from bench.cost.replay import fitted_profile, label, misses, replay_s, replayable, validate
from bench.errors import HarnessError
from bench.paths import project_path
from bench.run.compose import compose_config, split_flags
from bench.run.store import load_runs, read_run
from data.loaders import DataError, load_selection

USAGE = __doc__.strip().splitlines()[2].strip()
EXPERIMENT = "projection_validate"
NS, CONTEXTS = (1, 2, 4, 8, 16, 32, 64, 96, 128), (64, 256, 512)
PROMPTS = (32, 64, 128, 256, 384, 512)  # prefill sizes: MT-Bench's prompts, second turns included
JOBS = {  # label -> the run's overrides
    "ar": ["method=ar"],
    "pld": ["method=pld"],
    "token_recycling": ["method=token_recycling"],
    "token_recycling_tree63": ["method=token_recycling", "tree=mc_sim_7b_63", "method.topk=10", "run.variant=tree63"],
    "sd": ["method=sd", "model.draft.source=eagle", "model.draft.vocab=null", "model.eagle.source=init"],
    "eagle2": ["method=eagle2", "model.eagle.source=init"],
}


def measured_profile(bundle, machine: str, ns=NS, contexts=CONTEXTS, reps: int = 3) -> Profile:
    """This machine's T(n, context): the forward-cost measurement (bench.models.forward_cost) at each context."""
    from bench.models.forward_cost import measure, measure_prefill  # torch: only when measuring

    grid = [[1000 * s for s in measure(bundle, ns, prefix_tokens=c, reps=reps).values()] for c in contexts]
    prefill = [1000 * s for s in measure_prefill(bundle, PROMPTS, reps=reps).values()]
    dtype = str(bundle.dtype).replace("torch.", "")
    return Profile(f"{bundle.name}-{machine}-{dtype}", "measured", bundle.name, machine, dtype, list(ns),
                   list(contexts), grid, list(PROMPTS), prefill)


def next_to(runs: list, profiles: list[Profile]) -> dict[str, Profile]:
    """Per run label, the mean of the profiles measured just before and just after it (profiles[i], [i + 1])."""
    return {label(r): mean_profile(profiles[i : i + 2]) for i, r in enumerate(runs)}


def check_selection(cfg) -> None:
    load_selection(cfg.dataset, str(project_path(cfg.paths.data_mirror)), str(project_path(cfg.paths.data_cache)))


def mean_profile(profiles: list[Profile]) -> Profile:
    ms = np.mean([p.ms for p in profiles], axis=0).tolist()
    prefill = np.mean([p.prefill_ms for p in profiles], axis=0).tolist() if profiles[0].prefill_ms else None
    return Profile(**{**asdict(profiles[0]), "ms": ms, "prefill_ms": prefill})


def fitted_errors(folder: str) -> None:
    """Per sitting (machine label, day) of the runs under folder: the replay's error per method on a profile fitted
    to that sitting's own batch-1 runs."""
    runs = [r for r in load_runs(project_path(folder)) if r.batch_size == 1 and replayable(r.records)]
    sittings = defaultdict(list)
    for run in runs:
        sittings[(run.machine, run.created.date().isoformat())].append(run)
    for (machine, day), group in sorted(sittings.items()):
        profile = fitted_profile([x for r in group for x in r.records], "fitted", str(machine))
        errors = defaultdict(list)
        for run in group:
            errors[run.method] += [abs(replay_s(x, profile) / x["wall_time"] - 1) for x in run.records]
        print(f"{day} {machine} ({len(group)} runs): " + "; ".join(
            f"{m} {np.median(e):.1%}/{np.percentile(e, 90):.1%}" for m, e in sorted(errors.items())))


def copy_evidence(runs: list, folder: Path, to: Path) -> None:
    """The runs (summaries, configs, records without token ids), the profile and the table, replacing `to`."""
    import shutil

    from bench.report.evidence import write_run

    shutil.rmtree(to, ignore_errors=True)
    (to / "runs").mkdir(parents=True)
    for run in runs:
        write_run(run, to / "runs")
    for name in ("profile.json", "profiles.json", "validation.json"):
        shutil.copy(folder / name, to / name)


def main(argv: list[str]) -> int:
    args = list(argv)
    if args[:1] == ["--fitted"] and len(args) == 2:
        fitted_errors(args[1])
        return 0
    limit, new_tokens, out, evidence = 3, 128, "results/projection", None
    for flag in ("--limit", "--max-new-tokens", "--out", "--evidence"):
        if flag in args:
            i = args.index(flag)
            value = args[i + 1] if i + 1 < len(args) else None
            if value is None:
                print(f"error: {flag} needs a value ({USAGE})", file=sys.stderr)
                return 2
            if flag in ("--limit", "--max-new-tokens"):
                if not value.isdigit() or int(value) < 1:
                    print(f"error: {flag} needs a positive integer, got {value!r}", file=sys.stderr)
                    return 2
                limit, new_tokens = (int(value), new_tokens) if flag == "--limit" else (limit, int(value))
            else:
                out, evidence = (value, evidence) if flag == "--out" else (out, value)
            del args[i:i + 2]
    try:
        overrides, _ = split_flags(args, (), USAGE)
        compose_config(overrides)  # bad overrides: one line before anything runs
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    folder = project_path(out)
    common = [*overrides, "dataset=mt_bench", f"run.limit={limit}", f"run.max_new_tokens={new_tokens}",
              f"run.experiment={EXPERIMENT}", f"paths.results={folder}", "logger=none"]
    if (folder / "runs").is_dir() and any(r.experiment == EXPERIMENT for r in load_runs(folder)):
        print(f"error: {folder} holds runs of an earlier sitting; give another --out", file=sys.stderr)
        return 2
    from bench.run.jobs import measure  # torch: after the arguments are checked
    from bench.run.runner import get_bundle

    profiles, runs, machine = [], [], None
    try:
        check_selection(compose_config(common))  # a missing dataset: one line before the first profile is measured
        for job in tqdm(JOBS.values(), desc="validate-projection", unit="run"):
            cfg = compose_config([*common, *job])
            bundle = get_bundle(cfg.model, cfg.paths.model_cache)  # the bundle the run uses (kept by get_bundle)
            machine = machine or machine_id(bundle.device, bundle.linear_backend)
            if not profiles:
                profiles.append(measured_profile(bundle, machine))
            runs.append(read_run(measure(cfg)))
            profiles.append(measured_profile(bundle, machine))  # after the run: each run sits between two profiles
    except (HarnessError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    mean = mean_profile(profiles)
    mean.save(folder / "profile.json")
    atomic_write(folder / "profiles.json", json.dumps([asdict(p) for p in profiles], indent=1))
    table = validate(runs, mean)
    (folder / "validation.json").write_text(json.dumps(table, indent=1))
    beside = validate(runs, next_to(runs, profiles))
    fitted = validate(runs, fitted_profile([x for r in runs for x in r.records], "fitted", machine))
    for m, row in table.items():
        extra = (f"  speedup {row['speedup']:.3f} {row['speedup_interval']} replayed {row['speedup_replayed']:.3f}"
                 if "speedup" in row else "")
        print(f"{m:24s} median {row['median']:6.1%}  p90 {row['p90']:6.1%}{extra}  (next to the run: "
              f"{beside[m]['median']:.1%}, {beside[m]['p90']:.1%}; fitted in-sample: {fitted[m]['median']:.1%}, "
              f"{fitted[m]['p90']:.1%})")
    if evidence:
        copy_evidence(runs, folder, project_path(evidence))
    bad = misses(table)
    print("\n".join(["goals missed:", *bad]) if bad else "every goal met")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
