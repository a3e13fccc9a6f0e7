"""ProPD's dynamic token tree generation (paper §4.2): pick the tree size that maximises expected accepted tokens
per second, from online estimates of the verification time and of the heads' acceptance.

- Verification time (§4.2.1): per tree size i an EMA of the measured iteration time, T_perf[i] <- (1 - alpha)
  T_perf[i] + alpha t; a weighted least-squares line T_est(i) = b0 + b1 i with weights exp(-lambda o_i), o_i the
  steps since T_perf[i] was last updated (`IterationTimes`). One table per batch size: the paper's line holds
  while "the batch size remains relatively stable", and here rows leave a batch as they finish, so one table over
  all sizes would fit the batch's shrinking (a step of 8 rows at size 64 beside one row at size 1) as the cost of
  a node. Until a batch size has two tree sizes measured, the nearest batch size's line stands in.
- Acceptance (§4.2.2): per head i and rank k an EMA of "the token the head predicted for was in its top-k",
  P[i, k]; p[i, k] = P[i, k] - P[i, k-1] is the chance that the rank-k candidate is the right one, and a node's
  expected acceptance is the product of p along its path (`HitRates`). Tokens per step of a tree = 1 (the bonus
  token, always committed) + the sum of its nodes' expected acceptances.
- Selection (§4.2.3): nodes ordered best first by expected acceptance (a child never beats its parent, so every
  prefix of the order is a tree: the best tree of that size); for each candidate size, l(size) / T_est(size);
  the argmax wins. Selection runs again when the batch size or the sequence length has changed by the configured
  margin since the last one (the paper's trigger), not every step.

Before the time model has two distinct sizes, the controller cycles through `warmup_sizes`.
"""

from __future__ import annotations

import math

import torch

from bench.core.tree import best_first


class IterationTimes:
    def __init__(self, alpha: float, decay: float):
        self.alpha, self.decay = float(alpha), float(decay)
        self.mean: dict[int, float] = {}  # T_perf per size
        self.updated: dict[int, int] = {}  # step of the last update per size
        self.step = 0

    def observe(self, size: int, seconds: float) -> None:
        self.step += 1
        old = self.mean.get(size)
        self.mean[size] = seconds if old is None else (1 - self.alpha) * old + self.alpha * seconds
        self.updated[size] = self.step

    def fit(self) -> tuple[float, float] | None:
        """(b0, b1) of the weighted least-squares line, None with fewer than two distinct sizes."""
        if len(self.mean) < 2:
            return None
        sizes = list(self.mean)
        x = torch.tensor(sizes, dtype=torch.float64)
        y = torch.tensor([self.mean[s] for s in sizes], dtype=torch.float64)
        w = torch.tensor([math.exp(-self.decay * (self.step - self.updated[s])) for s in sizes], dtype=torch.float64)
        xm, ym = (w * x).sum() / w.sum(), (w * y).sum() / w.sum()
        var = (w * (x - xm) ** 2).sum()
        b1 = float((w * (x - xm) * (y - ym)).sum() / var) if var > 0 else 0.0
        return float(ym - b1 * xm), b1

    def state_dict(self) -> dict:
        return {"mean": dict(self.mean), "updated": dict(self.updated), "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.mean = {int(k): float(v) for k, v in state["mean"].items()}
        self.updated = {int(k): int(v) for k, v in state["updated"].items()}
        self.step = int(state["step"])


class HitRates:
    def __init__(self, heads: int, topk: int, alpha: float):
        self.alpha = float(alpha)
        self.P = torch.zeros(heads, topk + 1, dtype=torch.float64)  # P[i, 0] = 0: in the top-0 never
        self.ranks = torch.arange(1, topk + 1)
        self.decay = self.weights = torch.empty(0, dtype=torch.float64)  # observe_rounds' powers, built on first use

    def observe(self, head: int, rank: int | None) -> None:
        """The token head `head` predicted for is its rank-`rank` candidate (0-based; None: not in its top-k)."""
        hit = (self.ranks > (self.P.shape[1] if rank is None else rank)).to(torch.float64)
        self.P[head, 1:] = (1 - self.alpha) * self.P[head, 1:] + self.alpha * hit

    def observe_rounds(self, top: torch.Tensor, tokens: torch.Tensor) -> None:
        """R predictions of every head, in order, on the device of top [R, heads, K] (their candidates) and tokens
        [R, heads] (what was committed where they predicted): R rounds of `observe` for every head in one update,
        P <- (1 - a)^R P + sum_r a (1 - a)^(R - 1 - r) hit_r, and no value read back, so the decode loop does not
        wait. A few ops a step whatever R (a batch's rows together), where a round a call launched them R times."""
        R, device = top.shape[0], top.device
        if self.P.device != device or self.decay.shape[0] <= R:
            n = max(2 * R, 64)  # (1 - a)^0..n and the rounds' weights a (1 - a)^(n-1)..0: views for any R < n
            self.decay = (1 - self.alpha) ** torch.arange(n + 1, dtype=torch.float64, device=device)
            self.weights = self.alpha * self.decay[:n].flip(0)
            self.P, self.ranks = self.P.to(device), self.ranks.to(device)
        hit_at = top == tokens[..., None]  # [R, heads, K]: at most one True per head
        rank = torch.where(hit_at.any(-1), hit_at.to(torch.int8).argmax(-1), self.P.shape[1])  # not found: past K
        hit = (self.ranks > rank[..., None]).to(torch.float64)
        n = self.weights.shape[0]
        self.P[:, 1:] = self.decay[R] * self.P[:, 1:] + (self.weights[n - R :, None, None] * hit).sum(0)

    def p(self) -> torch.Tensor:
        """[heads, topk] on the host: p[i, k] = P[i, k+1] - P[i, k], the chance that head i's rank-k candidate is
        right (one read when the controller selects a tree)."""
        return (self.P[:, 1:] - self.P[:, :-1]).clamp(min=0).cpu()

    def state_dict(self) -> dict:
        return {"P": self.P.cpu().clone()}

    def load_state_dict(self, state: dict) -> None:
        self.P = state["P"].clone().to(device=self.P.device, dtype=torch.float64)


def choose_size(nodes: list[tuple[tuple[int, ...], float]], sizes: list[int], fit: tuple[float, float]) -> dict:
    """The size of highest l(size) / T_est(size), l = 1 + the expected acceptances of the best `size` nodes."""
    b0, b1 = fit
    flat = b1 <= 0
    if flat:  # a line that does not rise with the size (noise): every size costs alike, the most tokens win
        b0, b1 = 1.0, 0.0
    cumulative = [1.0]
    for _, value in nodes:
        cumulative.append(cumulative[-1] + value)
    best = None
    for size in sizes:
        size = min(size, len(nodes))
        est = b0 + b1 * size
        if est <= 0:  # a fit through noise can go negative for small sizes: fall back to the slope alone
            est = max(b1 * size, 1e-9)
        speed = cumulative[size] / est
        if best is None or speed > best["speed"]:
            best = {"size": size, "speed": speed, "expected_tokens": cumulative[size], "time_est": est, "flat": flat}
    return best


class DynamicTrees:
    """The shared controller of one ProPD method (every batch row's proposer holds the same one)."""

    def __init__(self, cfg, heads: int, topk: int):
        self.sizes = sorted(int(s) for s in cfg.tree_size_choices)
        self.warmup = [int(s) for s in cfg.warmup_sizes]
        self.batch_margin = int(cfg.reselect_batch_margin)
        self.seq_margin = int(cfg.reselect_seq_margin)
        self.time_alpha, self.time_decay = cfg.time_alpha, cfg.time_decay
        self.times: dict[int, IterationTimes] = {}  # per batch size
        self.hits = HitRates(heads, topk, cfg.hit_alpha)
        self.condition: tuple[int, int] | None = None  # (batch, sequence length) of the last forward seen
        self.selected_at: tuple[int, int] | None = None
        self.paths: list[tuple[int, ...]] | None = None
        self.last_choice: dict | None = None
        self.warm = 0
        self.warm_at: int | None = None  # forwards seen when the current warm-up size was taken
        self.forwards = 0
        self.selections = 0

    def observe_forward(self, batch: int, seq_len: int, size: int, seconds: float) -> None:
        self.condition = (batch, seq_len)
        self.forwards += 1
        if batch not in self.times:
            self.times[batch] = IterationTimes(self.time_alpha, self.time_decay)
        self.times[batch].observe(size, seconds)

    @property
    def batch(self) -> int:
        """The batch size of the last forward seen (1 before any)."""
        return self.condition[0] if self.condition else 1

    def fit(self) -> tuple[float, float] | None:
        """The line of the current batch size, else of the nearest batch size that has one (None: none has)."""
        fits = {b: f for b, t in self.times.items() if (f := t.fit()) is not None}
        if not fits:
            return None
        return fits[min(fits, key=lambda b: (abs(b - self.batch), b))]

    def due(self) -> bool:
        if self.paths is None or self.selected_at is None or self.condition is None:
            return True
        (b, s), (b0, s0) = self.condition, self.selected_at
        return abs(b - b0) >= self.batch_margin or abs(s - s0) >= self.seq_margin

    def current(self) -> list[tuple[int, ...]]:
        """The rank paths of the tree to draft now (re-selected when due)."""
        if self.paths is not None and self.warm_at == self.forwards:
            return self.paths  # another row of a warm-up step: one warm-up size a step, whatever the batch
        fit = self.fit()
        if fit is None and self.warm < len(self.warmup):
            size = self.warmup[self.warm]
            self.warm_at = self.forwards
            self.warm += 1
            self.paths = [path for path, _ in best_first(self.hits.p(), size)]
            self.selected_at = None  # warm-up: choose again next step
            return self.paths
        if fit is None:  # warm-up done and still one size measured: the most expected tokens (ties: the smaller)
            fit = (1.0, 0.0)
        if self.due():
            nodes = best_first(self.hits.p(), max(self.sizes))
            choice = choose_size(nodes, self.sizes, fit)
            self.paths = [path for path, _ in nodes[: choice["size"]]]
            self.selected_at = self.condition
            self.last_choice = {**choice, "b0": fit[0], "b1": fit[1], "batch": self.batch}
            self.selections += 1
        return self.paths

    def state_dict(self) -> dict:
        return {"times": {b: t.state_dict() for b, t in self.times.items()}, "hits": self.hits.state_dict(),
                "warm": self.warm}

    def load_state_dict(self, state: dict) -> None:
        tables = state["times"]
        warm = int(state["warm"])
        if "mean" in tables:  # a checkpoint from before the tables per batch size: its pooled line is the defect
            tables, warm = {}, 0  # fixed since, so it is dropped and the warm-up runs again
        self.times = {}
        for b, t in tables.items():
            self.times[int(b)] = IterationTimes(self.time_alpha, self.time_decay)
            self.times[int(b)].load_state_dict(t)
        self.hits.load_state_dict(state["hits"])
        self.warm = warm
        self.paths = None
