"""``grpo``: Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300), episodic.

DeepSeekMath samples G outputs per prompt, scores them and gives every token of output i the advantage
``(r_i - mean(r)) / std(r)``, optimised with PPO's clipped ratio plus a per-token KL penalty to a frozen
reference policy; there is no critic. Adapted to episodic envs as stable-baselines3-contrib issue 301
proposes: a "prompt" is an initial state, a *group* is G episodes started from one shared reset seed,
an "output" is an episode and one env step is one "token". K groups (K distinct seeds) make one update.

Options (:class:`GRPOConfig`) cover the published variants: outcome or process supervision (paper section
4.1.2 / 4.1.3), the loss aggregation of GRPO, Dr. GRPO (Liu et al. 2025, arXiv 2503.20783) and DAPO (Yu et al.
2025, arXiv 2503.14476, token-level mean + dynamic sampling), group/batch/no reward scaling (TRL's
``scale_rewards``) and asymmetric clipping (DAPO's clip-higher).

Step accounting: the G*K sub-envs are stepped together until each has finished its first episode; with
SAME_STEP autoreset a sub-env that finished early keeps running a new episode whose transitions are masked
out (never trained on, never recorded). ``ctx.steps`` counts only the transitions of the recorded episodes
(the samples the algorithm consumes); the padding steps are reported per update as ``padding_frac``.

Truncation: an episode cut by ``max_episode_steps`` (or the env's own limit) has the return it got; there is
no critic to bootstrap from, so a truncated episode is scored as if it had ended (``truncated_frac`` says how
often that happens). Keep the cap long enough that good and bad episodes still differ before it. An episode
cut by the suite's cap (below the env's own limit, e.g. Pong games capped at 1000 steps) is a partial game: it
is trained on but NOT recorded in the learning curve, which holds whole episodes only (the same quantity the
PPO family records); the trial's ``metrics`` say how many were left out (``capped_episodes``) and the cap.

Budget: the collector stops once the trial's budget is spent (at most ``n_envs - 1`` steps past it); only the
groups whose episodes all finished by then are trained on, so every algorithm stops at the same step count.

Since version 1.3.0 the update takes its derivatives by hand in the shared core (``hand_derived``,
:func:`grpo_loss_derivatives`): the kernel's forward of the policy MLP, the clipped surrogate's, the k3 penalty's and
the entropy bonus's derivatives per step in numpy, the kernel's backward; the same steps as autograd's up to float
rounding (tested). ``hand_derived = false`` is the autograd path of 1.2.0; image observations always take it.

The episode-group collection (:class:`EpisodeGroupCollector`, :class:`EpisodeGroups`) is independent of the
loss, so other group-based algorithms can import it.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from suite.algorithms.core import (
    ROLLOUT_STORAGES,
    Buffer,
    Diverged,
    GradientStepper,
    attach_clock,
    micro_batches,
    net_config,
)
from suite.algorithms.fused import PolicyKernel, in_kernel_mode, kernel_for
from suite.algorithms.networks import ActorCritic
from suite.config import Schedule
from suite.envs import episode_limit, finished_episodes
from suite.errors import UserError
from suite.registry import register

if TYPE_CHECKING:
    from suite.trial import TrialContext

ADV_EPS = 1e-4
"""Added to the std in advantage normalisation (the issue's formula; TRL's GRPOTrainer uses the same 1e-4)."""

MAX_BUFFER_BYTES = 4 * 2**30
"""Refuse rollout buffers larger than this (a clear error instead of an out-of-memory kill)."""

REF_CHUNK, REF_CHUNK_IMAGES = 4096, 256
"""Steps per forward of the reference policy (images: 256 frames are ~29 MB as float; 4096 would be ~460 MB)."""


@dataclass(frozen=True)
class GRPOConfig:
    """Hyperparameters of ``grpo``; SB3 names where SB3 has the concept, the papers' names otherwise."""

    group_size: int = 8
    """G: episodes per group, all reset with one seed (DeepSeekMath uses 64 outputs per question). >= 2."""
    n_groups: int = 4
    """K: groups (distinct reset seeds) per update; an update trains on G*K episodes."""
    supervision: Literal["outcome", "process"] = "outcome"
    """``outcome``: every step of episode i gets the group-normalised return (paper 4.1.2). ``process``:
    per-step rewards normalised over the group, advantage = sum of normalised rewards to go (paper 4.1.3)."""
    loss_agg: Literal["grpo", "dr_grpo", "dapo"] = "grpo"
    """How per-step losses become one number: ``grpo`` mean over episodes of the per-episode step mean;
    ``dr_grpo`` sum over steps / (episodes * max_episode_steps); ``dapo`` sum over steps / total steps
    (and dynamic sampling: zero-spread groups are dropped and resampled)."""
    scale_rewards: Literal["auto", "group", "batch", "none"] = "auto"
    """Divide the centred rewards by the std of the ``group``, of the whole ``batch``, or not at all (``none``);
    ``auto`` = ``none`` for ``dr_grpo`` (its fix of the std bias) and ``group`` otherwise (the paper)."""
    eps_low: float = 0.2
    """Lower clip: ratios below 1 - eps_low are clipped (0.2 is PPO's convention; the paper states none)."""
    eps_high: float = 0.2
    """Upper clip: ratios above 1 + eps_high are clipped (DAPO's clip-higher uses 0.28)."""
    beta: float = 0.04
    """Weight of the k3 KL penalty to the reference policy (paper: 0.04)."""
    ref_update_interval: int = 10
    """Refresh the frozen reference policy to the current one every this many updates; 0 = never (the
    reference stays the initial policy, as in the paper's single-iteration setting)."""
    max_resample_rounds: int = 3
    """``dapo`` only: extra batches of K groups drawn to replace zero-spread groups; after that many rounds the
    batch is topped up with zero-spread groups (advantage 0) so every update has K groups."""
    n_epochs: int = 1
    """mu: optimisation passes over each batch (paper: 1, i.e. a pure on-policy step)."""
    n_minibatches: int = 1
    """Minibatches per epoch; the batch is split by episodes (whole episodes stay together)."""
    learning_rate: Schedule = Schedule("constant", 3e-4, 3e-4)
    """Adam step size (a schedule over training progress)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip (0 = none)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient (the paper has none)."""
    adam_eps: float = 1e-5
    """Adam epsilon (SB3's 1e-5)."""
    pi_arch: tuple[int, ...] = (64, 64)
    """Policy MLP hidden sizes (empty on Atari: linear head on the Nature CNN)."""
    activation: str = "tanh"
    """Hidden activation: tanh or relu."""
    ortho_init: bool = True
    """Orthogonal initialisation (SB3 gains)."""
    log_std_init: float = 0.0
    """Initial log std of the Gaussian policy (continuous actions)."""
    normalize_obs: bool = False
    """Running mean/std observation normalisation (vector observations; rewards are normalised per group)."""
    max_episode_steps: int = 0
    """Per-episode step cap (truncation, scored honestly: see the module docstring); 0 = the env's own limit.
    Also the length of the rollout buffers and Dr. GRPO's constant normaliser."""
    vectorization: Literal["sync", "async"] = "sync"
    """How the G*K sub-envs are vectorised (CartPole's numpy fast path takes no per-env seeds, so no ``auto``)."""
    rollout_storage: str = "numpy"
    """Memory toggle: episode buffers allocated and written by ``numpy`` or as ``torch`` tensors (exact: the same
    values either way)."""
    grad_accumulation: int = 1
    """Memory toggle: each minibatch step sums the gradients of this many slices of its steps (activations are held
    for a slice at a time: Pong's minibatches are thousands of frames); the same gradient up to float rounding."""
    hand_derived: bool = True
    """Take the loss's derivatives by hand in the shared core (:class:`suite.algorithms.fused.PolicyKernel`: one
    forward and one backward pass of the policy MLP per slice, the loss's arithmetic in numpy, no autograd graph;
    :func:`grpo_loss_derivatives`); ``false`` is the autograd path of versions up to 1.2.0, which image observations
    (the Nature CNN) always take. The two agree up to float rounding (tests compare gradients, steps and metrics)."""

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(
                f"group_size must be >= 2 (the group std of a single episode is undefined), got {self.group_size}"
            )
        for name in ("n_groups", "n_epochs", "n_minibatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_minibatches > self.group_size * self.n_groups:
            raise ValueError("n_minibatches cannot exceed the episodes per update (group_size * n_groups)")
        for name in ("ref_update_interval", "max_resample_rounds", "max_episode_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.eps_low < 1 or self.eps_high < 0:
            raise ValueError("eps_low must be in [0, 1) and eps_high >= 0")
        if self.beta < 0 or self.ent_coef < 0:
            raise ValueError("beta and ent_coef must be >= 0")
        if self.activation not in ("tanh", "relu"):
            raise ValueError("activation must be tanh or relu")
        if self.rollout_storage not in ROLLOUT_STORAGES:
            raise ValueError(f"rollout_storage must be one of {', '.join(ROLLOUT_STORAGES)}")
        if self.grad_accumulation < 1:
            raise ValueError(f"grad_accumulation must be >= 1, got {self.grad_accumulation}")

    @property
    def reward_scaling(self) -> str:
        """The resolved ``scale_rewards``: ``group``, ``batch`` or ``none``."""
        if self.scale_rewards == "auto":
            return "none" if self.loss_agg == "dr_grpo" else "group"
        return self.scale_rewards

    @property
    def batch_episodes(self) -> int:
        """Episodes per update (G * K)."""
        return self.group_size * self.n_groups


def grpo_policy(observation_space: Any, action_space: Any, cfg: GRPOConfig) -> ActorCritic:
    """The critic-free policy for a config (also the registry's ``policy_factory`` for saved policies)."""
    return ActorCritic(observation_space, action_space, net_config(cfg, n_value_heads=0))


# -- episode groups ---------------------------------------------------------------------------------------
@dataclass
class EpisodeGroups:
    """G*K episodes, K groups of G, stored time-major with padding. Episode ``n`` belongs to group ``n // G``.

    Shapes: ``T`` = steps of the longest episode, ``N = K * G`` episodes.
    """

    obs: torch.Tensor
    """``(T, N, *obs_shape)`` network inputs (normalised when enabled); rows past an episode's end are junk."""
    actions: torch.Tensor
    """``(T, N, *action_shape)`` sampled actions (before clipping to the env's bounds)."""
    log_probs: np.ndarray
    """``(T, N)`` float32 log pi_old(a_t | s_t) at collection time."""
    rewards: np.ndarray
    """``(T, N)`` float32 training rewards, 0 on padding."""
    mask: np.ndarray
    """``(T, N)`` bool, True on the steps of each episode (a prefix: t < lengths[n])."""
    lengths: np.ndarray
    """``(N,)`` int64 episode lengths."""
    truncated: np.ndarray
    """``(N,)`` bool: the episode was cut by the step cap, not terminated."""
    seeds: np.ndarray
    """``(K,)`` the reset seed of each group."""
    group_size: int
    """G."""
    env_steps: int
    """Sub-env steps executed to collect these episodes, padding included."""
    finished: np.ndarray | None = None
    """``(N,)`` bool: the episode ended (None = all did). False only when the budget ran out mid-episode."""

    @property
    def n_groups(self) -> int:
        return len(self.seeds)

    @property
    def returns(self) -> np.ndarray:
        """``(N,)`` float64 undiscounted training returns."""
        return self.rewards.sum(0, dtype=np.float64)

    def select_groups(self, groups: np.ndarray) -> EpisodeGroups:
        """A copy holding only the given group indices (in that order), trimmed to their longest episode."""
        G = self.group_size
        cols = (np.asarray(groups, dtype=np.int64)[:, None] * G + np.arange(G)).ravel()
        T = int(self.lengths[cols].max()) if cols.size else 0
        tc = torch.from_numpy(cols)
        return EpisodeGroups(
            self.obs[:T, tc].clone(), self.actions[:T, tc].clone(), self.log_probs[:T, cols].copy(),
            self.rewards[:T, cols].copy(), self.mask[:T, cols].copy(), self.lengths[cols].copy(),
            self.truncated[cols].copy(), self.seeds[np.asarray(groups, dtype=np.int64)].copy(), G, 0,
            None if self.finished is None else self.finished[cols].copy(),
        )  # fmt: skip

    def complete_groups(self) -> EpisodeGroups | None:
        """The groups whose G episodes all finished (``self`` when all did; None when none did). The copy keeps
        ``env_steps`` (the steps executed to collect the whole batch)."""
        if self.finished is None or self.finished.all():
            return self
        done = self.finished.reshape(self.n_groups, self.group_size).all(1)
        if not done.any():
            return None
        out = self.select_groups(np.flatnonzero(done))
        out.env_steps = self.env_steps
        return out

    @staticmethod
    def concat(parts: list[EpisodeGroups]) -> EpisodeGroups:
        """Join batches along the episode axis, padding to the longest; ``env_steps`` are summed."""
        T = max(p.obs.shape[0] for p in parts)

        def pad_t(x: Any) -> Any:
            extra = T - x.shape[0]
            if not extra:
                return x
            if isinstance(x, torch.Tensor):
                return torch.cat([x, x.new_zeros((extra, *x.shape[1:]))])
            return np.concatenate([x, np.zeros((extra, *x.shape[1:]), dtype=x.dtype)])

        return EpisodeGroups(
            torch.cat([pad_t(p.obs) for p in parts], 1), torch.cat([pad_t(p.actions) for p in parts], 1),
            np.concatenate([pad_t(p.log_probs) for p in parts], 1), np.concatenate([pad_t(p.rewards) for p in parts], 1),
            np.concatenate([pad_t(p.mask) for p in parts], 1), np.concatenate([p.lengths for p in parts]),
            np.concatenate([p.truncated for p in parts]), np.concatenate([p.seeds for p in parts]),
            parts[0].group_size, sum(p.env_steps for p in parts),
        )  # fmt: skip


def check_same_start(obs: np.ndarray, group_size: int, seeds: np.ndarray) -> None:
    """Raise when the G sub-envs of a group (consecutive rows) do not share their first observation.

    Args:
        obs: ``(K * G, *obs_shape)`` first observations after ``reset(seed=np.repeat(seeds, G))``.
        group_size: G.
        seeds: ``(K,)`` the groups' reset seeds (for the message).

    Raises:
        RuntimeError: a group whose first observations differ (the env is not deterministic under seeding).
    """
    grouped = obs.reshape(len(seeds), group_size, -1)
    same = (grouped == grouped[:, :1]).all(axis=(1, 2))
    if not same.all():
        k = int(np.flatnonzero(~same)[0])
        raise RuntimeError(
            f"GRPO groups must start from one state, but the {group_size} sub-envs reset with seed {int(seeds[k])} "
            "returned different first observations: this env's reset is not deterministic given its seed"
        )


def episode_cap(ctx: TrialContext, max_episode_steps: int) -> tuple[int, int | None]:
    """``(max_len, cap)``: the longest possible episode, and the ``max_episode_steps`` to pass to
    ``make_vec_env`` (None when ``max_episode_steps`` is 0 or not below the env's own limit)."""
    limit = episode_limit(ctx.env_id, ctx.env_kwargs)
    if 0 < max_episode_steps < limit:
        return max_episode_steps, max_episode_steps
    return limit, None


class EpisodeGroupCollector:
    """Collects K groups of G episodes: one vector env of G*K sub-envs, group k reset with seed ``seeds[k]``.

    All sub-envs are stepped with one policy call per step until every one has finished its first episode;
    transitions after that (SAME_STEP autoreset starts a new episode) are masked out. Buffers are preallocated
    at ``(max_len, G*K)`` once and reused: the returned :class:`EpisodeGroups` is a view of them, valid until the
    next :meth:`collect` (copy with :meth:`EpisodeGroups.select_groups` to keep it).
    """

    def __init__(
        self,
        ctx: TrialContext,
        envs: Any,
        policy: ActorCritic,
        group_size: int,
        max_len: int,
        cap: int | None = None,
        *,
        kernel: PolicyKernel | None = None,
        storage: str = "numpy",
    ):
        """
        Args:
            ctx: The trial (seeds, step counter, episode recorder).
            envs: A vector env of ``K * G`` sub-envs taking per-env seed lists (``vectorization`` sync/async),
                capped at ``max_len`` steps per episode (:func:`episode_cap`).
            policy: Acts with one call per step for all sub-envs.
            group_size: G.
            max_len: Longest possible episode; the buffers hold ``max_len`` steps.
            cap: The suite's episode cap when it is below the env's own limit (:func:`episode_cap`); episodes
                truncated by it are partial and stay out of the learning curve.
            kernel: the policy's hand-derived inference (:mod:`suite.algorithms.fused`), or None (module calls).
            storage: the ``rollout_storage`` toggle (numpy or torch buffers, :class:`~suite.algorithms.core.Buffer`).
        """
        self.ctx, self.envs, self.policy, self.kernel = ctx, envs, policy, kernel
        self.cap = cap
        self.capped_episodes = 0
        if cap is not None:
            ctx.record_metric("episode_cap", cap)
            ctx.record_metric("capped_episodes", 0)
        self.n_envs = N = envs.num_envs
        if N % group_size:
            raise ValueError(f"{N} sub-envs do not split into groups of {group_size}")
        self.group_size, self.n_groups = group_size, N // group_size
        self.max_len = T = max_len
        self.update_obs_stats = policy.obs_rms is not None
        self.step_active_only = not self.update_obs_stats and bool(getattr(envs, "masks_steps", False))
        """Step only the sub-envs whose episode is still running (``SeededVectorEnv.step_active``; 30% fewer
        LunarLander steps at n_groups 4, group_size 8). The finished ones' (frozen) observations still go through
        the policy each step with the rest, so the random stream and the batch size are as before, and are masked
        out; the running ones get the same values bit for bit, as the policy's rows of a batch do not depend on each
        other (tested on a LunarLander trial). Not with observation normalisation, whose running statistics take
        every sub-env's observation, nor on the numpy twins (CartPole, TextMatch), which step all sub-envs in one
        call anyway."""
        space = envs.single_observation_space
        x0 = policy.prepare_obs(np.zeros((1, *space.shape), dtype=space.dtype))
        nbytes = T * N * (x0[0].numel() * x0.element_size() + 16)
        if nbytes > MAX_BUFFER_BYTES:
            raise UserError(
                f"grpo rollout buffers would need {nbytes / 2**30:.1f} GiB ({T} steps x {N} episodes); "
                "set max_episode_steps or reduce group_size/n_groups"
            )
        self.buf_obs = Buffer((T, N, *x0.shape[1:]), x0.dtype, storage)
        act_dtype = torch.long if policy.discrete else torch.float32
        self.buf_actions = Buffer((T, N, *policy.action_shape), act_dtype, storage)
        self.buf_logp = Buffer((T, N), torch.float32, storage)
        self.buf_rewards = np.zeros((T, N), dtype=np.float32)
        self.buf_mask = np.zeros((T, N), dtype=bool)
        self.clock: Any = None
        """An optional lap clock (``suite profile speed``)."""

    @in_kernel_mode(lambda self: self.kernel is not None)
    def collect(self, max_samples: int | None = None) -> EpisodeGroups:
        """Draw K seeds, run G episodes from each, record them in ``ctx`` and advance ``ctx.steps``.

        Args:
            max_samples: the budget left; collection stops once this many steps are used (episodes still
                running then are marked unfinished in the result).
        """
        ctx, policy, envs, G, N, clock = self.ctx, self.policy, self.envs, self.group_size, self.n_envs, self.clock
        seeds = ctx.draw_seeds(self.n_groups)
        obs, _ = envs.reset(seed=np.repeat(seeds, G).tolist())
        check_same_start(np.asarray(obs), G, seeds)
        active = np.ones(N, dtype=bool)
        lengths = np.zeros(N, dtype=np.int64)
        truncated = np.zeros(N, dtype=bool)
        step0, used, t = ctx.steps, 0, 0
        while active.any():
            if max_samples is not None and used >= max_samples:
                break  # the trial's budget is spent: the running episodes stay unfinished
            if t >= self.max_len:
                raise RuntimeError(f"an episode ran past max_len={self.max_len} steps without truncation")
            x = policy.prepare_obs(obs, update_stats=self.update_obs_stats)
            if self.kernel is not None:
                actions, logp = self.kernel.sample(self.kernel.infer(x, with_values=False)[0])
            else:
                actions, logp, _ = policy.act(x)
            if clock is not None:
                clock.lap("inference", N)
            env_actions = policy.head.to_env(actions.numpy())
            if self.step_active_only:
                obs, rewards, terminated, trunc, info = envs.step_active(env_actions, active)
            else:
                obs, rewards, terminated, trunc, info = envs.step(env_actions)
            if clock is not None:
                clock.lap("env_step", int(active.sum()) if self.step_active_only else N)  # sub-env steps taken
            self.buf_obs.put(t, x)
            self.buf_actions.put(t, actions)
            self.buf_logp.put(t, logp)
            self.buf_rewards[t] = np.where(active, rewards, 0.0)
            self.buf_mask[t] = active
            used += int(active.sum())
            done = (terminated | trunc) & active
            if done.any():
                lengths[done] = t + 1
                truncated[done] = trunc[done] & ~terminated[done]
                ep_mask, ep_ret, ep_len = finished_episodes(info, N)
                rec = done & ep_mask
                if self.cap is not None:
                    partial = rec & truncated & (ep_len == self.cap)  # cut by the suite's cap: not a whole game
                    if partial.any():
                        self.capped_episodes += int(partial.sum())
                        ctx.record_metric("capped_episodes", self.capped_episodes)
                        rec &= ~partial
                if rec.any():
                    ctx.record_episodes(step0 + used, ep_ret[rec], ep_len[rec])
                active &= ~done
            t += 1
            if clock is not None:
                clock.lap("storage")
        ctx.steps = step0 + used
        lengths[active] = t  # unfinished (budget spent): the steps taken so far
        return EpisodeGroups(
            self.buf_obs.t[:t], self.buf_actions.t[:t], self.buf_logp.np[:t], self.buf_rewards[:t], self.buf_mask[:t],
            lengths, truncated, seeds, G, t * N, ~active if active.any() else None,
        )  # fmt: skip


# -- advantages -------------------------------------------------------------------------------------------
def _std(x: np.ndarray, axis: Any = None) -> np.ndarray:
    # Sample std (ddof=1), as torch.std in TRL's GRPOTrainer; the paper does not say which.
    return np.std(x, axis=axis, ddof=1)


def outcome_advantages(returns: np.ndarray, scaling: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Outcome supervision (paper 4.1.2): A_i = (R_i - mean_G R) / (std_G R + 1e-4), one value per episode.

    Args:
        returns: ``(K, G)`` undiscounted episode returns, one row per group.
        scaling: ``group`` (std of the group), ``batch`` (std of all K*G returns) or ``none``.

    Returns:
        ``(advantages (K, G), zero_spread (K,) bool, group_std (K,))``; a zero-spread group (all returns equal)
        has advantage 0 for every episode.
    """
    returns = np.asarray(returns, dtype=np.float64)
    centred = returns - returns.mean(1, keepdims=True)
    group_std = _std(returns, axis=1)
    zero = np.ptp(returns, axis=1) == 0
    if scaling == "group":
        adv = centred / (group_std[:, None] + ADV_EPS)
    elif scaling == "batch":
        adv = centred / (_std(returns) + ADV_EPS)
    elif scaling == "none":
        adv = centred
    else:
        raise ValueError(f"unknown reward scaling {scaling!r}")
    adv[zero] = 0.0
    return adv, zero, group_std


def process_advantages(
    rewards: np.ndarray, mask: np.ndarray, group_size: int, scaling: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Process supervision (paper 4.1.3): r~ = (r - mean) / (std + 1e-4) over all step rewards of the group,
    A_t = sum_{t' >= t} r~_{t'} within the episode.

    Args:
        rewards: ``(T, K * G)`` per-step rewards, episode n in group n // G.
        mask: ``(T, K * G)`` bool, True on real steps (a prefix of each column).
        group_size: G.
        scaling: ``group``, ``batch`` (std of every step reward of the batch) or ``none``.

    Returns:
        ``(advantages (T, K * G) float64 (0 on padding), zero_spread (K,) bool, group_std (K,))``.
    """
    T, N = rewards.shape
    K = N // group_size
    r = np.asarray(rewards, dtype=np.float64)
    norm = np.zeros((T, N))
    zero = np.zeros(K, dtype=bool)
    group_std = np.zeros(K)
    batch_std = _std(r[mask]) if scaling == "batch" else 0.0
    for k in range(K):
        cols = slice(k * group_size, (k + 1) * group_size)
        m = mask[:, cols]
        vals = r[:, cols][m]
        group_std[k] = _std(vals) if vals.size > 1 else 0.0
        zero[k] = np.ptp(vals) == 0
        centred = np.where(m, r[:, cols] - vals.mean(), 0.0)
        if zero[k]:
            continue
        if scaling == "group":
            centred /= group_std[k] + ADV_EPS
        elif scaling == "batch":
            centred /= batch_std + ADV_EPS
        elif scaling != "none":
            raise ValueError(f"unknown reward scaling {scaling!r}")
        norm[:, cols] = centred
    adv = np.flip(np.cumsum(np.flip(norm, 0), 0), 0)  # rewards-to-go; padding (after the end) adds zeros
    return np.where(mask, adv, 0.0), zero, group_std


def batch_advantages(batch: EpisodeGroups, supervision: str, scaling: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-step advantages of a batch by :func:`outcome_advantages` or :func:`process_advantages`.

    Returns:
        ``(advantages (T, N) float32, 0 on padding; zero_spread (K,) bool; group_std (K,))``.
    """
    if supervision == "outcome":
        adv, zero, std = outcome_advantages(batch.returns.reshape(-1, batch.group_size), scaling)
        per_step = np.where(batch.mask, adv.reshape(1, -1), 0.0)
    elif supervision == "process":
        per_step, zero, std = process_advantages(batch.rewards, batch.mask, batch.group_size, scaling)
    else:
        raise ValueError(f"unknown supervision {supervision!r}")
    return per_step.astype(np.float32), zero, std


# -- loss -------------------------------------------------------------------------------------------------
def episode_weights(lengths: torch.Tensor, loss_agg: str, max_episode_steps: int) -> torch.Tensor:
    """Weight of every step of each episode so that the loss is ``sum_steps weight * per_step_loss``.

    Args:
        lengths: ``(B,)`` episode lengths of the (mini)batch.
        loss_agg: ``grpo`` 1 / (B * L_i) (mean over episodes of the per-episode mean, DeepSeekMath eq. 3);
            ``dr_grpo`` 1 / (B * max_episode_steps) (Liu et al. 2025: a constant in place of the length);
            ``dapo`` 1 / sum_i L_i (Yu et al. 2025: token-level mean).
        max_episode_steps: The constant of ``dr_grpo``.

    Returns:
        ``(B,)`` float32 weights.
    """
    B = lengths.shape[0]
    L = lengths.to(torch.float32)
    if loss_agg == "grpo":
        return 1.0 / (B * L)
    if loss_agg == "dr_grpo":
        return torch.full_like(L, 1.0 / (B * max_episode_steps))
    if loss_agg == "dapo":
        return torch.full_like(L, 1.0 / float(L.sum()))
    raise ValueError(f"unknown loss_agg {loss_agg!r}")


def k3_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || pi_ref) per step: pi_ref/pi - log(pi_ref/pi) - 1 (DeepSeekMath eq. 4).

    The gradient flows through ``log_probs`` (pi), never detached; it is exactly 0 with zero gradient when
    pi = pi_ref, and >= 0 otherwise.
    """
    log_ratio = ref_log_probs - log_probs
    return torch.exp(log_ratio) - log_ratio - 1.0


def grpo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    beta: float,
    entropy: torch.Tensor | None = None,
    ent_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The GRPO objective (DeepSeekMath eq. 3), negated: per step ``-[min(rho A, clip(rho) A) - beta k3]``.

    Args:
        log_probs: ``(S,)`` log pi(a_t|s_t) of the current policy (with gradient), summed over action dims.
        old_log_probs: ``(S,)`` log pi_old at collection time.
        ref_log_probs: ``(S,)`` log pi_ref of the frozen reference policy.
        advantages: ``(S,)`` per-step advantages.
        weights: ``(S,)`` per-step aggregation weights (:func:`episode_weights` repeated over each episode).
        eps_low: Lower clip (ratio >= 1 - eps_low).
        eps_high: Upper clip (ratio <= 1 + eps_high).
        beta: KL penalty weight.
        entropy: ``(S,)`` policy entropy, for the optional bonus.
        ent_coef: Entropy bonus weight.

    Returns:
        (loss, metrics): ``policy_loss`` (the clipped surrogate part), ``kl_ref`` (plain mean k3),
        ``clip_fraction`` (share of steps whose ratio is outside the clip range).
    """
    ratio = torch.exp(log_probs - old_log_probs)
    surrogate = torch.min(ratio * advantages, torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages)
    kl = k3_kl(log_probs, ref_log_probs)
    policy_loss = -(weights * surrogate).sum()
    loss = policy_loss + beta * (weights * kl).sum()
    metrics: dict[str, torch.Tensor] = {}
    if entropy is not None:
        ent = (weights * entropy).sum() / weights.sum()
        loss = loss - ent_coef * (weights * entropy).sum()
        metrics["entropy"] = ent.detach()
    with torch.no_grad():
        metrics["policy_loss"] = policy_loss.detach()
        metrics["kl_ref"] = kl.mean()
        metrics["clip_fraction"] = ((ratio < 1.0 - eps_low) | (ratio > 1.0 + eps_high)).float().mean()
    return loss, metrics


def grpo_loss_derivatives(
    log_probs: np.ndarray,
    old_log_probs: np.ndarray,
    ref_log_probs: np.ndarray,
    advantages: np.ndarray,
    weights: np.ndarray,
    entropy: np.ndarray,
    *,
    eps_low: float,
    eps_high: float,
    beta: float,
    ent_coef: float,
) -> tuple[np.ndarray, np.ndarray | None, dict[str, float]]:
    """:func:`grpo_loss` with its derivatives by hand: ``(d loss / d log_probs (S,), d loss / d entropy (S,) or None
    when ``ent_coef`` is 0, metrics)``, the metrics of :func:`grpo_loss` as floats (``policy_loss`` the weighted sum).

    Per step, with ``rho = exp(log_probs - old_log_probs)``: the surrogate ``min(rho A, clip(rho) A)`` has derivative
    ``rho A`` where the unclipped term is the smaller or ``rho`` is inside the clip range (where both terms are equal
    autograd gives each half of it; outside the range the clipped term's derivative is 0), else 0; the k3 penalty
    ``exp(ref - logp) - (ref - logp) - 1`` has ``1 - exp(ref - logp)``.
    """
    ratio = np.exp(log_probs - old_log_probs)
    lo, hi = 1.0 - eps_low, 1.0 + eps_high
    unclipped = ratio * advantages
    clipped = np.clip(ratio, lo, hi) * advantages
    inside = (ratio >= lo) & (ratio <= hi)
    surrogate = np.minimum(unclipped, clipped)
    log_ref_ratio = ref_log_probs - log_probs
    ref_ratio = np.exp(log_ref_ratio)
    kl = ref_ratio - log_ref_ratio - 1.0
    d_surrogate = np.where((unclipped < clipped) | inside, unclipped, 0.0)
    dlogp = (weights * (beta * (1.0 - ref_ratio) - d_surrogate)).astype(np.float32, copy=False)
    dent = None if ent_coef == 0.0 else (-ent_coef * weights).astype(np.float32, copy=False)
    policy_loss = -float((weights * surrogate).sum())
    loss = policy_loss + beta * float((weights * kl).sum()) - ent_coef * float((weights * entropy).sum())
    if not math.isfinite(loss):
        raise Diverged(f"non-finite loss {loss}")
    metrics = {
        "policy_loss": policy_loss,
        "kl_ref": float(kl.mean()),
        "clip_fraction": float(((ratio < lo) | (ratio > hi)).mean()),
        "entropy": float((weights * entropy).sum() / weights.sum()),
    }
    return dlogp, dent, metrics


# -- training ---------------------------------------------------------------------------------------------
class GRPOTrainer:
    """Collect K groups of G episodes, compute group-relative advantages, take clipped steps with a KL penalty."""

    def __init__(self, ctx: TrialContext, cfg: GRPOConfig):
        self.ctx, self.cfg = ctx, cfg
        max_len, cap = episode_cap(ctx, cfg.max_episode_steps)
        envs = ctx.make_envs(cfg.batch_episodes, vectorization=cfg.vectorization, max_episode_steps=cap)
        self.policy = grpo_policy(envs.single_observation_space, envs.single_action_space, cfg)
        self.reference = copy.deepcopy(self.policy).requires_grad_(False)
        self.stepper = GradientStepper(list(self.policy.parameters()), cfg.learning_rate, cfg.max_grad_norm, cfg.adam_eps)
        self.kernel = kernel_for(self.policy, self.stepper.flat)  # hand-derived inference and (hand_derived) update
        self.collector = EpisodeGroupCollector(
            ctx, envs, self.policy, cfg.group_size, max_len, cap, kernel=self.kernel, storage=cfg.rollout_storage
        )
        self.by_hand = self.kernel is not None and cfg.hand_derived
        """Whether the update takes its derivatives by hand (else autograd on the same flat parameters)."""
        self.clock: Any = attach_clock(ctx, self)
        self.collector.clock = self.clock
        self.n_updates = 0

    def train(self) -> ActorCritic:
        ctx = self.ctx
        while ctx.steps < ctx.total_timesteps:
            # collect rollout (stops at the budget; only complete groups are kept)
            with ctx.phase("rollout"):
                batch, collect_metrics = self.collect()
            if batch is None:
                break  # the budget ran out before any group finished: nothing left to train on
            progress = ctx.steps / ctx.total_timesteps
            # group-relative advantages
            with ctx.phase("advantages"):
                advantages = batch_advantages(batch, self.cfg.supervision, self.cfg.reward_scaling)
            # update
            with ctx.phase("update"):
                metrics = self.update(batch, advantages, progress=progress)
            metrics.update(collect_metrics)
            ctx.record_update(metrics)
            ctx.after_iteration(self.policy)
        return self.policy

    def _collect_complete(self) -> tuple[EpisodeGroups | None, int, int]:
        """One collection within the budget: (its complete groups or None, env steps executed, steps used)."""
        raw = self.collector.collect(self.ctx.remaining_steps)
        used = int(raw.mask.sum())
        return raw.complete_groups(), raw.env_steps, used

    def collect(self) -> tuple[EpisodeGroups | None, dict[str, float]]:
        """One batch of K groups; under ``dapo``, zero-spread groups are replaced from extra batches (DAPO's
        dynamic sampling, Yu et al. 2025 Algorithm 1), at most ``max_resample_rounds`` of them. When the budget
        runs out, the batch holds only the groups completed within it (None: no group completed).

        Returns:
            (batch, metrics): ``resampled_groups`` (groups drawn to replace zero-spread ones) and
            ``padding_frac`` (share of executed sub-env steps that were masked out, all rounds together).
        """
        cfg = self.cfg
        batch, env_steps, used = self._collect_complete()
        if batch is None:
            return None, {}
        kept: list[EpisodeGroups] = []
        n_kept, resampled, rounds = 0, 0, 0
        while cfg.loss_agg == "dapo":
            zero = self.zero_spread(batch)
            if rounds == 0 and not zero.any():
                break  # nothing to replace: train on the batch as collected
            good = np.flatnonzero(~zero)[: cfg.n_groups - n_kept]
            if good.size:
                kept.append(batch.select_groups(good))
                n_kept += good.size
            if n_kept == cfg.n_groups:
                break
            if rounds == cfg.max_resample_rounds or self.ctx.remaining_steps == 0:
                # cap (or budget) reached: top up with zero-spread groups (advantage 0), up to K groups
                kept.append(batch.select_groups(np.flatnonzero(zero)[: cfg.n_groups - n_kept]))
                break
            rounds += 1
            resampled += cfg.n_groups - n_kept
            nxt, more_env_steps, more_used = self._collect_complete()
            env_steps += more_env_steps
            used += more_used
            if nxt is None:
                kept.append(batch.select_groups(np.flatnonzero(zero)[: cfg.n_groups - n_kept]))
                break
            batch = nxt
        if kept:
            batch = EpisodeGroups.concat(kept)
        metrics = {"resampled_groups": float(resampled), "padding_frac": 1.0 - used / env_steps}
        return batch, metrics

    def zero_spread(self, batch: EpisodeGroups) -> np.ndarray:
        """``(K,)`` True for groups whose rewards do not vary (their advantages are all 0)."""
        return batch_advantages(batch, self.cfg.supervision, self.cfg.reward_scaling)[1]

    def autograd_slice(
        self, obs: torch.Tensor, actions: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor,
        adv: torch.Tensor, weights: torch.Tensor,
    ) -> dict[str, float]:  # fmt: skip
        """Add one slice's gradient of :func:`grpo_loss` by autograd (versions up to 1.2.0; image observations);
        return its metrics."""
        cfg, clock = self.cfg, self.clock
        logp, entropy, _, _ = self.policy.evaluate_actions(obs, actions)
        loss, metrics = grpo_loss(
            logp, old_logp, ref_logp, adv, weights, eps_low=cfg.eps_low, eps_high=cfg.eps_high, beta=cfg.beta,
            entropy=entropy, ent_coef=cfg.ent_coef,
        )  # fmt: skip
        if clock is not None:
            clock.lap("forward", int(obs.shape[0]))
        self.stepper.backward(loss)
        if clock is not None:
            clock.lap("backward")
        return {k: float(v) for k, v in metrics.items()}

    def hand_derived_slice(
        self, obs: torch.Tensor, actions: torch.Tensor, old_logp: np.ndarray, ref_logp: np.ndarray,
        adv: np.ndarray, weights: np.ndarray, index: int,
    ) -> dict[str, float]:  # fmt: skip
        """The same by hand: the kernel's forward, :func:`grpo_loss_derivatives`, the kernel's backward (the first
        slice of a minibatch sets the gradients, the others add to them)."""
        cfg, clock, kernel = self.cfg, self.clock, self.kernel
        assert kernel is not None
        logp, entropy, _, state = kernel.evaluate(obs, actions, need_values=False)
        dlogp, dent, metrics = grpo_loss_derivatives(
            logp, old_logp, ref_logp, adv, weights, entropy, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
            beta=cfg.beta, ent_coef=cfg.ent_coef,
        )  # fmt: skip
        if clock is not None:
            clock.lap("forward", int(obs.shape[0]))
        kernel.backward(state, dlogp, dent, None, accumulate=index > 0)
        if clock is not None:
            clock.lap("backward")
        return metrics

    @in_kernel_mode(lambda self: self.by_hand)
    def update(
        self, batch: EpisodeGroups, advantages: tuple[np.ndarray, np.ndarray, np.ndarray], progress: float
    ) -> dict[str, float]:
        """Clipped steps with the KL penalty on ``batch``; ``advantages`` = :func:`batch_advantages` of it."""
        cfg, policy = self.cfg, self.policy
        if cfg.ref_update_interval and self.n_updates % cfg.ref_update_interval == 0 and self.n_updates > 0:
            self.reference.load_state_dict(policy.state_dict())
        adv, zero, group_std = advantages
        # flatten the real steps episode-major: steps of episode 0, then episode 1, ...
        n_idx, t_idx = np.nonzero(batch.mask.T)
        t_flat, n_flat = torch.from_numpy(t_idx), torch.from_numpy(n_idx)
        lengths = torch.from_numpy(batch.lengths)
        offsets = torch.cumsum(lengths, 0) - lengths
        actions = batch.actions[t_flat, n_flat]
        old_logp = torch.from_numpy(batch.log_probs[t_idx, n_idx])
        t_adv = torch.from_numpy(adv[t_idx, n_idx])
        ref_logp = torch.empty_like(old_logp)
        chunk = REF_CHUNK_IMAGES if policy.image else REF_CHUNK
        with torch.no_grad():
            for s in range(0, len(t_idx), chunk):
                sl = slice(s, s + chunk)
                params = self.reference.policy_params(batch.obs[t_flat[sl], n_flat[sl]])
                ref_logp[sl] = self.reference.head.log_prob(params, self.reference.log_std, actions[sl])
        old_np, ref_np, adv_np = old_logp.numpy(), ref_logp.numpy(), t_adv.numpy()
        lr = self.stepper.begin_update(progress)
        N = batch.lengths.shape[0]
        sums: dict[str, float] = {}
        count = 0
        for _epoch in range(cfg.n_epochs):
            for eps in torch.tensor_split(torch.randperm(N), cfg.n_minibatches):
                L = lengths[eps]
                sel = torch.cat([torch.arange(int(o), int(o) + int(n)) for o, n in zip(offsets[eps], L, strict=True)])
                weights = torch.repeat_interleave(episode_weights(L, cfg.loss_agg, self.collector.max_len), L)
                w_np = weights.numpy()
                S = int(sel.shape[0])
                self.stepper.zero_grad()
                # grad_accumulation: the minibatch's steps in k slices; the aggregation weights are the minibatch's,
                # so the slices' losses sum to its loss and their gradients to its gradient
                parts = [(0, S)] if cfg.grad_accumulation == 1 else micro_batches(S, cfg.grad_accumulation)
                w_total = float(weights.sum())
                m: dict[str, float] = {}
                for i, (lo, hi) in enumerate(parts):
                    ps = sel[lo:hi]
                    obs = batch.obs[t_flat[ps], n_flat[ps]]
                    part_m = (
                        self.hand_derived_slice(obs, actions[ps], old_np[ps], ref_np[ps], adv_np[ps], w_np[lo:hi], i)
                        if self.by_hand
                        else self.autograd_slice(obs, actions[ps], old_logp[ps], ref_logp[ps], t_adv[ps], weights[lo:hi])
                    )
                    # policy_loss is a weighted sum (adds up), entropy a weighted mean, kl_ref / clip_fraction means
                    shares = {"policy_loss": 1.0, "entropy": float(weights[lo:hi].sum()) / w_total}
                    for key, part_v in part_m.items():
                        m[key] = m.get(key, 0.0) + part_v * shares.get(key, (hi - lo) / S)
                self.stepper.apply()
                if self.clock is not None:
                    self.clock.lap("optimizer")
                for key, value in m.items():
                    sums[key] = sums.get(key, 0.0) + value
                count += 1
        self.stepper.check_finite()
        self.n_updates += 1
        out = {k: v / count for k, v in sums.items()}
        out.update(self.stepper.end_update())
        returns = batch.returns
        out.update(
            learning_rate=lr,
            zero_spread_frac=float(zero.mean()),
            mean_group_std=float(group_std.mean()),
            ep_return_mean=float(returns.mean()),
            ep_length_mean=float(batch.lengths.mean()),
            truncated_frac=float(batch.truncated.mean()),
        )
        return out


@register(
    "grpo",
    version="1.3.0",
    summary="Group Relative Policy Optimization: G same-seed episodes per group, group-normalised returns, no critic",
    reference=(
        "Shao et al. 2024, arXiv 2402.03300 (DeepSeekMath); episodic adaptation as in stable-baselines3-contrib issue 301"
    ),
    action_spaces=("discrete", "box"),
    observations=("vector", "image"),
    config=GRPOConfig,
    hyperparams="grpo.toml",
    notes=(
        "DeepSeekMath's GRPO, not the algorithms some blog posts call 'GRPO' (see grpo-pairwise, ppo-rlvr-prm). "
        "Variants: loss_agg=dr_grpo (Liu et al. 2025, arXiv 2503.20783), loss_agg=dapo (Yu et al. 2025, "
        "arXiv 2503.14476; set eps_high=0.28 for its clip-higher). ctx.steps counts the transitions of the "
        "training episodes only (not the masked steps of sub-envs waiting for the rest of their batch)."
    ),
    policy_factory=grpo_policy,
)
def train_grpo(ctx: Any, cfg: GRPOConfig) -> Any:
    return GRPOTrainer(ctx, cfg).train()
