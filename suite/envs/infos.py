"""Step infos: reading finished episodes and final observations out of a vector step's ``info``, and writing that
layout (``SyncVectorEnv`` + ``RecordEpisodeStatistics``, SAME_STEP autoreset) for the numpy twins."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def episode_info(done: np.ndarray, returns: np.ndarray, lengths: np.ndarray, final_obs: np.ndarray) -> dict[str, Any]:
    """The info of a step where the sub-envs in ``done`` ended, in SyncVectorEnv + RecordEpisodeStatistics' layout
    (without the wall-time field), as :func:`finished_episodes` and :func:`final_observations` read it."""
    episode = {"r": np.where(done, returns, 0.0), "_r": done, "l": np.where(done, lengths, 0), "_l": done}
    return {
        "final_obs": final_obs,
        "_final_obs": done,
        "final_info": {"episode": episode, "_episode": done},
        "_final_info": done,
    }


def finished_episodes(info: Mapping[str, Any], n_envs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Episodes that truly ended at this step, with their raw return and length.

    A life lost under episodic life, or a clipped reward, never shows here: the numbers come from
    ``RecordEpisodeStatistics`` below those wrappers (Pong: the game score, -21..21).

    Args:
        info: The info dict of one vector ``step``.
        n_envs: Number of sub-envs.

    Returns:
        ``(mask bool (n_envs,), raw_return float64 (n_envs,), length int64 (n_envs,))``; unmasked rows are 0.
    """
    mask = np.zeros(n_envs, dtype=bool)
    returns = np.zeros(n_envs, dtype=np.float64)
    lengths = np.zeros(n_envs, dtype=np.int64)
    final_info = info.get("final_info")
    if not final_info or "_episode" not in final_info:
        return mask, returns, lengths
    mask[:] = np.asarray(final_info["_episode"], dtype=bool)
    episode = final_info["episode"]
    returns[mask] = np.asarray(episode["r"], dtype=np.float64)[mask]
    lengths[mask] = np.asarray(episode["l"], dtype=np.int64)[mask]
    return mask, returns, lengths


def final_observations(info: Mapping[str, Any], n_envs: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Last real observations of sub-envs that ended (terminated OR truncated, incl. life loss) at this step.

    Args:
        info: The info dict of one vector ``step``.
        n_envs: Number of sub-envs.

    Returns:
        ``(mask bool (n_envs,), final_obs (n_envs, *obs_shape))``; rows where ``mask`` is False are arbitrary
        (zero, or the current obs for the CartPole fast path). ``final_obs`` is None when no sub-env ended.
    """
    raw_mask = info.get("_final_obs")
    if raw_mask is None:
        return np.zeros(n_envs, dtype=bool), None
    mask = np.asarray(raw_mask, dtype=bool)
    if not mask.any():
        return mask, None
    raw = info["final_obs"]
    if isinstance(raw, np.ndarray) and raw.dtype != object:
        return mask, raw
    first = np.asarray(raw[int(np.flatnonzero(mask)[0])])
    out = np.zeros((n_envs, *first.shape), dtype=first.dtype)
    for i in np.flatnonzero(mask):
        out[i] = raw[i]
    return mask, out
