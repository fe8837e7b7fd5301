"""The actor-critic training loop shared by ``ppo`` and its variants (``ppo-adaptive-clip``, ``ppo-rlvr-prm``).

The loop (collect -> advantages -> epochs of minibatch steps -> record -> evaluate) lives here once; a
variant overrides only :meth:`ActorCriticTrainer.loss` and, where it has its own, :meth:`advantages`,
:meth:`begin_update` or :meth:`build_policy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from suite.algorithms.core import (
    GradientStepper,
    Minibatch,
    Rollout,
    RolloutCollector,
    check_finite_params,
    compute_gae,
    explained_variance,
    net_config,
)
from suite.algorithms.networks import ActorCritic
from suite.config import Schedule

if TYPE_CHECKING:
    from suite.trial import TrialContext


@dataclass(frozen=True)
class ActorCriticConfig:
    """Hyperparameters of the PPO family, with Stable-Baselines3's names and defaults."""

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
    vectorization: str = "auto"
    """How envs are vectorised: auto (fastest available), sync or async."""

    def __post_init__(self) -> None:
        for name in ("n_envs", "n_steps", "batch_size", "n_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not 0 < self.gamma <= 1 or not 0 <= self.gae_lambda <= 1:
            raise ValueError("gamma must be in (0, 1] and gae_lambda in [0, 1]")
        if self.activation not in ("tanh", "relu"):
            raise ValueError("activation must be tanh or relu")
        if self.vectorization not in ("auto", "sync", "async"):
            raise ValueError("vectorization must be auto, sync or async")


def actor_critic_policy(observation_space: Any, action_space: Any, cfg: Any) -> ActorCritic:
    """The family's policy for a config (also rebuilds saved policies: registry ``policy_factory``)."""
    return ActorCritic(observation_space, action_space, net_config(cfg, normalize_obs=cfg.normalize))


class ActorCriticTrainer:
    """Collect, estimate advantages, optimise; subclasses define :meth:`loss`."""

    def __init__(self, ctx: TrialContext, cfg: Any):
        self.ctx, self.cfg = ctx, cfg
        self.envs = ctx.make_envs(cfg.n_envs, vectorization=cfg.vectorization)
        self.policy = self.build_policy()
        self.stepper = GradientStepper(list(self.policy.parameters()), cfg.learning_rate, cfg.max_grad_norm, cfg.adam_eps)
        self.collector = RolloutCollector(ctx, self.envs, self.policy, cfg.n_steps, cfg.gamma, cfg.normalize)
        self.n_updates = 0

    def build_policy(self) -> ActorCritic:
        return actor_critic_policy(self.envs.single_observation_space, self.envs.single_action_space, self.cfg)

    # -- the loop ----------------------------------------------------------------------------------------
    def train(self) -> ActorCritic:
        ctx = self.ctx
        while ctx.steps < ctx.total_timesteps:
            # collect rollout (the last one shortened to the budget left)
            with ctx.phase("rollout"):
                rollout = self.collector.collect(ctx.remaining_steps)
            progress = ctx.steps / ctx.total_timesteps
            # compute advantages
            with ctx.phase("advantages"):
                adv, ret = self.advantages(rollout)
            # optimise
            with ctx.phase("update"):
                metrics = self.update(rollout, adv, ret, progress=progress)
            ctx.record_update(metrics)
            ctx.after_iteration(self.policy)
        return self.policy

    # -- hooks -------------------------------------------------------------------------------------------
    def advantages(self, rollout: Rollout) -> tuple[np.ndarray, np.ndarray]:
        """``(advantages (T, N), returns (T, N))`` by GAE on the mean of the value heads."""
        return compute_gae(
            rollout.rewards,
            rollout.values.mean(-1),
            rollout.dones,
            rollout.last_values.mean(-1),
            self.cfg.gamma,
            self.cfg.gae_lambda,
        )

    def begin_update(self, rollout: Rollout, advantages: np.ndarray, progress: float) -> dict[str, float]:
        """Called once per update before the epochs; returns extra metrics to record. Sets ``self.clip``."""
        self.clip = self.cfg.clip_range(progress)
        return {"clip_range": self.clip}

    def loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    # -- one update --------------------------------------------------------------------------------------
    def update(self, rollout: Rollout, adv: np.ndarray, ret: np.ndarray, progress: float) -> dict[str, float]:
        """Epochs of minibatch steps on ``rollout`` with advantages ``adv`` and value targets ``ret`` (T, N[, H])."""
        cfg = self.cfg
        extra_metrics = self.begin_update(rollout, adv, progress)
        lr = self.stepper.begin_update(progress)
        n = rollout.n_samples
        obs = rollout.obs.reshape(n, *rollout.obs.shape[2:])
        actions = rollout.actions.reshape(n, *rollout.actions.shape[2:])
        old_logp = torch.from_numpy(rollout.log_probs.reshape(n))
        old_values = torch.from_numpy(rollout.values.reshape(n, -1))
        t_adv = torch.from_numpy(adv.reshape(n))
        t_ret = torch.from_numpy(ret.reshape(n, *ret.shape[2:]))
        extra = self.minibatch_extra(rollout)
        sums: dict[str, float] = {}
        count = steps = 0
        stop = False
        for _epoch in range(cfg.n_epochs):
            perm = torch.randperm(n)
            for start in range(0, n, cfg.batch_size):
                idx = perm[start : start + cfg.batch_size]
                mb = Minibatch(
                    obs[idx], actions[idx], old_logp[idx], old_values[idx], t_adv[idx], t_ret[idx],
                    {k: v[idx] for k, v in extra.items()},
                )  # fmt: skip
                loss, m = self.loss(mb)
                for k, v in m.items():
                    sums[k] = sums.get(k, 0.0) + float(v)
                count += 1
                if cfg.target_kl is not None and float(m["approx_kl"]) > 1.5 * cfg.target_kl:
                    # SB3 (ppo.py): the minibatch that crosses the limit is measured but not stepped on.
                    stop = True
                    break
                self.stepper.step(loss)
                steps += 1
            if stop:
                break
        check_finite_params(self.policy)
        self.n_updates += 1
        out = {k: v / max(count, 1) for k, v in sums.items()}
        out.update(self.stepper.end_update())
        out.update(extra_metrics)
        out["learning_rate"] = lr
        out["n_minibatches"] = float(steps)  # gradient steps taken
        if self.policy.vf is not None:
            out["explained_variance"] = explained_variance(rollout.values.mean(-1).ravel(), ret.reshape(n, -1)[:, 0])
        return out

    def minibatch_extra(self, rollout: Rollout) -> dict[str, torch.Tensor]:
        """Per-sample tensors ``(n, ...)`` a variant's loss needs besides the standard fields."""
        return {}


def ppo_policy_value_loss(
    trainer: ActorCriticTrainer, mb: Minibatch, clip: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate + value + entropy loss (Schulman et al. 2017, arXiv 1707.06347; SB3's form).

    Returns:
        (loss, metrics, log-probs ``(B,)``, policy params ``(B, P)``) so variants can add regularisers.
    """
    cfg = trainer.cfg
    logp, entropy, values, params = trainer.policy.evaluate_actions(mb.obs, mb.actions)
    adv = mb.advantages
    if cfg.normalize_advantage and adv.shape[0] > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
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
    with torch.no_grad():
        metrics = {
            "policy_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy": -entropy_loss.detach(),
            "approx_kl": ((ratio - 1) - log_ratio).mean(),
            "clip_fraction": ((ratio - 1).abs() > clip).float().mean(),
        }
    return loss, metrics, logp, params
