"""`make validate-projection`: does a run replayed on this machine's cost profile give back its measured time?

    python scripts/validate_projection.py [model=smollm2-135m] [--limit 3] [--out results/projection] [--evidence DIR]

In one sitting on one machine: runs AR, PLD, Token Recycling with the paper's 80-node tree and with Medusa's 63-node one,
sd (the EAGLE head, untrained, as its draft: its acceptance does not matter here, its time does) and EAGLE-2 on
LIMIT MT-Bench questions (both turns, 64 new tokens), then measures this machine's T(n, context)
(bench/cost/profiles.py) and replays every record onto it (bench/cost/replay.py). Prints, per method, the median and
90th percentile of |projected - measured| / measured wall time over prompt-turns (goals: 5% and 15%) and the
speedup over AR measured and replayed (the replayed one must lie in the measured one's interval). Writes the runs
under OUT/runs, the profile to OUT/profile.json and the table to OUT/validation.json; `--evidence
evidence/projection` copies them there as the evidence folder keeps runs (records without token ids), which
tests/test_projection.py checks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.cost.profiles import Profile
from bench.cost.replay import label, misses, validate
from bench.errors import HarnessError
from bench.paths import project_path
from bench.run.compose import compose_config, split_flags
from bench.run.store import load_runs

USAGE = __doc__.strip().splitlines()[2].strip()
EXPERIMENT = "projection_validate"
JOBS = {  # label -> the run's overrides
    "ar": ["method=ar"],
    "pld": ["method=pld"],
    "token_recycling": ["method=token_recycling"],
    "token_recycling_tree63": ["method=token_recycling", "tree=mc_sim_7b_63", "method.topk=10", "run.variant=tree63"],
    "sd": ["method=sd", "model.draft.source=eagle", "model.draft.vocab=null", "model.eagle.source=init"],
    "eagle2": ["method=eagle2", "model.eagle.source=init"],
}


def measured_profile(bundle, machine: str, ns, contexts, reps: int = 5) -> Profile:
    """This machine's T(n, context): the forward-cost measurement (bench.models.forward_cost) at each context."""
    from bench.models.forward_cost import measure  # torch: only when measuring

    grid = [[1000 * s for s in measure(bundle, ns, prefix_tokens=c, reps=reps).values()] for c in contexts]
    dtype = str(bundle.dtype).replace("torch.", "")
    return Profile(f"{bundle.name}-{machine}-{dtype}", "measured", bundle.name, machine, dtype, list(ns),
                   list(contexts), grid)


def copy_evidence(runs: list, folder: Path, to: Path) -> None:
    """The runs (summaries, configs, records without token ids), the profile and the table, replacing `to`."""
    import shutil

    from bench.report.evidence import write_run

    shutil.rmtree(to, ignore_errors=True)
    (to / "runs").mkdir(parents=True)
    for run in runs:
        write_run(run, to / "runs")
    for name in ("profile.json", "validation.json"):
        shutil.copy(folder / name, to / name)


def main(argv: list[str]) -> int:
    args = list(argv)
    limit, out, evidence = 3, "results/projection", None
    for flag in ("--limit", "--out", "--evidence"):
        if flag in args:
            i = args.index(flag)
            value = args[i + 1] if i + 1 < len(args) else None
            if value is None:
                print(f"error: {flag} needs a value ({USAGE})", file=sys.stderr)
                return 2
            if flag == "--limit":
                limit = int(value)
            else:
                out, evidence = (value, evidence) if flag == "--out" else (out, value)
            del args[i:i + 2]
    try:
        overrides, _ = split_flags(args, (), USAGE)
        cfg = compose_config(overrides)
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    folder = project_path(out)
    common = [*overrides, "dataset=mt_bench", f"run.limit={limit}", "run.max_new_tokens=64",
              f"run.experiment={EXPERIMENT}", f"paths.results={folder}", "logger=none"]
    done = {label(r) for r in load_runs(folder) if r.experiment == EXPERIMENT} if (folder / "runs").is_dir() else set()
    for name, job in JOBS.items():
        if name in done:  # measured in this sitting already (a rerun after a failed job); --out elsewhere to redo
            continue
        print(f"{name}: {' '.join(job)}", flush=True)
        subprocess.run([sys.executable, "-m", "bench.run", *common, *job], check=True)
    from bench.run.runner import get_bundle  # torch: after the runs, in this process

    bundle = get_bundle(cfg.model, cfg.paths.model_cache)
    runs = [r for r in load_runs(folder) if r.experiment == EXPERIMENT]
    machines = {r.machine for r in runs}
    profile = measured_profile(bundle, ",".join(sorted(str(m) for m in machines)),
                               ns=(1, 2, 4, 8, 16, 32, 64, 96, 128), contexts=(64, 256, 512))
    profile.save(folder / "profile.json")
    table = validate(runs, profile)
    (folder / "validation.json").write_text(json.dumps(table, indent=1))
    for m, row in table.items():
        extra = (f"  speedup {row['speedup']:.3f} {row['speedup_interval']} replayed {row['speedup_replayed']:.3f}"
                 if "speedup" in row else "")
        print(f"{m:24s} median {row['median']:6.1%}  p90 {row['p90']:6.1%}{extra}")
    if evidence:
        copy_evidence(runs, folder, project_path(evidence))
    bad = misses(table)
    print("\n".join(["goals missed:", *bad]) if bad else "every goal met")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
