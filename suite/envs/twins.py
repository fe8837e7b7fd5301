"""Numpy twins of gymnasium vector envs: ``CartPole-v1`` and ``TextMatch-v0`` stepped for all sub-envs at once,
returning what the gymnasium vector env of the same envs returns, bit for bit (tests/test_envs.py), without a
Python env per sub-env (training, evaluation and GRPO's groups step them every step)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from suite.envs.infos import episode_info
from suite.errors import UserError
from suite.textmatch import MATCH_REWARD, MISMATCH_REWARD, TextMatchEnv


def _per_env_seeds(seed: int | Sequence[int | None] | None, n: int) -> list[int | None]:
    """SyncVectorEnv's seeding rule: an int seeds sub-env ``k`` with ``seed + k``; a list seeds each one."""
    if seed is None:
        return [None] * n
    if isinstance(seed, int | np.integer):
        return [int(seed) + k for k in range(n)]
    seeds = [None if s is None else int(s) for s in seed]
    if len(seeds) != n:
        raise ValueError(f"expected {n} seeds, got {len(seeds)}")
    return seeds


def _batch_of(env: VectorEnv, ref: gym.Env, n_envs: int) -> None:
    """Give ``env`` what ``SyncVectorEnv`` of ``n_envs`` copies of ``ref`` has: its single and batched spaces, and
    SAME_STEP autoreset metadata."""
    env.num_envs = n_envs
    env.single_observation_space = ref.observation_space
    env.single_action_space = ref.action_space
    env.observation_space = gym.vector.utils.batch_space(ref.observation_space, n_envs)
    env.action_space = gym.vector.utils.batch_space(ref.action_space, n_envs)
    env.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
    env.render_mode = None


class SeededCartPole(VectorEnv):
    """``n`` gymnasium ``CartPole-v1`` envs (``CartPoleEnv`` + ``TimeLimit`` + ``RecordEpisodeStatistics``) stepped
    together in numpy with SAME_STEP autoreset; the info layout of ``SyncVectorEnv`` + ``RecordEpisodeStatistics``
    (without the wall-time field), except that ``info["final_obs"]`` is a float32 ``(n_envs, 4)`` array (read it
    through :func:`final_observations`).

    Two seedings, each reproducing a gymnasium vector env bit for bit (same float64 dynamics, same draws; tested):

    * ``per_env_seeds=True`` (``vectorization="sync"``): each sub-env has its own generator seeded like the single
      env's (``reset(seed=s)`` seeds sub-env ``k`` with ``s + k``, or takes a list) and draws its own resets: what
      ``SyncVectorEnv`` of ``gym.make("CartPole-v1")`` returns (evaluation, GRPO's same-seed groups), without a Python
      env per sub-env;
    * ``per_env_seeds=False`` (``"auto"``): one generator for all, as gymnasium's ``CartPoleVectorEnv`` (its
      ``vector_entry_point``) draws it, with its NEXT_STEP autoreset turned into SAME_STEP (the ended envs are
      re-drawn within the reset bounds at the step they end); an int seed only.
    """

    def __init__(self, n_envs: int, max_episode_steps: int, per_env_seeds: bool = True):
        from gymnasium.envs.classic_control.cartpole import CartPoleEnv

        ref = CartPoleEnv()  # the physics constants, read from the real env rather than copied
        self.per_env_seeds = per_env_seeds
        self._rng: np.random.Generator | None = None
        self.max_episode_steps = max_episode_steps
        _batch_of(self, ref, n_envs)
        self._rngs: list[np.random.Generator | None] = [None] * n_envs
        self.state = np.zeros((n_envs, 4), dtype=np.float64)
        self._elapsed = np.zeros(n_envs, dtype=np.int64)
        """Steps since each env's reset: its episode length, and its return (1 per step)."""
        self._consts = (
            ref.force_mag, ref.polemass_length, ref.total_mass, ref.gravity, ref.length, ref.masspole, ref.tau,
            ref.x_threshold, ref.theta_threshold_radians, ref.kinematics_integrator == "euler",
        )  # fmt: skip

    def _reset_one(self, k: int, seed: int | None) -> None:
        rng = self._rngs[k]
        if seed is not None or rng is None:
            rng, _ = gym.utils.seeding.np_random(seed)
            self._rngs[k] = rng
        self.state[k] = rng.uniform(low=-0.05, high=0.05, size=(4,))  # CartPoleEnv.reset
        self._elapsed[k] = 0

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if options:
            raise ValueError("SeededCartPole takes no reset options")
        if self.per_env_seeds:
            for k, s in enumerate(_per_env_seeds(seed, self.num_envs)):
                self._reset_one(k, s)
            return self.state.astype(np.float32), {}
        if seed is not None and not isinstance(seed, int | np.integer):
            raise UserError(
                "CartPole-v1 with vectorization='auto' takes an int reset seed only; "
                "use vectorization='sync' for per-env seed lists"
            )
        if seed is not None or self._rng is None:
            self._rng, _ = gym.utils.seeding.np_random(None if seed is None else int(seed))
        # CartPoleVectorEnv.reset: one (4, n) draw
        self.state = np.ascontiguousarray(self._rng.uniform(low=-0.05, high=0.05, size=(4, self.num_envs)).T)
        self._elapsed[:] = 0
        return self.state.astype(np.float32), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        a = np.asarray(actions)
        acts = a.tolist() if a.shape == (self.num_envs,) else None
        if acts is None or min(acts) < 0 or max(acts) > 1:
            raise ValueError(f"CartPole actions must be {self.num_envs} values in {{0, 1}}, got {actions!r}")
        # CartPoleEnv.step, term for term, per env in Python floats (IEEE float64, the same operations in the same
        # order as the env's numpy scalars: bit for bit, tested): for a handful of envs, cheaper than some 35 numpy
        # calls on tiny arrays. cos and sin stay numpy's (the env's own functions, one call each for all envs).
        force_mag, pml, total_mass, gravity, length, masspole, tau, x_max, theta_max, euler = self._consts
        angles = self.state[:, 2]
        cos_l, sin_l = np.cos(angles).tolist(), np.sin(angles).tolist()
        rows: list[tuple[float, float, float, float]] = []
        ended: list[bool] = []
        for act, (x, x_dot, theta, theta_dot), costheta, sintheta in zip(acts, self.state.tolist(), cos_l, sin_l, strict=True):
            force = force_mag if act == 1 else -force_mag
            temp = (force + pml * (theta_dot * theta_dot) * sintheta) / total_mass
            thetaacc = (gravity * sintheta - costheta * temp) / (
                length * (4.0 / 3.0 - masspole * (costheta * costheta) / total_mass)
            )
            xacc = temp - pml * thetaacc * costheta / total_mass
            if euler:
                x = x + tau * x_dot
                x_dot = x_dot + tau * xacc
                theta = theta + tau * theta_dot
                theta_dot = theta_dot + tau * thetaacc
            else:  # semi-implicit euler
                x_dot = x_dot + tau * xacc
                x = x + tau * x_dot
                theta_dot = theta_dot + tau * thetaacc
                theta = theta + tau * theta_dot
            rows.append((x, x_dot, theta, theta_dot))
            ended.append(x < -x_max or x > x_max or theta < -theta_max or theta > theta_max)
        self.state = np.array(rows, dtype=np.float64)
        terminated = np.array(ended, dtype=bool)
        self._elapsed += 1  # the episode's length and (1 per step) its return
        truncated = self._elapsed >= self.max_episode_steps  # TimeLimit
        obs = self.state.astype(np.float32)
        # SyncVectorEnv's rewards are float64, CartPoleVectorEnv's float32 (1.0 either way)
        rewards = np.ones(self.num_envs, dtype=np.float64 if self.per_env_seeds else np.float32)
        done = terminated | truncated
        info: dict[str, Any] = {}
        if done.any():
            info = episode_info(done, self._elapsed.astype(np.float64), self._elapsed.copy(), obs.copy())
            idx = np.flatnonzero(done)
            if self.per_env_seeds:
                for k in idx:
                    self._reset_one(int(k), None)
            else:
                assert self._rng is not None
                self.state[idx] = self._rng.uniform(low=-0.05, high=0.05, size=(4, idx.size)).T
                self._elapsed[idx] = 0
            obs[idx] = self.state[idx].astype(np.float32)
        return obs, rewards, terminated, truncated, info


class VectorTextMatch(VectorEnv):
    """``n`` ``TextMatch-v0`` envs (+ ``RecordEpisodeStatistics``, optional ``TimeLimit``) in numpy: what
    ``SyncVectorEnv`` of them returns, values and info layout (incl. ``info["text"]``), without a Python env per
    sub-env (tested against it)."""

    def __init__(self, n_envs: int, language: str, target: str, max_episode_steps: int | None):
        ref = TextMatchEnv(language, target)
        self.target, self.charset = ref.target, ref.charset
        self.match, self.mismatch = MATCH_REWARD, MISMATCH_REWARD
        self.limit = len(ref.target) if max_episode_steps is None else min(max_episode_steps, len(ref.target))
        self._codes = np.array([ref.charset.index(ch) for ch in ref.target], dtype=np.int64)
        _batch_of(self, ref, n_envs)
        self._codes_l: list[int] = self._codes.tolist()
        # per-env state in Python lists: a step is a few operations per env, cheaper in Python than as numpy calls
        self._pos = [0] * n_envs
        self._text = [""] * n_envs
        self._returns = [0.0] * n_envs

    def _obs(self) -> np.ndarray:
        n = len(self.target)
        return np.array([p / n for p in self._pos], dtype=np.float32).reshape(-1, 1)  # (pos / len) in float64, cast

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        _per_env_seeds(seed, self.num_envs)  # validates; the env is deterministic
        self._pos = [0] * self.num_envs
        self._text = [""] * self.num_envs
        self._returns = [0.0] * self.num_envs
        texts = np.array(self._text, dtype=object)
        return self._obs(), {"text": texts, "_text": np.ones(self.num_envs, dtype=bool)}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        a = np.asarray(actions)
        n_chars = len(self.charset)
        acts = a.tolist() if a.shape == (self.num_envs,) else None
        if acts is None or not all(0 <= k < n_chars for k in acts):
            raise ValueError(f"action {actions!r} outside Discrete({n_chars}) x {self.num_envs}")
        codes, charset, text, pos, returns = self._codes_l, self.charset, self._text, self._pos, self._returns
        n, limit, match, mismatch = len(self.target), self.limit, self.match, self.mismatch
        rewards_l, term_l, trunc_l = [], [], []
        for k, act in enumerate(acts):
            p = pos[k]
            r = match if act == codes[p] else mismatch
            text[k] += charset[int(act)]
            pos[k] = p = p + 1
            returns[k] += r
            rewards_l.append(r)
            term_l.append(p == n)
            trunc_l.append(p >= limit and p != n)
        rewards = np.array(rewards_l, dtype=np.float64)
        terminated = np.array(term_l, dtype=bool)
        truncated = np.array(trunc_l, dtype=bool)
        done = terminated | truncated
        obs = self._obs()
        texts = np.array(text, dtype=object)
        info: dict[str, Any] = {"text": texts, "_text": np.ones(self.num_envs, dtype=bool)}
        if done.any():
            final = episode_info(done, np.array(returns, dtype=np.float64), np.array(pos, dtype=np.int64), obs.copy())
            final["final_info"]["text"] = np.array([t if d else None for t, d in zip(texts, done, strict=True)], dtype=object)
            final["final_info"]["_text"] = done
            info.update(final)
            for k in np.flatnonzero(done).tolist():
                pos[k], returns[k], text[k] = 0, 0.0, ""
            obs = self._obs()
            info["text"] = np.array(text, dtype=object)
        return obs, rewards, terminated, truncated, info
