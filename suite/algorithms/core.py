"""The shared on-policy core: rollout storage and collection, GAE, gradient steps with diagnostics.

Every algorithm of the suite is built from these pieces; an algorithm module holds only its loss and what
is truly its own. Hot-path rules (the core is benchmarked against SB3): one network call per env step for
all envs, preallocated arrays, no per-step Python objects per env.

Array shapes: ``T`` rollout steps, ``N`` envs, ``H`` value heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from suite.algorithms.networks import ActorCritic, NetConfig
from suite.config import Schedule
from suite.envs import final_observations, finished_episodes

if TYPE_CHECKING:
    import gymnasium as gym

    from suite.trial import TrialContext


class Diverged(RuntimeError):
    """A loss, gradient or parameter became NaN/inf; the trial is recorded as ``diverged``."""


# -- advantage estimation ---------------------------------------------------------------------------------
def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    dones: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    gae_lambda: float,
    delta_weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation (Schulman et al. 2016, arXiv 1506.02438).

    Args:
        rewards: ``(T, N)`` rewards of step t (time-limit truncations already bootstrapped into them).
        values: ``(T, N)`` V(s_t).
        dones: ``(T, N)`` 1 where the episode ended at step t (terminated or truncated).
        last_values: ``(N,)`` V(s_T) of the observation after the last step.
        gamma: discount.
        gae_lambda: GAE lambda.
        delta_weights: optional ``(T, N)`` factors on each TD error, ``A_t = sum_k (gamma lambda)^k w_{t+k}
            delta_{t+k}`` (``ppo-rlvr-prm``'s variance weighting); None = 1.

    Returns:
        ``(advantages, returns)``, both ``(T, N)`` float32, with returns = advantages + values.
    """
    T = rewards.shape[0]
    adv = np.zeros_like(rewards, dtype=np.float32)
    last = np.zeros(rewards.shape[1:], dtype=np.float32)
    next_values = last_values.astype(np.float32)
    for t in range(T - 1, -1, -1):
        non_terminal = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_values * non_terminal - values[t]
        if delta_weights is not None:
            delta = delta * delta_weights[t]
        last = delta + gamma * gae_lambda * non_terminal * last
        adv[t] = last
        next_values = values[t]
    return adv, (adv + values).astype(np.float32)


class RewardNormalizer:
    """Scale rewards by the running std of the discounted return, clipped (SB3 VecNormalize's norm_reward)."""

    def __init__(self, n_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.ret = np.zeros(n_envs)
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def __call__(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        self.ret = self.ret * self.gamma + rewards
        b_mean, b_var, n = float(self.ret.mean()), float(self.ret.var()), self.ret.shape[0]
        delta, tot = b_mean - self.mean, self.count + n
        self.mean += delta * n / tot
        self.var = (self.var * self.count + b_var * n + delta**2 * self.count * n / tot) / tot
        self.count = tot
        out = np.clip(rewards / math.sqrt(self.var + self.eps), -self.clip, self.clip)
        self.ret[dones] = 0.0
        return out.astype(np.float32)


# -- rollout ----------------------------------------------------------------------------------------------
@dataclass
class Rollout:
    """One batch of experience, time-major. Tensors share memory with the collector's buffers."""

    obs: torch.Tensor
    """``(T, N, *obs_shape)`` network inputs (normalised if enabled)."""
    actions: torch.Tensor
    """``(T, N, *action_shape)`` sampled actions (before clipping to the env's bounds)."""
    log_probs: np.ndarray
    """``(T, N)`` log pi_old(a_t | s_t)."""
    values: np.ndarray
    """``(T, N, H)`` value estimates of every head."""
    rewards: np.ndarray
    """``(T, N)`` training rewards (normalised/clipped, time-limit bootstrapped)."""
    dones: np.ndarray
    """``(T, N)`` 1.0 where an episode ended at step t."""
    last_values: np.ndarray
    """``(N, H)`` values of the observation after the last step."""

    @property
    def n_samples(self) -> int:
        return self.rewards.size


class RolloutCollector:
    """Steps ``N`` envs for ``T`` steps with one policy call per step, recording finished episodes."""

    def __init__(
        self,
        ctx: TrialContext,
        envs: gym.vector.VectorEnv,
        policy: ActorCritic,
        n_steps: int,
        gamma: float,
        normalize_reward: bool = False,
    ):
        self.ctx, self.envs, self.policy = ctx, envs, policy
        self.n_envs = envs.num_envs
        self.n_steps, self.gamma = n_steps, gamma
        self.reward_norm = RewardNormalizer(self.n_envs, gamma) if normalize_reward else None
        self.update_obs_stats = policy.obs_rms is not None
        obs, _ = envs.reset(seed=ctx.train_seed)
        self.obs = obs
        T, N = n_steps, self.n_envs
        x0 = policy.prepare_obs(obs)
        self.buf_obs = torch.zeros((T, N, *x0.shape[1:]), dtype=x0.dtype)
        self.buf_actions = torch.zeros((T, N, *policy.action_shape), dtype=torch.long if policy.discrete else torch.float32)
        H = max(policy.cfg.n_value_heads, 1)
        self.buf_logp = np.zeros((T, N), dtype=np.float32)
        self.buf_values = np.zeros((T, N, H), dtype=np.float32)
        self.buf_rewards = np.zeros((T, N), dtype=np.float32)
        self.buf_dones = np.zeros((T, N), dtype=np.float32)
        self.has_critic = policy.vf is not None

    def collect(self, max_samples: int | None = None) -> Rollout:
        """Fill the buffers with ``n_steps`` steps of every env (fewer when ``max_samples``, the budget left, is
        smaller: ``ceil(max_samples / n_envs)`` steps) and return them as a :class:`Rollout` (views of the buffers)."""
        policy, envs, ctx = self.policy, self.envs, self.ctx
        step0 = ctx.steps
        T = self.n_steps if max_samples is None else max(1, min(self.n_steps, -(-max_samples // self.n_envs)))
        for t in range(T):
            x = policy.prepare_obs(self.obs, update_stats=self.update_obs_stats)
            actions, logp, values = policy.act(x)
            a_np = actions.numpy()
            obs, rewards, terminated, truncated, info = envs.step(policy.head.to_env(a_np))
            dones = terminated | truncated
            rewards = np.asarray(rewards, dtype=np.float32)
            if self.reward_norm is not None:
                rewards = self.reward_norm(rewards, dones)
            if self.has_critic and truncated.any():
                # Time-limit truncation is not a real end: bootstrap from V(final obs) (SB3 issue 633).
                mask, final = final_observations(info, self.n_envs)
                boot = truncated & ~terminated & mask
                if boot.any() and final is not None:
                    with torch.no_grad():
                        v = policy.values(policy.prepare_obs(final[boot])).mean(-1).numpy()
                    rewards[boot] += self.gamma * v
            self.buf_obs[t] = x
            self.buf_actions[t] = actions
            self.buf_logp[t] = logp.numpy()
            if values is not None:
                self.buf_values[t] = values.numpy()
            self.buf_rewards[t] = rewards
            self.buf_dones[t] = dones
            if dones.any():
                ep_mask, ep_ret, ep_len = finished_episodes(info, self.n_envs)
                if ep_mask.any():
                    ctx.record_episodes(step0 + (t + 1) * self.n_envs, ep_ret[ep_mask], ep_len[ep_mask])
            self.obs = obs
        ctx.steps = step0 + T * self.n_envs
        H = self.buf_values.shape[-1]
        last = np.zeros((self.n_envs, H), dtype=np.float32)
        if self.has_critic:
            with torch.no_grad():
                last = policy.values(policy.prepare_obs(self.obs)).numpy()
        return Rollout(
            self.buf_obs[:T], self.buf_actions[:T], self.buf_logp[:T], self.buf_values[:T], self.buf_rewards[:T],
            self.buf_dones[:T], last,
        )  # fmt: skip


# -- optimisation -----------------------------------------------------------------------------------------
@dataclass
class Minibatch:
    """Flat tensors for one gradient step. ``B`` = minibatch size."""

    obs: torch.Tensor
    actions: torch.Tensor
    old_log_probs: torch.Tensor
    """``(B,)``"""
    old_values: torch.Tensor
    """``(B, H)``"""
    advantages: torch.Tensor
    """``(B,)`` not yet normalised."""
    returns: torch.Tensor
    """``(B,)`` or ``(B, H)`` value targets."""
    extra: dict[str, torch.Tensor] = field(default_factory=dict)


class GradientStepper:
    """Adam steps with global-norm clipping, recording the grad norm and the variance of the gradient across
    the minibatches of one update (trace of the covariance: E||g - mean g||^2), which the stability report uses."""

    def __init__(self, params: list[nn.Parameter], learning_rate: Schedule, max_grad_norm: float, eps: float = 1e-5):
        self.params = [p for p in params if p.requires_grad]
        self.optimizer = torch.optim.Adam(self.params, lr=learning_rate(0.0), eps=eps, foreach=True)
        self.learning_rate = learning_rate
        self.max_grad_norm = max_grad_norm
        self.begin_update(0.0)

    def begin_update(self, progress: float) -> float:
        lr = self.learning_rate(progress)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self._n = 0
        self._sum: torch.Tensor | None = None
        self._sumsq = 0.0
        self._norms: list[float] = []
        return lr

    def step(self, loss: torch.Tensor) -> None:
        if not torch.isfinite(loss):
            raise Diverged(f"non-finite loss {float(loss.detach())}")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grads = [p.grad.reshape(-1) for p in self.params if p.grad is not None]
        flat = torch.cat(grads)
        sq = float(flat.square().sum())
        if not math.isfinite(sq):
            raise Diverged("non-finite gradient")
        self._sum = flat.clone() if self._sum is None else self._sum.add_(flat)
        self._sumsq += sq
        self._n += 1
        self._norms.append(math.sqrt(sq))
        if self.max_grad_norm and self.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(self.params, self.max_grad_norm, foreach=True)
        self.optimizer.step()

    def end_update(self) -> dict[str, float]:
        """``grad_norm`` (mean pre-clip norm) and ``grad_var`` across this update's minibatches."""
        if not self._n or self._sum is None:
            return {"grad_norm": float("nan"), "grad_var": float("nan")}
        mean_sq = float((self._sum / self._n).square().sum())
        return {"grad_norm": float(np.mean(self._norms)), "grad_var": max(self._sumsq / self._n - mean_sq, 0.0)}


def check_finite_params(module: nn.Module) -> None:
    for name, p in module.named_parameters():
        if not torch.isfinite(p).all():
            raise Diverged(f"parameter {name} became non-finite")


def explained_variance(y_pred: np.ndarray, y_true: np.ndarray) -> float:
    """1 - Var[y - y_pred] / Var[y]; NaN when Var[y] = 0."""
    var_y = float(np.var(y_true))
    return float("nan") if var_y == 0 else 1.0 - float(np.var(y_true - y_pred)) / var_y


def net_config(cfg: Any, **overrides: Any) -> NetConfig:
    """Pick the :class:`NetConfig` fields out of an algorithm config (same names), with overrides."""
    kw = {f: getattr(cfg, f) for f in NetConfig.__dataclass_fields__ if hasattr(cfg, f)}
    kw.update(overrides)
    return NetConfig(**kw)
