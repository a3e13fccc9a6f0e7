"""What a method's forward cost inside gpu-check's timed passes against the bare forward probed beside them: the
check's table line (bench.check.check_table) and the GPU validation's `forward_in_run` (bench.cost.gpu_validation)."""

from __future__ import annotations

import numpy as np


def forward_alone_and_in_run(sp: dict) -> dict:
    """Per method of a speedup part (gpu-check) that kept its timed passes' own phases and probed the bare forward
    beside them (since 2026-11-28, evening): ms of its forward a decode step as the timed passes ran it
    (unsynced), against the probe's T(n) at their mean context averaged over its steps' widths, and their ratio.
    The projection prices a forward at the probe's kind of T(n); a ratio above 1 is forward cost the loop adds (the
    eager Token Recycling rows' misses: issue 68). Unsynced, the phase is the host's launching of the forward: its
    cost where the host sets the pace (the leases' embedded model: 2.5-3.4 ms of device time in a 25-36 ms step);
    on a device-bound model its device time would fall in the phase that reads the outcome, and this ratio says
    nothing."""
    probe = sp.get("forward_probe")
    if not probe or not probe.get("ms"):
        return {}
    ns = sorted(probe["ms"], key=int)

    def t(n):  # the probe's T(n), interpolated
        return np.interp(n, [int(x) for x in ns], [probe["ms"][x] for x in ns])

    out = {}
    for m, row in sp.items():
        if isinstance(row, dict) and "target_forward" in (row.get("ms_per_step_timed") or {}):
            widths = {int(w): c for w, c in (row.get("widths") or {row["mean_width"]: 1}).items()}
            alone = float(sum(c * t(w) for w, c in widths.items()) / sum(widths.values()))
            in_run = row["ms_per_step_timed"]["target_forward"]
            out[m] = {"width": row["mean_width"], "in_run_ms": in_run, "alone_ms": round(alone, 3),
                      "ratio": round(in_run / alone, 3)}
    if "ar" in out:  # over AR's own ratio: what the step ratio sees (a probe timed in a faster or slower
        for f in out.values():  # moment than the passes moves every ratio alike; AR's is in the fit)
            f["over_ar"] = round(f["ratio"] / out["ar"]["ratio"], 3)
    return out
