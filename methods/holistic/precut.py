"""Pre-cut (Post-use & Pre-cut, Section 5.2 and Appendix D.4.3): a Q-table decides, before each further draft
forward, whether to continue drafting or stop and verify.

State: (draft calls so far this step, the product of the draft's confidences in the tokens drafted so far,
discretised by `conf_edges`). Actions: STOP, CONTINUE. After verification the step earns
    r = useful / cost - 1,   cost = draft calls + target_cost  (one target call in draft-call units),
useful being the step's draft tokens the target agreed with (Eq. 7, positions after a mismatch included).

Updates (Bellman, Eq. 5, learning rate alpha, discount gamma), applied after verification from the last decision
back to the first, so one step's reward reaches every decision of that step:
- the final decision: Q(s_m, a_m) += alpha (r - Q(s_m, a_m)) (a_m = STOP, or CONTINUE when the draft ended at
  its maximum length or the output limit);
- every earlier decision (all CONTINUE): Q(s_j, CONTINUE) += alpha (gamma max_a Q(s_{j+1}, a) - Q(s_j, CONTINUE))
  with `credit="discounted"` (the default), or += alpha (r - Q(s_j, CONTINUE)) with `credit="direct"`. The paper
  does not say how r reaches the decisions inside a draft. Discounted, a reward near -1 (most steps) reaches the
  earlier CONTINUEs shrunk by gamma, so continuing looks cheaper than stopping; direct gives each the step's r.
Warm-up (the paper's "virtual decision at each position"): during the first `warmup_steps` verifications every
visited state also learns what stopping there would have earned, Q(s_j, STOP) += alpha (r_j - Q(s_j, STOP)), r_j
computed from the useful tokens among the first tokens drafted by then (a target's verdict on a token depends
only on the tokens before it, so r_j is exact).

Exploration: epsilon-greedy during warm-up only. The paper lists epsilon = 0.5 without a schedule; a constant 0.5
stops a draft after about four decisions on average, which cannot give its reported 7-8 accepted tokens per step.
Q_init: CONTINUE starts `q_init` above STOP, so the first drafts run to the maximum length (Appendix D.4.3).

`freeze_after_warmup` stops learning once warm-up ends: the table learned from the warm-up's trials is then used
as it is. The paper's Figure 4 compares such an initialised Q (its "Q_init") with one updated throughout; a Q that
never learned at all would always CONTINUE, i.e. be vanilla SD at the maximum length.
"""

from __future__ import annotations

import bisect
import random

STOP, CONTINUE = 0, 1
CREDITS = ("discounted", "direct")  # how a step's reward reaches the decisions before the draft's last


class QController:
    def __init__(self, max_calls: int = 24, conf_edges=(0.9, 0.7, 0.5, 0.3, 0.1, 0.03, 0.01),
                 target_cost: float = 7.0, gamma: float = 0.99, alpha: float = 0.1, epsilon: float = 0.5,
                 q_init: float = 0.01, warmup_steps: int = 64, seed: int = 0, freeze_after_warmup: bool = False,
                 credit: str = "discounted"):
        edges = [float(e) for e in conf_edges]
        if edges != sorted(edges, reverse=True) or not all(0 < e < 1 for e in edges):
            raise ValueError(f"conf_edges must be decreasing and inside (0, 1); got {edges}")
        if max_calls < 1 or target_cost <= 0 or not 0 <= gamma <= 1 or not 0 < alpha <= 1 or not 0 <= epsilon <= 1:
            raise ValueError("precut needs max_calls >= 1, target_cost > 0, 0 <= gamma <= 1, 0 < alpha <= 1, "
                             "0 <= epsilon <= 1")
        if credit not in CREDITS:
            raise ValueError(f"precut credit must be one of {', '.join(CREDITS)}; got {credit!r}")
        self.credit = credit
        self.max_calls, self.target_cost = int(max_calls), float(target_cost)
        self.edges = sorted(edges)  # ascending, for bisect
        self.gamma, self.alpha, self.epsilon, self.q_init = float(gamma), float(alpha), float(epsilon), float(q_init)
        self.warmup_steps = int(warmup_steps)
        self.frozen_after_warmup = bool(freeze_after_warmup)
        self.rng = random.Random(seed)
        self.q: dict[tuple[int, int], list[float]] = {}
        self.steps = 0  # verifications learned from, across prompts
        self.episode: list[tuple[tuple[int, int], int, int, int]] = []  # (state, action, calls, tokens drafted)

    # -- acting ---------------------------------------------------------------------------------------------
    def state(self, calls: int, confidence: float) -> tuple[int, int]:
        """(calls capped at max_calls, confidence bin: 0 = above the highest edge ... len(edges) = below all)."""
        return min(int(calls), self.max_calls), len(self.edges) - bisect.bisect_right(self.edges, confidence)

    def values(self, state) -> list[float]:
        if state not in self.q:
            self.q[state] = [0.0, self.q_init]
        return self.q[state]

    @property
    def warming_up(self) -> bool:
        return self.steps < self.warmup_steps

    def decide(self, calls: int, confidence: float, tokens: int) -> bool:
        """True = CONTINUE (run one more draft forward). `tokens`: draft tokens so far (for the warm-up reward)."""
        s = self.state(calls, confidence)
        v = self.values(s)
        if self.warming_up and self.rng.random() < self.epsilon:
            action = self.rng.randrange(2)
        else:
            action = CONTINUE if v[CONTINUE] >= v[STOP] else STOP
        self.episode.append((s, action, calls, tokens))
        return action == CONTINUE

    def begin(self) -> None:
        self.episode = []

    # -- learning -------------------------------------------------------------------------------------------
    def reward(self, useful: int, calls: int) -> float:
        return useful / (calls + self.target_cost) - 1.0

    def learn(self, useful_prefix: list[int], calls: int) -> float | None:
        """After verification. useful_prefix[n]: useful tokens among the first n draft tokens (n = 0..lambda);
        calls: draft calls of the step. Returns the step's reward (None when no decision was taken)."""
        if not self.episode:
            return None
        r = self.reward(useful_prefix[-1], calls)
        if self.frozen_after_warmup and not self.warming_up:
            self.steps += 1
            self.episode = []
            return r
        *earlier, (s_m, a_m, _, _) = self.episode
        self._move(s_m, a_m, r)
        nxt = s_m
        for s, a, _, _ in reversed(earlier):
            self._move(s, a, r if self.credit == "direct" else self.gamma * max(self.values(nxt)))
            nxt = s
        if self.warming_up:  # the final STOP has just learned its own reward
            for s, _, c, n in self.episode if a_m == CONTINUE else earlier:
                self._move(s, STOP, self.reward(useful_prefix[min(n, len(useful_prefix) - 1)], c))
        self.steps += 1
        self.episode = []
        return r

    def _move(self, state, action: int, target: float) -> None:
        v = self.values(state)
        v[action] += self.alpha * (target - v[action])

    # -- checkpointing --------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"q": [[list(s), v] for s, v in self.q.items()], "steps": self.steps, "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        self.q = {tuple(s): list(v) for s, v in state["q"]}
        self.steps = int(state["steps"])
        rng = state["rng"]
        self.rng.setstate((rng[0], tuple(rng[1]), rng[2]))
