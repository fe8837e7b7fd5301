"""Episodes collected in groups, for the critic-free algorithms (``grpo``, ``grpo-pairwise``).

:class:`EpisodeGroupCollector` steps ``K * G`` sub-envs, group ``k`` reset with one seed, until every sub-env has
finished its first episode, with one policy call per step for all of them; :class:`EpisodeGroups` holds the episodes
time-major with padding. ``grpo`` uses groups of G same-seed episodes (its "prompts"); ``grpo-pairwise`` groups of one.

Step accounting: with SAME_STEP autoreset a sub-env that finished early keeps running a new episode whose transitions
are masked out (never trained on, never recorded); ``ctx.steps`` counts only the transitions of the recorded episodes.
Budget: collection stops once the trial's budget is spent (at most ``n_envs - 1`` steps past it); the groups whose
episodes all finished by then are what the update trains on (:meth:`EpisodeGroups.complete_groups`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from suite.accel.mlp import PolicyKernel, in_kernel_mode
from suite.algorithms.core import NULL_CLOCK, Buffer, policy_act
from suite.algorithms.networks import ActorCritic
from suite.envs import episode_limit, finished_episodes
from suite.errors import UserError

if TYPE_CHECKING:
    from suite.trial import TrialContext

MAX_BUFFER_BYTES = 4 * 2**30
"""Refuse rollout buffers larger than this (a clear error instead of an out-of-memory kill)."""


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
            kernel: the policy's hand-derived inference (:mod:`suite.accel.mlp`), or None (module calls).
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
        self.device = None if policy.device.type == "cpu" else policy.device
        """The policy's device when it is not the CPU (the buffers stay on the CPU)."""
        self.clock: Any = NULL_CLOCK
        """The lap clock (``suite profile speed``; :data:`~suite.algorithms.core.NULL_CLOCK` otherwise)."""

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
                actions, logp, _ = policy_act(policy, x, self.device)
            clock.lap("inference", N)
            env_actions = policy.head.to_env(actions.numpy())
            if self.step_active_only:
                obs, rewards, terminated, trunc, info = envs.step_active(env_actions, active)
            else:
                obs, rewards, terminated, trunc, info = envs.step(env_actions)
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
            clock.lap("storage")
        ctx.steps = step0 + used
        lengths[active] = t  # unfinished (budget spent): the steps taken so far
        return EpisodeGroups(
            self.buf_obs.t[:t], self.buf_actions.t[:t], self.buf_logp.np[:t], self.buf_rewards[:t], self.buf_mask[:t],
            lengths, truncated, seeds, G, t * N, ~active if active.any() else None,
        )  # fmt: skip
