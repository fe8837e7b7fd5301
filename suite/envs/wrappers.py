"""Wrappers: the Atari pipeline above the ALE, and the vector wrappers every :func:`suite.envs.make_vec_env` env has.

Order matters in the Atari pipeline: ``TimeLimit`` and ``RecordEpisodeStatistics`` sit below episodic life and
reward clipping, so the recorded episode is the true game with its raw score.
"""

from __future__ import annotations

from collections.abc import Sequence
from copy import deepcopy
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv, VectorWrapper
from gymnasium.wrappers import FrameStackObservation, RecordEpisodeStatistics, TimeLimit, TransformReward


class EpisodicLife(gym.Wrapper):
    """Signal ``terminated`` on every lost life, but reset the game only at its true end.

    Training-only trick of Mnih et al. 2015 (DQN), as in SB3's ``EpisodicLifeEnv``. Differences from SB3: a
    seeded reset always resets the game, so a seeded ``reset`` is reproducible. Pong has no lives
    (``ale.lives() == 0``), so there it never fires; it is kept so every Atari id gets the same pipeline.
    Known limitation (shared with SB3): if the no-op step after a lost life ends the game, that game's
    ``episode`` statistics are dropped by the reset that follows.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._ale: Any = env.unwrapped.ale  # type: ignore[attr-defined]
        self._lives = 0
        self._game_over = True

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = bool(terminated or truncated)
        lives = self._ale.lives()
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if self._game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            # Lost a life only: continue the same game with one no-op step (SB3 EpisodicLifeEnv).
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self._game_over = False
        self._lives = self._ale.lives()
        return obs, info


def _sign(reward: SupportsFloat) -> float:
    """Reward clipping to {-1, 0, +1} (Mnih et al. 2015); module-level so async workers can pickle it."""
    return float(np.sign(float(reward)))


def wrap_atari_agent_side(env: gym.Env, *, training: bool, max_episode_steps: int | None) -> gym.Env:
    """Everything above ``AtariPreprocessing``: optional cap, raw statistics, training tricks, frame stack.

    Order matters: ``TimeLimit`` and ``RecordEpisodeStatistics`` sit below episodic life and reward clipping
    so the recorded ``episode`` is the true game with its raw score (Pong: -21..21).

    Args:
        env: A preprocessed single Atari env (obs ``(84, 84)`` uint8), or a stand-in with ``unwrapped.ale``.
        training: Add episodic life and sign reward clipping.
        max_episode_steps: Optional agent-step cap (truncation).

    Returns:
        The wrapped env; obs ``(4, 84, 84)`` uint8 for a real Atari env.
    """
    if max_episode_steps is not None:
        env = TimeLimit(env, max_episode_steps)
    env = RecordEpisodeStatistics(env)
    if training:
        env = EpisodicLife(env)
        env = TransformReward(env, _sign)
    return FrameStackObservation(env, 4)


def seed_action_spaces(envs: VectorEnv, seed: int | Sequence[int | None] | None) -> None:
    """Seed the batched and single action spaces (and, for sync envs, each sub-env's) from a reset seed.

    Called by every seeded ``reset`` of a :func:`make_vec_env` env; public for callers that build their own.

    Args:
        envs: Any vector env.
        seed: An int (sub-env ``k`` gets ``seed + k``) or one seed per sub-env (the batched space uses the first).
    """
    if seed is None:
        return
    n = envs.num_envs
    seeds = [seed + k for k in range(n)] if isinstance(seed, int) else list(seed)
    if seeds[0] is not None:
        envs.action_space.seed(int(seeds[0]))
        envs.single_action_space.seed(int(seeds[0]))
    base = envs.unwrapped
    if isinstance(base, SyncVectorEnv):
        for sub, s in zip(base.envs, seeds, strict=True):
            if s is not None:
                sub.action_space.seed(int(s))


class MaskedSyncVectorEnv(SyncVectorEnv):
    """``SyncVectorEnv`` (SAME_STEP autoreset) that can also step only some of its sub-envs (:meth:`step_active`)."""

    def step_active(self, actions: Any, active: np.ndarray) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """:meth:`step` for the sub-envs where ``active`` (bool ``(n_envs,)``); the others are not stepped: their
        observation stays what it was, with reward 0, neither terminated nor truncated, and nothing in ``info``.

        For callers that ignore a sub-env once its episode ended (GRPO's episode groups): stepping it on would only
        spend env time on a discarded episode. The active sub-envs get exactly what :meth:`step` gives them.
        """
        if self.autoreset_mode != AutoresetMode.SAME_STEP:
            raise ValueError("step_active needs SAME_STEP autoreset")
        infos: dict[str, Any] = {}
        for i, action in enumerate(gym.vector.utils.iterate(self.action_space, actions)):
            if not active[i]:
                self._rewards[i] = 0.0
                self._terminations[i] = False
                self._truncations[i] = False
                continue
            (self._env_obs[i], self._rewards[i], self._terminations[i], self._truncations[i], env_info) = self.envs[i].step(
                action
            )
            if self._terminations[i] or self._truncations[i]:
                infos = self._add_info(infos, {"final_obs": self._env_obs[i], "final_info": env_info}, i)
                self._env_obs[i], env_info = self.envs[i].reset()
            infos = self._add_info(infos, env_info, i)
        self._observations = gym.vector.utils.concatenate(self.single_observation_space, self._env_obs, self._observations)
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        obs = deepcopy(self._observations) if self.copy else self._observations
        return obs, np.copy(self._rewards), np.copy(self._terminations), np.copy(self._truncations), infos


def _drop_wall_time(info: dict[str, Any]) -> dict[str, Any]:
    """Drop ``RecordEpisodeStatistics``' wall-time field (``t``) so that no log records it."""
    episode = info.get("final_info", {}).get("episode")
    if episode is not None:
        episode.pop("t", None)
        episode.pop("_t", None)
    return info


class SeededVectorEnv(VectorWrapper):
    """Outermost wrapper of every :func:`make_vec_env` env: a seeded reset also seeds the action spaces."""

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the sub-envs (see the module docstring for seeds) and seed the action spaces."""
        if isinstance(seed, np.integer):
            seed = int(seed)
        elif seed is not None and not isinstance(seed, int):
            seed = [None if s is None else int(s) for s in seed]  # Sync/Async accept plain int lists only
        out = self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]  # Sync/Async take lists
        seed_action_spaces(self, seed)
        return out

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step all sub-envs; drops ``RecordEpisodeStatistics``' wall-time field so no log records it."""
        obs, reward, terminated, truncated, info = self.env.step(actions)
        return obs, reward, terminated, truncated, _drop_wall_time(info)

    @property
    def masks_steps(self) -> bool:
        """Whether :meth:`step_active` really leaves the inactive sub-envs unstepped (sync vectorization of gymnasium
        envs); the numpy twins and async envs step all of them."""
        return isinstance(self.env, MaskedSyncVectorEnv)

    def step_active(self, actions: Any, active: np.ndarray) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step only the sub-envs where ``active`` (:meth:`MaskedSyncVectorEnv.step_active`) when the env can
        (:attr:`masks_steps`); otherwise step all of them: the active sub-envs get the same values either way."""
        if not isinstance(self.env, MaskedSyncVectorEnv):  # not masks_steps
            return self.step(actions)
        obs, reward, terminated, truncated, info = self.env.step_active(actions, active)
        return obs, reward, terminated, truncated, _drop_wall_time(info)
