"""`make validate-projection`: does a run replayed on this machine's cost profile give back its measured time?

    python scripts/validate_projection.py [model=smollm2-135m] [--limit 3] [--max-new-tokens 128] [--out DIR]
                                          [--evidence DIR]
    python scripts/validate_projection.py --fitted evidence    # the older runs against profiles fitted to them

In one sitting, in one process, on one machine: runs AR, PLD, Token Recycling with the paper's 80-node tree and with
Medusa's 63-node one, sd (the EAGLE head, untrained, as its draft: its acceptance does not matter here, its time
does) and EAGLE-2 on LIMIT MT-Bench questions (both turns, 128 new tokens), interleaved: question by question, each
method in turn, and measures this machine's T(n, context) (bench/cost/profiles.py) before the first and after each
method's question. Each prompt-turn is replayed (bench/cost/replay.py) on the mean of the two profiles measured
next to its question. Why interleaved: this VM's speed moves by up to 30% between minutes (the sitting of
2026-11-27 morning, whole runs one after another: AR's forwards ran at 0.81-0.86 of the sitting's mean profile and
the 63-node tree's at 1.03-1.18, each steady within its run), so whole runs minutes apart are timed on different
machines in effect; interleaved, the drift hits every method alike (the measured speedups) and the profiles next
to a question are at most a minute or two from it. Prints, per method, the median and 90th percentile of
|projected - measured| / measured wall time over prompt-turns (goals: 5% and 15%) and the speedup over AR
measured and replayed (the replayed one must lie in the measured one's interval), then the same on the mean of
all the sitting's profiles and on a profile fitted to the runs' own timed forwards (in-sample: a floor). Writes
the runs under OUT/runs, the profiles to OUT/profiles.json (in the order measured), which method's question lies
between profile k and k + 1 to OUT/schedule.json, their mean to OUT/profile.json and the table to
OUT/validation.json; `--evidence evidence/projection` copies them there as the evidence folder keeps runs (records
without token ids), which tests/test_projection.py checks.

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
from bench.cli import run_script
from bench.core.machine import machine_id
from bench.cost.profiles import Profile, mean_profile
from bench.cost.replay import fitted_profile, misses, next_to, replay_s, replayable, validate
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


def check_selection(cfg) -> None:
    load_selection(cfg.dataset, str(project_path(cfg.paths.data_mirror)), str(project_path(cfg.paths.data_cache)))


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

    from bench.page.evidence import write_run

    shutil.rmtree(to, ignore_errors=True)
    (to / "runs").mkdir(parents=True)
    for run in runs:
        write_run(run, to / "runs")
    for name in ("profile.json", "profiles.json", "schedule.json", "validation.json"):
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
    import torch  # torch and hydra: after the arguments are checked
    from omegaconf import OmegaConf

    from bench.run.jobs import set_threads
    from bench.run.runner import Runner, run_summary
    from bench.run.store import write_run

    profiles, schedule, runs = [], [], []
    try:
        check_selection(compose_config(common))  # a missing dataset: one line before the first profile is measured
        jobs = {name: compose_config([*common, *job]) for name, job in JOBS.items()}
        set_threads(jobs["ar"].run)
        runners = {}
        for name, cfg in jobs.items():
            torch.manual_seed(cfg.run.seed)  # as bench.run.jobs.measure: an untrained head's weights
            runners[name] = Runner(cfg)
        bundle = runners["ar"].bundle  # its target: the one every runner's forwards are priced on
        machine = machine_id(bundle.device, bundle.linear_backend)
        for runner in runners.values():
            runner.warm_up()
        records: dict[str, list[dict]] = {name: [] for name in jobs}
        profiles.append(measured_profile(bundle, machine))
        questions = len(runners["ar"].items)
        with tqdm(total=questions * len(jobs), desc="validate-projection", unit="method-question") as bar:
            for i in range(questions):
                for name, runner in runners.items():
                    runner.run_items(runner.items[i : i + 1], records[name])
                    schedule.append([name, runner.items[i]["question_id"]])
                    profiles.append(measured_profile(bundle, machine))
                    bar.update()
        for name, cfg in jobs.items():  # AR first: the others' summaries pair with it
            summary = run_summary(cfg, runners[name], records[name])
            runs.append(read_run(write_run(folder, records[name], summary, OmegaConf.to_yaml(cfg, resolve=True))))
    except (HarnessError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    mean = mean_profile(profiles)
    mean.save(folder / "profile.json")
    atomic_write(folder / "profiles.json", json.dumps([asdict(p) for p in profiles], indent=1))
    atomic_write(folder / "schedule.json", json.dumps(schedule))
    table = validate(runs, next_to(schedule, profiles))
    atomic_write(folder / "validation.json", json.dumps(table, indent=1))
    on_mean = validate(runs, mean)
    fitted = validate(runs, fitted_profile([x for r in runs for x in r.records], "fitted", machine))
    for m, row in table.items():
        extra = (f"  speedup {row['speedup']:.3f} {row['speedup_interval']} replayed {row['speedup_replayed']:.3f}"
                 if "speedup" in row else "")
        print(f"{m:24s} median {row['median']:6.1%}  p90 {row['p90']:6.1%}{extra}  (the sitting's mean profile: "
              f"{on_mean[m]['median']:.1%}, {on_mean[m]['p90']:.1%}, speedup {on_mean[m].get('speedup_replayed', 1):.3f}; "
              f"fitted in-sample: {fitted[m]['median']:.1%}, {fitted[m]['p90']:.1%})")
    if evidence:
        copy_evidence(runs, folder, project_path(evidence))
    bad = misses(table)
    print("\n".join(["goals missed:", *bad]) if bad else "every goal met")
    return 0


if __name__ == "__main__":
    run_script(main)
