"""``ppo``: Proximal Policy Optimization (Schulman et al. 2017, arXiv 1707.06347), SB3-equivalent.

Clipped surrogate, GAE advantages normalised per minibatch, unclipped value loss by default, entropy
bonus, global grad-norm clip, linear schedules; time-limit truncations bootstrap from V(final obs).
Per-env defaults are rl-baselines3-zoo's ``hyperparams/ppo.yml`` (``suite/hyperparams/ppo.toml``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from suite.algorithms.actor_critic import (
    ActorCriticConfig,
    ActorCriticTrainer,
    FusedLoss,
    actor_critic_policy,
    ppo_fused_loss,
    ppo_policy_value_loss,
)
from suite.algorithms.core import Minibatch
from suite.registry import register


@dataclass(frozen=True)
class PPOConfig(ActorCriticConfig):
    """PPO uses the family's config unchanged (SB3 names and defaults)."""


class PPOTrainer(ActorCriticTrainer):
    def loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss, metrics, _, _ = ppo_policy_value_loss(self, mb, self.clip)
        return loss, metrics

    def supports_fused_loss(self) -> bool:
        return True

    def update_draws_random(self) -> bool:
        return False  # PPO's loss draws nothing

    def fused_loss(self, mb: Minibatch, logp: np.ndarray, entropy: np.ndarray, values: np.ndarray | None) -> FusedLoss:
        return ppo_fused_loss(self.cfg, mb, logp, entropy, values, self.clip)


@register(
    "ppo",
    version="1.2.0",
    summary="Proximal Policy Optimization with GAE, clipped surrogate and SB3-equivalent defaults",
    reference="Schulman et al. 2017, arXiv 1707.06347; hyperparameters: rl-baselines3-zoo hyperparams/ppo.yml",
    action_spaces=("discrete", "box"),
    observations=("vector", "image"),
    config=PPOConfig,
    hyperparams="ppo.toml",
    policy_factory=actor_critic_policy,
)
def train_ppo(ctx: Any, cfg: PPOConfig) -> Any:
    return PPOTrainer(ctx, cfg).train()
