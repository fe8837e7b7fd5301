"""The training loop every suite algorithm runs, once: collect and prepare, update, record, evaluate.

A trainer subclass says what one iteration trains on (:meth:`Trainer.prepare`: a rollout and its advantages, a batch
of episode groups) and how one update uses it (:meth:`Trainer.optimise`); the loop, the trial's phases, the
evaluation schedule and the choice between the specification and an accelerator (:mod:`suite.accel`) live here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from suite.accel import Evaluated, LossPath, accelerate
from suite.algorithms.core import attach_clock

if TYPE_CHECKING:
    from suite.algorithms.core import GradientStepper
    from suite.algorithms.networks import ActorCritic
    from suite.trial import TrialContext


class Trainer:
    """The shared loop. Subclasses set :attr:`policy` and :attr:`stepper` and call :meth:`use_specification` in their
    ``__init__``, and define :meth:`prepare`, :meth:`optimise` and :meth:`spec_forward`."""

    policy: ActorCritic
    stepper: GradientStepper

    def __init__(self, ctx: TrialContext, cfg: Any):
        self.ctx, self.cfg = ctx, cfg
        self.device = torch.device(getattr(ctx, "device", "cpu"))
        """Where the policy, its optimiser and the update's tensors live (``--device``); accelerators run on CPU only."""
        self.off_cpu = self.device.type != "cpu"
        """Whether batches made on the CPU (rollout buffers, numpy tables) move to :attr:`device` for the loss."""
        self.accelerator: LossPath | None = None
        """The accelerated loss (:func:`suite.accel.accelerate`), or None: the update runs the specification."""
        self.n_updates = 0

    def use_specification(self, specification: Callable[..., Any]) -> None:
        """Declare the function the update's loss is (the specification, e.g. ``type(self).loss``), attach the lap clock
        and take the registered accelerator of that specification where one applies."""
        self.clock: Any = attach_clock(self.ctx, self)
        """The lap clock of ``suite profile speed`` (:class:`suite.profile.speed.LapClock`), else the null clock."""
        self.accelerator = accelerate(self, specification)

    # -- the loop ----------------------------------------------------------------------------------------
    def train(self) -> ActorCritic:
        ctx = self.ctx
        while ctx.steps < ctx.total_timesteps:
            prepared = self.prepare()  # the rollout (and advantages) phases; None: the budget is spent
            if prepared is None:
                break
            with ctx.phase("update"):
                metrics = self.optimise(prepared, progress=ctx.steps / ctx.total_timesteps)
            ctx.record_update(metrics)
            ctx.after_iteration(self.policy)
            if self.stop(metrics):
                break
        return self.policy

    def prepare(self) -> Any:
        """Collect what one update trains on, inside the trial's ``rollout`` (and ``advantages``) phases; None when
        nothing is left to train on."""
        raise NotImplementedError

    def optimise(self, prepared: Any, progress: float) -> dict[str, float]:
        """One update on :meth:`prepare`'s result at training ``progress`` in [0, 1]; returns its metrics."""
        raise NotImplementedError

    def stop(self, metrics: dict[str, float]) -> bool:
        """Whether to stop before the budget is spent (an algorithm's own early stop); never by default."""
        return False

    # -- the loss: specification or accelerator ----------------------------------------------------------
    def spec_forward(self, batch: Any) -> Evaluated:
        """The loss of ``batch`` by the specification, for autograd."""
        raise NotImplementedError

    def evaluate_loss(self, batch: Any) -> Evaluated:
        """The loss of ``batch`` by the accelerator where there is one, else by the specification."""
        accelerator = self.accelerator
        return accelerator.forward(batch) if accelerator is not None else self.spec_forward(batch)
