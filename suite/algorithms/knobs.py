"""The engineering knobs of the actor-critic family: how a trial's computation is carried out, not what it computes.

They are config fields like the hyperparameters (``--set rollout_storage=torch``, ``suite profile memory --toggle
gae_chunk=64``, part of the trial key), kept apart from them in their own section (:data:`suite.config.ENGINEERING`,
:func:`suite.config.config_sections`). The memory toggles among them are document 000's claims made real code paths;
each says whether it is exact (the same numbers bit for bit) or moves results by float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from suite.algorithms.core import OBS_STORAGE_DTYPES, ROLLOUT_STORAGES, resolve_obs_storage_dtype
from suite.config import engineering


@dataclass(frozen=True)
class ActorCriticKnobs:
    """The engineering section of ``ppo``'s config (and its variants')."""

    vectorization: str = field(default="auto", metadata=engineering())
    """How envs are vectorised: auto (fastest available), sync or async."""
    rollout_storage: str = field(default="numpy", metadata=engineering())
    """Memory toggle: rollout buffers allocated and written by ``numpy`` or as ``torch`` tensors (document 000's
    "numpy trajectory cache"). Exact: the same bytes and values either way (the update reads them zero-copy)."""
    gae_chunk: int = field(default=0, metadata=engineering())
    """Memory toggle: GAE over chunks of this many steps (its temporaries are ``(chunk, n_envs)``); 0 = the whole
    rollout at once. Exact: bitwise identical advantages for every chunk size."""
    grad_accumulation: int = field(default=1, metadata=engineering())
    """Memory toggle: each minibatch step sums the gradients of this many micro-batches (slices of it) before its
    one Adam step, so activations are held for ``batch_size / k`` samples at a time. The gradient is the
    minibatch's up to float summation order (parameters agree to ~1e-6 relative after an update)."""
    obs_storage_dtype: str = field(default="auto", metadata=engineering())
    """Memory toggle: how observations are kept in the rollout. ``auto``: Atari frames once each as uint8 (a
    frame shared by consecutive stacks is stored once), vectors as float32; ``float32``: the stacked network
    inputs as float32 (SB3's layout); ``float16``: as float16 (exact for frames; rounds vector inputs, and the
    policy then acts on the rounded inputs); ``uint8``: frames kept once (image observations only)."""

    def check_knobs(self, batch_size: int) -> None:
        """Validate the knobs (called by the config's ``__post_init__``, which knows the minibatch size)."""
        if self.vectorization not in ("auto", "sync", "async"):
            raise ValueError("vectorization must be auto, sync or async")
        if self.rollout_storage not in ROLLOUT_STORAGES:
            raise ValueError(f"rollout_storage must be one of {', '.join(ROLLOUT_STORAGES)}")
        if self.obs_storage_dtype not in OBS_STORAGE_DTYPES:
            raise ValueError(f"obs_storage_dtype must be one of {', '.join(OBS_STORAGE_DTYPES)}")
        if self.gae_chunk < 0:
            raise ValueError("gae_chunk must be >= 0 (0 = the whole rollout)")
        if not 1 <= self.grad_accumulation <= batch_size:
            raise ValueError("grad_accumulation must be between 1 and batch_size")

    def check_env(self, env: Any) -> None:
        """Env-dependent checks, before anything runs (``env``: the :class:`~suite.envs.EnvSpec`)."""
        resolve_obs_storage_dtype(self.obs_storage_dtype, env.observation == "image")
