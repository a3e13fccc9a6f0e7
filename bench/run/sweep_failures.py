"""A sweep goes on past a job that fails, and fails itself at the end.

A job's bad input (missing data, a datastore or heads not built, a model the hub cannot give) is its `error:` line,
as for a single run; in a sweep that job then leaves FAILED.json in its Hydra job folder and returns, so the other
jobs still run (an exit would end the whole sweep at the first failure, whatever came after it). When every job has
returned, `FailedJobs` (a Hydra callback, conf/hydra/default.yaml) prints one line naming the failed jobs and exits
1, so `make` and CI still see the failure. The job folders sit under hydra.sweep.dir whatever the launcher: Hydra
gives every job the sweep's own resolved timestamp.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode

FAILED = "FAILED.json"


def in_sweep() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def mark_failed(message: str) -> None:
    """Record this sweep job's error in its job folder (Hydra's runtime.output_dir)."""
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / FAILED).write_text(json.dumps({"num": hc.job.num, "overrides": list(hc.overrides.task),
                                          "error": message}))


def failures(sweep_dir: str | Path) -> list[dict]:
    """The FAILED.json of each failed job under a sweep folder, by job number."""
    found = [json.loads(p.read_text()) for p in Path(sweep_dir).rglob(FAILED)]  # any hydra.sweep.subdir
    return sorted(found, key=lambda f: f["num"])


def summary_line(failed: list[dict], common: list[str] = ()) -> str:
    """One line naming each failed job by the overrides that are its own (`common`: those every job has)."""
    jobs = "; ".join(f"#{f['num']} {' '.join(o for o in f['overrides'] if o not in common)}" for f in failed)
    return (f"error: {len(failed)} sweep job{'s' if len(failed) > 1 else ''} failed ({jobs}); each printed its error "
            "above, the other jobs ran (the same command reruns only what is not complete)")


class FailedJobs(Callback):
    def on_multirun_start(self, config, **kwargs) -> None:
        for stale in Path(str(config.hydra.sweep.dir)).rglob(FAILED):  # a fixed hydra.sweep.dir run again
            stale.unlink()

    def on_multirun_end(self, config, **kwargs) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        failed = failures(sweep_dir)
        if failed:
            common = list(config.hydra.overrides.task)  # the command line's; a swept key's is "key=a,b"
            print(summary_line(failed, common), file=sys.stderr)
            sys.exit(1)
