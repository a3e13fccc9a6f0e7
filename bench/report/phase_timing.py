"""The one rule for phase shares measured on a GPU (docs/reports.md); CPU runs are exact either way."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from bench.core.timing import phases_exact
from bench.errors import HarnessError
from bench.run.store import Run

FIX = "run.sync_phases=true"


class UnsyncedPhasesError(HarnessError):
    """A phase breakdown asked of runs whose phases were not synced on an asynchronous device."""


def run_device(run: Run) -> str | None:
    return run.provenance.get("device")


def exact_phases(run: Run) -> bool:
    """Whether `run`'s per-phase times are each phase's own time."""
    return phases_exact(run_device(run), run.sync_phases)


def unsynced(runs: Iterable[Run | None]) -> tuple[list[Run], str]:
    """The runs whose phases are not their own, and their devices."""
    bad = [r for r in runs if r is not None and not exact_phases(r)]
    return bad, ", ".join(sorted({str(run_device(r)) for r in bad}))


def unsynced_note(runs: Iterable[Run | None]) -> str | None:
    """A table footer's line naming the runs whose shares were withheld; None when there are none."""
    bad, devices = unsynced(runs)
    if not bad:
        return None
    return (f"Overhead withheld for {', '.join(r.run_id for r in bad)}: timed on {devices} without {FIX}, so its "
            f"phases time kernel launches, not the work (docs/reports.md).")


def require_exact_phases(runs: Iterable[Run | None], artifact: str, command: str) -> None:
    """Refuse a phase breakdown of unsynced runs: UnsyncedPhasesError naming them and `command`, which times them
    per phase."""
    bad, devices = unsynced(runs)
    if bad:
        raise UnsyncedPhasesError(
            f"{artifact} refuses run(s) {', '.join(r.run_id for r in bad)}: timed on {devices} without {FIX}, so "
            f"their phase times are kernel launches, not each phase's work; time them per phase with `{command}` "
            f"(or add {FIX} to the run)")


Component = tuple[str, str, tuple[str, ...]]  # a paper's time component: key, label, the phases of ours it sums


def components(declared: Sequence[Component], present: Iterable[str]) -> list[Component]:
    """A breakdown's components of our `present` phases: `declared`, with "other" holding every present phase no
    other component names (its declared phases included); an undeclared "other" only when there are such phases."""
    named = {p for key, _, phases in declared if key != "other" for p in phases}
    rest = tuple(sorted(set(present) - named))
    shown = [c for c in declared if c[0] != "other"]
    if rest or len(shown) < len(declared):
        shown.append(("other", "Other", rest))
    return shown
