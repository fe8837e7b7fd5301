"""Building envs: one fully wrapped sub-env (:func:`make_single_env`) and the vector env every trial steps
(:func:`make_vec_env`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, VectorEnv
from gymnasium.wrappers import AtariPreprocessing, RecordEpisodeStatistics

from suite.envs.specs import TEXTMATCH_ID, episode_limit, get_env_spec, resolve_env_kwargs
from suite.envs.twins import SeededCartPole, VectorTextMatch
from suite.envs.wrappers import MaskedSyncVectorEnv, SeededVectorEnv, wrap_atari_agent_side
from suite.errors import UserError

VECTORIZATIONS = ("auto", "sync", "async")
"""Allowed values of ``make_vec_env(vectorization=...)``."""

# "auto" never picks async: measured, no family stepped consistently faster async than sync (the inter-process
# traffic costs more than the env, and worker processes compete with the learner for the cores; docs/design.md).
_AUTO_ASYNC_FAMILIES: frozenset[str] = frozenset()


def make_single_env(env_id: str, env_kwargs: Mapping[str, Any], training: bool, max_episode_steps: int | None) -> gym.Env:
    """Build one fully wrapped sub-env (used by the vector envs; kwargs must already be resolved).

    Args:
        env_id: A supported id.
        env_kwargs: Output of :func:`resolve_env_kwargs`.
        training: Atari only: episodic life and reward clipping.
        max_episode_steps: Optional agent-step cap tighter than the env's own (truncation).
    """
    spec = get_env_spec(env_id)
    if spec.family == "atari":
        # v5 would skip 4 frames itself; AtariPreprocessing skips, so the ALE must not (published.md pitfall:
        # skipping in both gives 16). repeat_action_probability keeps v5's 0.25 (Machado et al. 2018).
        # obs_type="grayscale": AtariPreprocessing reads the screen from the ALE itself, so an RGB copy per
        # frame is wasted work.
        env = gym.make(env_id, frameskip=1, obs_type="grayscale")
        env = AtariPreprocessing(
            env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True, terminal_on_life_loss=False
        )
        return wrap_atari_agent_side(env, training=training, max_episode_steps=max_episode_steps)
    # gym.make puts TimeLimit(max_episode_steps) below RecordEpisodeStatistics, so capped episodes are recorded.
    env = gym.make(env_id, max_episode_steps=max_episode_steps, **env_kwargs)
    return RecordEpisodeStatistics(env)


def make_vec_env(
    env_id: str,
    n_envs: int,
    *,
    training: bool = True,
    env_kwargs: Mapping[str, Any] | None = None,
    vectorization: str = "auto",
    max_episode_steps: int | None = None,
) -> SeededVectorEnv:
    """Build ``n_envs`` copies of ``env_id`` as one vector env with SAME_STEP autoreset.

    Args:
        env_id: A supported id (:func:`list_envs`).
        n_envs: Number of sub-envs (>= 1).
        training: False for evaluation envs: Atari then has raw rewards and no episodic life.
        env_kwargs: Env kwargs (``TextMatch-v0`` only), merged over the defaults.
        vectorization: ``"sync"`` (one process), ``"async"`` (one process per sub-env) or ``"auto"``
            (CartPole: gymnasium's numpy vector env, int seeds only; all others: sync, see ``_AUTO_ASYNC_FAMILIES``).
            CartPole and TextMatch get numpy twins of the gymnasium env named (:class:`SeededCartPole`,
            :class:`VectorTextMatch`).
        max_episode_steps: Optional per-episode agent-step cap; episodes hitting it end as truncated. Values
            above the env's own limit change nothing.

    Returns:
        A vector env; obs ``(n_envs, *single_obs_shape)``, rewards float ``(n_envs,)``, terminated/truncated
        bool ``(n_envs,)``. See the module docstring for the seeding and info contract.

    Raises:
        UserError: unknown id or kwargs, bad ``n_envs``, ``vectorization`` or ``max_episode_steps``.
    """
    spec = get_env_spec(env_id)
    kwargs = resolve_env_kwargs(env_id, env_kwargs)
    if isinstance(n_envs, bool) or not isinstance(n_envs, int | np.integer) or n_envs < 1:
        raise UserError(f"n_envs must be a positive int, got {n_envs!r}")
    if vectorization not in VECTORIZATIONS:
        raise UserError(f"unknown vectorization {vectorization!r}; allowed: {', '.join(VECTORIZATIONS)}")
    if max_episode_steps is not None and (
        isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int | np.integer) or max_episode_steps < 1
    ):
        raise UserError(f"max_episode_steps must be a positive int or None, got {max_episode_steps!r}")
    limit = episode_limit(env_id, kwargs)
    cap = None if max_episode_steps is None or max_episode_steps >= limit else int(max_episode_steps)
    n_envs = int(n_envs)

    # Numpy twins of gymnasium's vector envs: the same values bit for bit (tests/test_envs.py), no Python env per
    # sub-env (training, evaluation and GRPO's groups step them every step).
    if env_id == "CartPole-v1" and vectorization in ("auto", "sync"):
        return SeededVectorEnv(SeededCartPole(n_envs, cap or spec.max_episode_steps, per_env_seeds=vectorization == "sync"))
    if env_id == TEXTMATCH_ID and vectorization in ("sync", "auto"):
        return SeededVectorEnv(VectorTextMatch(n_envs, kwargs["language"], kwargs["target"], cap))

    env_fns: list[Callable[[], gym.Env]] = [
        functools.partial(make_single_env, env_id, kwargs, training, cap) for _ in range(n_envs)
    ]
    use_async = vectorization == "async" or (vectorization == "auto" and spec.family in _AUTO_ASYNC_FAMILIES)
    if use_async:
        envs: VectorEnv = AsyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
    else:
        envs = MaskedSyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
    return SeededVectorEnv(envs)
