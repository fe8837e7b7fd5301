"""The agent a ``sb3-*`` trial returns: an SB3 policy as the suite's ``Agent`` (and its rebuild from a saved file)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.vec_env import VecNormalize
from torch import nn

from suite.algorithms.sb3.config import FLAVOURS, policy_kwargs


class SB3Agent(nn.Module):
    """An SB3 policy as the suite's ``Agent``: ``predict`` for evaluation, ``state_dict`` for saving.

    With ``normalize`` the observation statistics of the training ``VecNormalize`` are kept as buffers
    (``obs_mean``, ``obs_var``); evaluation normalises with them and never updates them (the zoo evaluates
    the same way: ``VecNormalize`` loaded with ``training=False``).
    """

    obs_mean: torch.Tensor
    obs_var: torch.Tensor

    def __init__(self, policy: nn.Module, obs_shape: tuple[int, ...], normalize: bool, clip_obs: float = 10.0,
                 epsilon: float = 1e-8) -> None:  # fmt: skip
        super().__init__()
        self.policy = policy
        self.normalize = normalize
        self.clip_obs, self.epsilon = clip_obs, epsilon
        self._live: VecNormalize | None = None
        if normalize:
            self.register_buffer("obs_mean", torch.zeros(obs_shape, dtype=torch.float64))
            self.register_buffer("obs_var", torch.ones(obs_shape, dtype=torch.float64))

    def attach(self, vec_normalize: VecNormalize) -> None:
        """Follow a training ``VecNormalize``'s statistics (synced into the buffers before use)."""
        self._live = vec_normalize
        self.clip_obs, self.epsilon = vec_normalize.clip_obs, vec_normalize.epsilon

    def _sync(self) -> None:
        if self._live is not None:
            rms: Any = self._live.obs_rms  # a RunningMeanStd for Box observations
            self.obs_mean.copy_(torch.from_numpy(np.asarray(rms.mean, dtype=np.float64)))
            self.obs_var.copy_(torch.from_numpy(np.asarray(rms.var, dtype=np.float64)))

    def normalize_obs(self, obs: np.ndarray) -> np.ndarray:
        """SB3 ``VecNormalize.normalize_obs`` with the frozen statistics: clip((obs - mean) / sqrt(var + eps))."""
        self._sync()
        mean, var = self.obs_mean.numpy(), self.obs_var.numpy()
        return np.clip((obs - mean) / np.sqrt(var + self.epsilon), -self.clip_obs, self.clip_obs).astype(np.float32)

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Env-ready actions ``(B, *action_shape)`` for raw observations ``(B, *obs_shape)`` (SB3's own predict,
        which clips Box actions to the bounds or unsquashes them)."""
        if self.normalize:
            obs = self.normalize_obs(obs)
        actions, _ = self.policy.predict(obs, deterministic=deterministic)  # type: ignore[operator]
        return actions

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        if self.normalize:
            self._sync()
        return super().state_dict(*args, **kwargs)


def policy_factory(algo: str) -> Callable[[Any, Any, Any], SB3Agent]:
    flavour = FLAVOURS[algo]

    def build(observation_space: Any, action_space: Any, cfg: Any) -> SB3Agent:
        """Rebuild a saved ``sb3-*`` policy (SB3's policy class for ``cfg.policy`` with the config's kwargs)."""
        policy_cls = flavour.sb3_cls.policy_aliases[cfg.policy]
        kw = policy_kwargs(flavour, cfg)
        if flavour.algo in ("ppo", "a2c", "sac"):
            kw["use_sde"] = cfg.use_sde
        policy = policy_cls(observation_space, action_space, lambda _: 0.0, **kw)
        return SB3Agent(policy, observation_space.shape, cfg.normalize)

    return build
