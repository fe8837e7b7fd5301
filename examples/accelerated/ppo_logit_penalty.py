"""``ppo-logit-penalty``: PPO plus a penalty on the policy's collision probability, with a hand-derived accelerator.

A worked plugin that brings an accelerator (``docs/plugins.md``, "Bringing an accelerator"). The algorithm: PPO whose
loss adds ``penalty_coef * mean_s sum_a pi(a|s)^2``, the probability that two draws of the policy agree (the
collision probability; its negative log is the Renyi-2 entropy), which pushes back against an early collapse onto one
action. Categorical action spaces only.

* The **specification** is :meth:`PenaltyTrainer.loss`: plain autograd on ``suite.api``'s PPO loss. It runs on any
  device, and is all a trial needs.
* The **accelerator** (:class:`PenaltyHandDerived`) computes the same loss on the CPU with the suite's hand-derived
  MLP passes: PPO's part from ``api.ppo_loss_derivatives``, the penalty's derivative w.r.t. the logits by hand,
  ``d/dz_j sum_a p_a^2 = 2 p_j (p_j - sum_a p_a^2)``. Registered with ``api.register_accelerator``, it goes through the
  suite's parity harness (``tests/test_accel_parity.py``, or ``api.check_parity`` in a plugin's own tests) on the
  cases it names, and records the fingerprint of the specification it was checked against.

Load it with ``suite run --plugin examples/accelerated/ppo_logit_penalty.py --algo ppo-logit-penalty --env
CartPole-v1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from suite import api

api.require_api(1)
__version__ = "0.1.0"


@dataclass(frozen=True)
class PenaltyConfig(api.ActorCriticConfig):
    """PPO's config (SB3 names) and the penalty's weight."""

    penalty_coef: float = 0.05
    """Weight of the mean collision probability ``sum_a pi(a|s)^2``."""


class PenaltyTrainer(api.ActorCriticTrainer):
    def loss(self, mb: api.Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """PPO's loss + ``penalty_coef * mean_s sum_a pi(a|s)^2`` (the specification)."""
        loss, metrics, _, logits = api.ppo_policy_value_loss(self, mb, self.clip)
        collision = torch.softmax(logits, -1).square().sum(-1).mean()
        metrics["collision"] = collision.detach()
        return loss + self.cfg.penalty_coef * collision * mb.weight, metrics

    def loss_draws_random(self) -> bool:
        return False


class PenaltyHandDerived:
    """The accelerated loss: the kernel's forward, PPO's derivatives, the penalty's by hand, the kernel's backward."""

    def __init__(self, trainer: PenaltyTrainer):
        self.trainer, self.kernel = trainer, trainer.kernel

    def forward(self, mb: api.Minibatch) -> api.Evaluated:
        t, kernel = self.trainer, self.kernel
        logp, entropy, values, state = kernel.evaluate(mb.obs, mb.actions)
        d = api.ppo_loss_derivatives(t.cfg, mb, logp, entropy, values, t.clip)
        p = state.p  # (B, n) probabilities of every action
        collision = (p * p).sum(-1)  # (B,)
        coef = np.float32(t.cfg.penalty_coef * mb.weight / p.shape[0])
        d.dparams_extra = coef * 2.0 * p * (p - collision[:, None])  # d/dlogits of the mean penalty
        d.loss += t.cfg.penalty_coef * float(collision.mean()) * mb.weight
        d.metrics["collision"] = float(collision.mean())
        return api.kernel_evaluated(kernel, state, d)


def _applies(trainer: Any) -> bool:
    return trainer.kernel is not None


@api.register(
    "ppo-logit-penalty",
    version="1.0.0",
    summary="PPO plus a penalty on the policy's collision probability (a worked plugin with an accelerator)",
    reference="PPO: Schulman et al. 2017, arXiv 1707.06347; collision probability: Renyi 1961 (order-2 entropy)",
    action_spaces=("discrete",),
    config=PenaltyConfig,
    hyperparams=lambda env_id: api.get_algorithm("ppo").env_defaults(env_id),  # PPO's per-env defaults
    policy_factory=api.actor_critic_policy,
)
def train(ctx: api.TrialContext, cfg: PenaltyConfig) -> Any:
    return PenaltyTrainer(ctx, cfg).train()


api.register_accelerator(
    api.Accelerator(
        name="ppo-logit-penalty-hand-derived",
        specification=PenaltyTrainer.loss,
        algorithms=("ppo-logit-penalty",),
        covers=(PenaltyTrainer.loss, api.ppo_policy_value_loss),
        fingerprint="435a29c7d21a5384",
        applies=_applies,
        build=PenaltyHandDerived,
        summary="PPO's hand-derived loss plus the collision penalty's derivative w.r.t. the logits",
        parity=(
            api.ParityCase("ppo-logit-penalty", "CartPole-v1"),
            api.ParityCase("ppo-logit-penalty", "TextMatch-v0", {"penalty_coef": 0.5, "grad_accumulation": 2}),
        ),
    )
)
