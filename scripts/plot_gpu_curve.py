"""T(n)/T(1), the verification-size cost curve, of a `make gpu-check` folder beside this CPU's (docs/gpu_leases.md).

    python scripts/plot_gpu_curve.py CHECK_FOLDER CPU_CURVE.json OUT.png

CHECK_FOLDER: a gpu-check folder (its forward_cost.csv; the table's context, the first timed, is plotted);
CPU_CURVE.json: a forward-cost curve of Token Recycling's tree=auto (results/cache/forward_cost/*.json). Each line
is one (model, dtype), divided by its own T(1): how much more a step verifying n tokens costs than one verifying 1.
A missing or malformed file is one `error:` line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd


def curves(check: Path, cpu_curve: Path) -> dict[str, tuple[list[int], list[float]]]:
    """{label: (n, T(n)/T(1))} of every (model, dtype) in the check, then the CPU curve's."""
    costs = pd.read_csv(check / "forward_cost.csv")
    env = json.loads((check / "results.json").read_text())["environment"]
    costs = costs[costs["context"] == costs["context"].iloc[0]]
    out = {}
    for (model, dtype), rows in costs.groupby(["model", "dtype"], sort=False):
        rows = rows.astype({"n": int}).sort_values("n")
        out[f"{model} {dtype}, {env.get('gpu', 'GPU')}"] = (rows["n"].tolist(), (rows["ms"] / rows["ms"].iloc[0]).tolist())
    cpu = json.loads(cpu_curve.read_text())
    out[f"{cpu['model']} {cpu['dtype']}, CPU ({cpu['machine']})"] = (cpu["sizes"], [m / cpu["ms"][0] for m in cpu["ms"]])
    return out


def plot(lines: dict, out: Path, context) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, (ns, ratios) in lines.items():
        ax.plot(ns, ratios, marker="o", ms=3, label=label, ls="--" if "CPU" in label else "-")
    ax.set(xscale="log", yscale="log", xlabel="tokens verified in one forward (n)", ylabel="T(n) / T(1)",
           title=f"Forward cost against verification size ({context} tokens cached on the GPU)")
    ax.set_xticks([1, 2, 4, 8, 16, 32, 64, 128], labels=["1", "2", "4", "8", "16", "32", "64", "128"])
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("error: usage: python scripts/plot_gpu_curve.py CHECK_FOLDER CPU_CURVE.json OUT.png", file=sys.stderr)
        return 2
    check, cpu_curve, out = map(Path, argv)
    try:
        lines = curves(check, cpu_curve)
        context = pd.read_csv(check / "forward_cost.csv")["context"].iloc[0]
    except (OSError, KeyError, ValueError, IndexError) as err:
        print(f"error: cannot read the curves ({check}, {cpu_curve}): {err}", file=sys.stderr)
        return 1
    plot(lines, out, context)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
