"""Which draft to use: predicted speedup from measured agreement and cost, not agreement alone.

A draft that agrees more but costs more can be slower. With per-token agreement alpha (greedy: the draft's top-1
is the target's) and cost c (draft decode step / target decode step), a chain of k draft tokens accepts
(1 - alpha^(k+1)) / (1 - alpha) tokens per step (Leviathan et al. 2023, i.i.d. acceptance) and costs k c + 1
target steps if verifying k + 1 tokens costs one target step (true for small k on a GPU; on a CPU a wider forward
costs more, so `verify` may give the measured ratio T(k + 1) / T(1)). A tree of n nodes is built best first from
the rank hit rates h[r] (the chance that the target's token is the draft's rank-r choice, the same at every depth,
as Sequoia's acceptance vector), accepts 1 + the sum of its nodes' path products, and costs depth x c + T(n + 1) /
T(1) (one draft forward per level).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bench.core.tree import best_first


def verify_curve(ratio: dict) -> Callable[[int], float]:
    """T(n) / T(1) at any width n from measured widths ({n: ratio}), linear between them, flat past the ends."""
    widths = sorted(int(n) for n in ratio)
    values = {int(n): float(r) for n, r in ratio.items()}

    def at(n: int) -> float:
        lo = max([w for w in widths if w <= n], default=widths[0])
        hi = min([w for w in widths if w >= n], default=widths[-1])
        return values[lo] if hi == lo else values[lo] + (values[hi] - values[lo]) * (n - lo) / (hi - lo)

    return at


def chain_accepted(alpha: float, k: int) -> float:
    """Expected tokens per step of a k-token chain at agreement alpha (bonus token included)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def chain_speedup(alpha: float, c: float, max_k: int = 16, verify=None) -> tuple[float, int]:
    """(best predicted speedup over AR, its k) for chains of 1..max_k draft tokens; `verify(n)` = T(n) / T(1)
    of the target (default 1: a wider forward costs as much as one token)."""
    best = (0.0, 0)
    for k in range(1, max_k + 1):
        step = k * c + (verify(k + 1) if verify else 1.0)
        best = max(best, (chain_accepted(alpha, k) / step, k))
    return best


def tree_speedup(hits: list[float], c: float, size: int = 64, max_depth: int = 16,
                 verify=None) -> tuple[float, int]:
    """(predicted speedup over AR, tree depth) of the best `size`-node tree for rank hit rates `hits`."""
    p = torch.tensor([list(hits)] * max_depth, dtype=torch.float64)
    nodes = best_first(p, size)
    accepted = 1.0 + sum(v for _, v in nodes)
    depth = max(len(path) for path, _ in nodes)
    step = depth * c + (verify(len(nodes) + 1) if verify else 1.0)
    return accepted / step, depth


def predictions(alpha: float, hits: list[float], c: float, verify=None, tree_size: int = 64) -> dict:
    """The report's predicted-speedup entry for one draft configuration."""
    chain, k = chain_speedup(alpha, c, verify=verify)
    tree, depth = tree_speedup(hits, c, tree_size, verify=verify)
    return {"chain_speedup": round(chain, 4), "chain_k": k, "tree_speedup": round(tree, 4), "tree_depth": depth,
            "tree_size": tree_size}
