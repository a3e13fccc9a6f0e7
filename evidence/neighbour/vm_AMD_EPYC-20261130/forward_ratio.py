"""forward_ratio.csv: per method and dataset, each prompt-turn's target-forward time in the runs of argv[1] (with a
neighbour) over the same prompt-turn's in the 2026-11-30 runs of argv[2] (alone), and the whole runs' wall times."""

import csv
import sys

from bench.run.store import load_runs


def key(run):
    return run.method + (f"[{run.variant}]" if run.variant else ""), run.dataset


def main(with_neighbour: str, alone_folder: str) -> None:
    both = {key(r): r for r in load_runs(with_neighbour)}
    alone = {key(r): r for r in load_runs(alone_folder) if r.created.strftime("%Y%m%d") == "20261130" and key(r) in both}
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["method", "dataset", "prompt_turns", "same_steps", "forward_ratio_min", "forward_ratio_median",
                  "forward_ratio_max", "wall_ratio_total"])
    for k in sorted(both.keys() & alone.keys()):
        a = {(x["question_id"], x.get("turn", 0)): x for x in both[k].records}
        b = {(x["question_id"], x.get("turn", 0)): x for x in alone[k].records}
        turns = sorted(a.keys() & b.keys(), key=str)
        forward = sorted(a[t]["phase_times"]["target_forward"] / b[t]["phase_times"]["target_forward"]
                         for t in turns if b[t]["phase_times"].get("target_forward"))  # HF generate times none apart
        wall = sum(a[t]["wall_time"] for t in turns) / sum(b[t]["wall_time"] for t in turns)
        same = all(a[t]["steps"] == b[t]["steps"] for t in turns)
        spread = [f"{forward[0]:.3f}", f"{forward[len(forward) // 2]:.3f}", f"{forward[-1]:.3f}"] if forward else [""] * 3
        out.writerow([*k, len(turns), same, *spread, f"{wall:.3f}"])


if __name__ == "__main__":
    main(*sys.argv[1:3])
