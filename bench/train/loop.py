"""The training loop of the distilled drafters (bench/train/draft.py, heads.py and, through heads.py, early_heads.py):
AdamW, linear warm-up then cosine decay over a time budget, gradient clipping, a progress bar.

Recipe keys: `lr`, `weight_decay`, `warmup_steps`, `grad_clip`, `max_minutes` (the budget) and `max_steps` (a cap,
or null). What a step trains on, what it logs and when it evaluates are the caller's (`step_loss`, `after_step`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch


def lr_at(step: int, progress: float, base: float, warmup: int, floor: float = 0.1) -> float:
    """Linear warm-up over `warmup` steps, then cosine from base to floor*base over the budget (progress 0..1)."""
    if step < warmup:
        return base * (step + 1) / warmup
    return base * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


@dataclass
class Clock:
    """Where training stands: optimizer steps taken, seconds counted against the budget, the last learning rate."""

    step: int = 0
    seconds: float = 0.0
    lr: float = 0.0
    start: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        """Wall seconds since training started (evaluations included)."""
        return time.perf_counter() - self.start


def train_loop(params: list, recipe: dict, step_loss, after_step=None, *, betas=(0.9, 0.999), floor: float = 0.1,
               wall_clock: bool = False, schedule_by_steps: bool = False, desc: str = "train",
               progress_bar: bool = True) -> Clock:
    """AdamW steps on `params` until `max_minutes` of training, or `max_steps` steps. A step sets the learning rate
    (lr_at at the budget's progress, down to `floor` x lr), calls `step_loss()` (forward and backward, gradients
    accumulating; it returns the step's loss), clips the gradients to `grad_clip` and steps; then
    `after_step(clock, loss)` runs. The budget counts the steps' own time (`wall_clock`: all time since the start, what
    after_step does included). `schedule_by_steps`: with `max_steps` set, the schedule's progress is the larger of
    the time and the step fractions (else time alone)."""
    from tqdm import tqdm

    base = float(recipe["lr"])
    opt = torch.optim.AdamW(params, lr=base, weight_decay=float(recipe.get("weight_decay", 0.0)), betas=betas)
    budget, max_steps = 60.0 * float(recipe["max_minutes"]), recipe.get("max_steps")
    warmup = int(recipe.get("warmup_steps", 0))
    by_step = max_steps is not None
    bar = tqdm(total=int(max_steps) if by_step else int(budget), unit="step" if by_step else "s", desc=desc,
               disable=not progress_bar)
    clock = Clock()
    while True:
        if wall_clock:
            clock.seconds = clock.elapsed()
        progress = clock.seconds / budget
        if max_steps is not None:
            if schedule_by_steps:
                progress = max(progress, clock.step / max(int(max_steps), 1))
            elif clock.step >= int(max_steps):
                break
        if progress >= 1.0:
            break
        t0 = time.perf_counter()
        clock.lr = lr_at(clock.step, progress, base, warmup, floor)
        for group in opt.param_groups:
            group["lr"] = clock.lr
        opt.zero_grad(set_to_none=True)
        loss = step_loss()
        if recipe.get("grad_clip"):
            torch.nn.utils.clip_grad_norm_(params, float(recipe["grad_clip"]))
        opt.step()
        clock.step += 1
        clock.seconds = clock.elapsed() if wall_clock else clock.seconds + time.perf_counter() - t0
        bar.update(1 if by_step else min(int(clock.seconds) - bar.n, int(budget) - bar.n))
        bar.set_postfix(loss=f"{loss:.3f}")
        if after_step is not None:
            after_step(clock, loss)
    bar.close()
    return clock
