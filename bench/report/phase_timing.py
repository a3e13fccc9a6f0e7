"""The one rule for phase shares measured on a GPU: refuse what was not timed per phase.

On an asynchronous device (CUDA) the `target_forward` phase of a run made without `run.sync_phases=true` times
only the kernel launches; the forward's device time lands in whichever later phase waits for it. Such a run's
phase shares (and its overhead share) are not each phase's own, so every report that shows them refuses them
through this module (bench.core.timing.phases_exact decides): a breakdown artifact stops with one `error:` line
naming the runs and the command that times them per phase; a table that shows a share beside other figures
(the `runs` table's overhead, the engine benchmark) leaves that cell empty. CPU runs are exact either way.
"""

from __future__ import annotations

from collections.abc import Iterable

from bench.core.timing import phases_exact
from bench.errors import HarnessError
from bench.run.store import Run

FIX = "run.sync_phases=true"


class UnsyncedPhasesError(HarnessError):
    """A phase breakdown asked of runs whose phases were not synced on an asynchronous device."""


def run_device(run: Run) -> str | None:
    """The device a run was timed on (its summary's provenance); None for summaries that did not record it."""
    return run.provenance.get("device")


def exact_phases(run: Run) -> bool:
    """Whether `run`'s per-phase times are each phase's own time (see the module docstring)."""
    return phases_exact(run_device(run), run.sync_phases)


def share_or_none(run: Run, share: float | None) -> float | None:
    """A phase share of `run` to show beside other figures: withheld (None) where the phases were not synced."""
    return share if exact_phases(run) else None


def unsynced_note(runs: Iterable[Run | None]) -> str | None:
    """A table footer's line naming the runs whose shares were withheld; None when there are none."""
    bad = [r for r in runs if r is not None and not exact_phases(r)]
    if not bad:
        return None
    return (f"Overhead withheld for {', '.join(r.run_id for r in bad)}: timed on "
            f"{', '.join(sorted({str(run_device(r)) for r in bad}))} without {FIX}, so its phases time kernel "
            f"launches, not the work (docs/reports.md).")


def require_exact_phases(runs: Iterable[Run | None], artifact: str, command: str) -> None:
    """Refuse a phase breakdown of runs timed on an asynchronous device without phase syncs (UnsyncedPhasesError,
    one line naming the runs and `command`, which times them per phase)."""
    bad = [r for r in runs if r is not None and not exact_phases(r)]
    if bad:
        devices = ", ".join(sorted({str(run_device(r)) for r in bad}))
        raise UnsyncedPhasesError(
            f"{artifact} refuses run(s) {', '.join(r.run_id for r in bad)}: timed on {devices} without {FIX}, so "
            f"their phase times are kernel launches, not each phase's work; time them per phase with `{command}` "
            f"(or add {FIX} to the run)")
