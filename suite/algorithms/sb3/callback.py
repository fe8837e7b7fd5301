"""The trial callback: connects an SB3 ``learn()`` to the trial context (steps, phases, update rows, evaluation)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from torch import nn

from suite.algorithms.core import Diverged
from suite.algorithms.sb3.agent import SB3Agent

if TYPE_CHECKING:
    from suite.trial import TrialContext


class TrialCallback(BaseCallback):
    """Connects an SB3 ``learn()`` to the trial context.

    Time between ``on_rollout_start`` and ``on_rollout_end`` is the "rollout" phase (for on-policy SB3 it includes
    the advantages, which SB3 computes at the end of its collection); the rest of ``learn()`` (SB3's ``train()``
    and its bookkeeping) is "update"; evaluation is timed by the context itself. The budget is exact, as for
    the suite's algorithms: ``on_step`` stops ``learn()`` once ``ctx.total_timesteps`` env steps are taken (an
    on-policy rollout that the budget ends in the middle of is not trained on; one that the budget ends exactly
    at is). At each rollout
    start (i.e. after the previous update, the point where the suite's own algorithms call it) the callback sets
    ``ctx.steps``, records SB3's ``train/*`` logger values as an update row (on-policy: every update; off-policy,
    which updates every few steps: at most once per ``record_every`` env steps) and calls
    ``ctx.after_iteration`` (on-policy: every iteration; off-policy: every ``record_every`` steps and whenever an
    evaluation step is crossed, so evaluations happen at the same steps as for the suite's algorithms).
    """

    def __init__(self, ctx: TrialContext, agent: SB3Agent, on_policy: bool, record_every: int = 1000) -> None:
        super().__init__(verbose=0)
        self.ctx, self.agent = ctx, agent
        self.on_policy = on_policy
        self.record_every = 0 if on_policy else record_every
        self.eval_freq = ctx.resolved.eval_freq
        self._recorded_updates = 0
        self._last_record = 0
        self._last_check = 0

    def _switch(self, phase: str | None) -> None:
        if phase is None:
            self.ctx.end_phase()
        else:
            self.ctx.begin_phase(phase)

    def _on_training_start(self) -> None:
        self._switch("rollout")  # SB3's first env reset, as for the suite's own algorithms

    def _on_rollout_start(self) -> None:
        self._switch(None)
        self._sync(final=False)
        self._switch("rollout")

    def _on_step(self) -> bool:
        if self.model.num_timesteps < self.ctx.total_timesteps:
            return True
        if self.on_policy and self.locals.get("n_steps", 0) + 1 >= self.model.n_steps:  # type: ignore[attr-defined]
            return True  # this step completes the rollout: let SB3 train on it, then learn() ends by itself
        return False

    def _on_rollout_end(self) -> None:
        self._switch("update")

    def _on_training_end(self) -> None:
        self._switch(None)
        self._sync(final=True)

    def _sync(self, final: bool) -> None:
        ctx, steps = self.ctx, int(self.model.num_timesteps)
        ctx.steps = steps
        n_updates = int(getattr(self.model, "_n_updates", 0))
        if n_updates != self._recorded_updates and (final or steps - self._last_record >= self.record_every):
            self._record(n_updates)
            self._last_record = steps
        crossed = steps // self.eval_freq > self._last_check // self.eval_freq
        if final or self.record_every == 0 or crossed or steps - self._last_check >= self.record_every:
            self._last_check = steps
            ctx.after_iteration(self.agent)

    def _record(self, n_updates: int) -> None:
        metrics = {
            k.removeprefix("train/"): float(v)
            for k, v in self.model.logger.name_to_value.items()
            if k.startswith("train/") and isinstance(v, int | float | np.number)
        }
        self._recorded_updates = n_updates
        bad = sorted(k for k, v in metrics.items() if not math.isfinite(v))
        if bad:
            raise Diverged(f"non-finite SB3 training values {bad}")
        check_finite(self.model.policy)
        self.ctx.record_update(metrics)


def check_finite(module: nn.Module) -> None:
    for name, p in module.named_parameters():
        if not torch.isfinite(p).all():
            raise Diverged(f"parameter {name} became non-finite")
