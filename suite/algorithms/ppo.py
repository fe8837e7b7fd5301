"""``ppo``: Proximal Policy Optimization (Schulman et al. 2017, arXiv 1707.06347), SB3-equivalent.

Clipped surrogate, GAE advantages normalised per minibatch, unclipped value loss by default, entropy bonus, global
grad-norm clip, linear schedules; time-limit truncations bootstrap from V(final obs). The loop is the shared
actor-critic trainer's (:mod:`suite.algorithms.actor_critic`); PPO's own are its config (per-env defaults: the zoo's
``hyperparams/ppo.yml`` in ``suite/hyperparams/ppo.toml``; knobs: :class:`~suite.algorithms.knobs.ActorCriticKnobs`)
and its loss, :func:`ppo_policy_value_loss`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from suite.algorithms.actor_critic import ActorCriticTrainer, actor_critic_policy
from suite.algorithms.core import Minibatch
from suite.algorithms.knobs import ActorCriticKnobs
from suite.config import Schedule
from suite.registry import register


@dataclass(frozen=True)
class PPOConfig(ActorCriticKnobs):
    """Hyperparameters of PPO (and of its variants, which extend it), with Stable-Baselines3's names and defaults."""

    n_envs: int = 1
    """Parallel environments stepped together (one network call per step for all of them)."""
    n_steps: int = 2048
    """Steps per env per rollout; a rollout holds ``n_envs * n_steps`` samples."""
    batch_size: int = 64
    """Minibatch size."""
    n_epochs: int = 10
    """Passes over each rollout."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    learning_rate: Schedule = Schedule("constant", 3e-4, 3e-4)
    """Adam step size (a schedule over training progress)."""
    clip_range: Schedule = Schedule("constant", 0.2, 0.2)
    """PPO clip epsilon (a schedule)."""
    clip_range_vf: float | None = None
    """Value-function clip range around the old values; None = no value clipping (SB3 default)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    normalize_advantage: bool = True
    """Normalise advantages per minibatch."""
    target_kl: float | None = None
    """Stop the epochs of an update early when a minibatch's approx KL exceeds 1.5 x this, before its gradient
    step (SB3 semantics); None = never."""
    normalize: bool = False
    """Observation and reward normalisation (the zoo's ``normalize: true``, needed on MuJoCo)."""
    adam_eps: float = 1e-5
    """Adam epsilon (SB3 uses 1e-5)."""
    pi_arch: tuple[int, ...] = (64, 64)
    """Policy MLP hidden sizes (empty on Atari: linear head on the CNN)."""
    vf_arch: tuple[int, ...] = (64, 64)
    """Value MLP hidden sizes."""
    activation: str = "tanh"
    """Hidden activation: tanh or relu."""
    ortho_init: bool = True
    """Orthogonal initialisation (SB3 gains)."""
    log_std_init: float = 0.0
    """Initial log std of the Gaussian policy."""

    def __post_init__(self) -> None:
        for name in ("n_envs", "n_steps", "batch_size", "n_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not 0 < self.gamma <= 1 or not 0 <= self.gae_lambda <= 1:
            raise ValueError("gamma must be in (0, 1] and gae_lambda in [0, 1]")
        if self.activation not in ("tanh", "relu"):
            raise ValueError("activation must be tanh or relu")
        self.check_knobs(self.batch_size)


ActorCriticConfig = PPOConfig
"""The family's config under its public name (``suite.api``): PPO's, which the variants extend."""


def ppo_policy_value_loss(
    trainer: Any, mb: Minibatch, clip: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate + value + entropy loss (Schulman et al. 2017, arXiv 1707.06347; SB3's form).

    Args:
        trainer: anything with ``policy`` (an :class:`~suite.algorithms.networks.ActorCritic`) and ``cfg`` (a
            :class:`PPOConfig`).
        mb: the (micro-)batch; ``mb.advantages`` are already normalised, ``mb.weight`` is its share of the minibatch.
        clip: this update's clip range.

    Returns:
        (loss x ``mb.weight``, metrics, log-probs ``(B,)``, policy params ``(B, P)``) so variants can add regularisers
        (scaled by ``mb.weight`` too).
    """
    cfg = trainer.cfg
    logp, entropy, values, params = trainer.policy.evaluate_actions(mb.obs, mb.actions)
    adv = mb.advantages
    log_ratio = logp - mb.old_log_probs
    ratio = torch.exp(log_ratio)
    policy_loss = -torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv).mean()
    assert values is not None
    if cfg.clip_range_vf is not None:
        values = mb.old_values + torch.clamp(values - mb.old_values, -cfg.clip_range_vf, cfg.clip_range_vf)
    target = mb.returns if mb.returns.dim() == 2 else mb.returns.unsqueeze(-1)
    value_loss = (target - values).square().mean()
    entropy_loss = -entropy.mean()
    loss = policy_loss + cfg.ent_coef * entropy_loss + cfg.vf_coef * value_loss
    if mb.weight != 1.0:
        loss = loss * mb.weight
    with torch.no_grad():
        metrics = {
            "policy_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy": -entropy_loss.detach(),
            "approx_kl": ((ratio - 1) - log_ratio).mean(),
            "clip_fraction": ((ratio - 1).abs() > clip).float().mean(),
        }
    return loss, metrics, logp, params


class PPOTrainer(ActorCriticTrainer):
    def loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """PPO's loss with this update's clip range (:func:`ppo_policy_value_loss`)."""
        loss, metrics, _, _ = ppo_policy_value_loss(self, mb, self.clip)
        return loss, metrics

    def loss_draws_random(self) -> bool:
        return False  # PPO's loss draws nothing


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
