"""The suite's environment layer: every trial gets its (vector) envs from here.

Users name an env id and, for ``TextMatch-v0``, a few kwargs; they never assemble wrappers. Besides the five
built-in ids, any registered gymnasium id works: its :class:`EnvSpec` is inferred (:func:`get_env_spec`), or
registered by a plugin (:func:`register_env_spec`).

Every vector env returned by :func:`make_vec_env` has the same contract, which the rollout core relies on:

* ``reset(seed=int)`` seeds sub-env ``k`` with ``seed + k``; ``reset(seed=[s0, s1, ...])`` seeds each sub-env
  explicitly (``vectorization="sync"``/``"async"``; CartPole's ``auto`` env takes int seeds only). Every seeded
  reset also seeds the action spaces (:func:`seed_action_spaces`), so ``envs.action_space.sample()`` is
  reproducible.
* SAME_STEP autoreset (https://farama.org/Vector-Autoreset-Mode): when sub-env ``i`` ends at a step, row ``i``
  of the returned observation is already the first observation of the next episode, and
  :func:`final_observations` gives the last real observation (for time-limit bootstrapping).
* :func:`finished_episodes` reports the RAW score and length of episodes that truly ended at this step,
  recorded by ``RecordEpisodeStatistics`` innermost on each sub-env (below reward clipping and episodic life).

Modules: :mod:`~suite.envs.specs` (the env spec registry, kwargs), :mod:`~suite.envs.factory` (building envs),
:mod:`~suite.envs.wrappers` (the Atari pipeline, the vector wrappers), :mod:`~suite.envs.twins` (numpy twins of
gymnasium vector envs), :mod:`~suite.envs.infos` (reading step infos), :mod:`~suite.envs.metrics` (per-env
trial-end metrics). The names below are re-exported here, the import path for everything outside the package.
"""

from suite.envs.factory import VECTORIZATIONS, make_single_env, make_vec_env
from suite.envs.infos import final_observations, finished_episodes
from suite.envs.specs import (
    FAMILIES,
    TEXTMATCH_ID,
    DuplicateEnvSpecError,
    EnvSpec,
    env_label,
    episode_limit,
    get_env_spec,
    list_envs,
    register_env_spec,
    resolve_env_kwargs,
    restore_env_specs,
    snapshot_env_specs,
)
from suite.envs.twins import SeededCartPole, VectorTextMatch
from suite.envs.wrappers import (
    EpisodicLife,
    MaskedSyncVectorEnv,
    SeededVectorEnv,
    seed_action_spaces,
    wrap_atari_agent_side,
)

__all__ = [
    "FAMILIES", "TEXTMATCH_ID", "VECTORIZATIONS", "DuplicateEnvSpecError", "EnvSpec", "EpisodicLife",
    "MaskedSyncVectorEnv", "SeededCartPole", "SeededVectorEnv", "VectorTextMatch", "env_label", "episode_limit",
    "final_observations", "finished_episodes", "get_env_spec", "list_envs", "make_single_env", "make_vec_env",
    "register_env_spec", "resolve_env_kwargs", "restore_env_specs", "seed_action_spaces", "snapshot_env_specs",
    "wrap_atari_agent_side",
]  # fmt: skip
