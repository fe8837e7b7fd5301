"""``reinforce``: REINFORCE with a learned state-value baseline, as an rl-suite plugin.

Williams 1992 ("Simple statistical gradient-following algorithms", Machine Learning 8); the baseline version of
Sutton & Barto 2018, Sec. 13.4. Each update takes ONE gradient step on the whole batch, ascending
``log pi(a|s) * (G - V(s))`` with Monte-Carlo returns G, while V regresses onto G. Rollouts have a fixed length,
so an episode still running at the end of a rollout has its tail bootstrapped from V (the suite's GAE with
lambda = 1). Written only against :mod:`suite.api`; the suite supplies seeding, evaluation and records.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from suite import api

api.require_api(1)
__version__ = "0.1.0"


@dataclass(frozen=True)
class ReinforceConfig:
    """Hyperparameters (SB3 names). Per-env defaults: ``hyperparams.toml`` next to this file."""

    n_envs: int = 8
    """Environments stepped together."""
    n_steps: int = 32
    """Steps per env per rollout; one gradient step per ``n_envs * n_steps`` samples."""
    gamma: float = 0.99
    """Discount factor of the returns."""
    learning_rate: api.Schedule = api.Schedule("constant", 1e-3, 1e-3)
    """Adam step size (a schedule over training progress)."""
    vf_coef: float = 0.5
    """Weight of the baseline's squared error."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    normalize_advantage: bool = True
    """Standardise G - V over the batch."""
    normalize: bool = False
    """Running observation and reward normalisation (SB3 VecNormalize)."""
    pi_arch: tuple[int, ...] = (64, 64)
    """Policy MLP hidden sizes."""
    vf_arch: tuple[int, ...] = (64, 64)
    """Baseline MLP hidden sizes."""
    activation: str = "tanh"
    """tanh or relu."""


def build_policy(observation_space: Any, action_space: Any, cfg: ReinforceConfig) -> api.ActorCritic:
    """The policy and baseline networks (also rebuilds a saved policy for ``suite evaluate``)."""
    return api.ActorCritic(observation_space, action_space, api.net_config(cfg, normalize_obs=cfg.normalize))


@api.register(
    "reinforce",
    version="1.1.0",  # 1.1.0: the suite's flat fused Adam (GradientStepper) moves its results
    summary="REINFORCE with a learned state-value baseline (Monte-Carlo returns, one gradient step per rollout)",
    reference="Williams 1992, Machine Learning 8:229-256; Sutton & Barto 2018, Sec. 13.4",
    action_spaces=("discrete", "box"),
    config=ReinforceConfig,
    hyperparams=Path(__file__).with_name("hyperparams.toml"),
    policy_factory=build_policy,
)
def train(ctx: api.TrialContext, cfg: ReinforceConfig) -> api.ActorCritic:
    envs = ctx.make_envs(cfg.n_envs)
    policy = build_policy(envs.single_observation_space, envs.single_action_space, cfg)
    collector = api.RolloutCollector(ctx, envs, policy, cfg.n_steps, cfg.gamma, normalize_reward=cfg.normalize)
    stepper = api.GradientStepper(list(policy.parameters()), cfg.learning_rate, cfg.max_grad_norm)
    while ctx.steps < ctx.total_timesteps:
        with ctx.phase("rollout"):
            batch = collector.collect(ctx.remaining_steps)
        with ctx.phase("advantages"):  # lambda = 1: advantages G_t - V(s_t), returns G_t
            adv, ret = api.compute_gae(
                batch.rewards, batch.values[..., 0], batch.dones, batch.last_values[..., 0], cfg.gamma, 1
            )
        with ctx.phase("update"):
            lr = stepper.begin_update(ctx.steps / ctx.total_timesteps)
            n = batch.n_samples
            obs, actions = batch.obs.reshape(n, *batch.obs.shape[2:]), batch.actions.reshape(n, *batch.actions.shape[2:])
            logp, entropy, values, _ = policy.evaluate_actions(obs, actions)
            advantages, returns = torch.from_numpy(adv.reshape(n)), torch.from_numpy(ret.reshape(n))
            if cfg.normalize_advantage and n > 1:
                advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
            policy_loss = -(logp * advantages).mean()
            value_loss = (returns - values[:, 0]).square().mean()
            stepper.step(policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy.mean())
            api.check_finite_params(policy)
        explained = api.explained_variance(batch.values[..., 0].ravel(), ret.ravel())
        metrics = {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(), "entropy": entropy.mean().item()}
        ctx.record_update({**metrics, **stepper.end_update(), "learning_rate": lr, "explained_variance": explained})
        ctx.after_iteration(policy)
    return policy
