"""The VecEnv adapter: a suite vector env seen as an SB3 ``VecEnv``."""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from suite.envs import final_observations, finished_episodes


class SuiteVecEnv(VecEnv):
    """A suite vector env (:func:`suite.envs.make_vec_env`, SAME_STEP autoreset) seen as an SB3 ``VecEnv``.

    ``step_wait`` returns what SB3's ``DummyVecEnv`` returns: observations whose finished rows already hold the
    next episode's first observation, float32 rewards, ``dones = terminated | truncated`` and one info dict per
    env with ``terminal_observation`` (the last real observation) and ``TimeLimit.truncated`` (truncated and
    not terminated) for every finished row, which SB3 uses to bootstrap time-limit truncations (SB3 issue 633)
    and to store the right next observation in replay buffers. Finished episodes' raw scores are recorded on
    the trial context at the global env step where they ended.

    Seeding: sub-env ``k`` is reset with ``ctx.train_seed + k`` on SB3's first ``reset`` (through SB3's own
    ``seed()``/``_seeds`` mechanism, so a later ``seed(s)`` is honoured too).
    """

    def __init__(self, envs: Any, ctx: Any) -> None:
        self.envs, self.ctx = envs, ctx
        super().__init__(envs.num_envs, envs.single_observation_space, envs.single_action_space)
        self.seed(ctx.train_seed)
        self.total_steps = 0
        """Env steps taken by all sub-envs together."""
        self._actions: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        seeds = self._seeds
        seed: int | list[int | None] | None
        if all(s is None for s in seeds):
            seed = None
        elif seeds[0] is not None and list(seeds) == [seeds[0] + k for k in range(self.num_envs)]:
            seed = int(seeds[0])  # an int seeds sub-env k with seed + k (the CartPole fast path takes ints only)
        else:
            seed = [None if s is None else int(s) for s in seeds]
        options = self._options[0] if self._options else {}
        if any(o != options for o in self._options):
            raise NotImplementedError("per-env reset options differ; the suite's vector envs take one options dict")
        obs, _ = self.envs.reset(seed=seed, options=options or None)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, reward, terminated, truncated, info = self.envs.step(self._actions)
        n = self.num_envs
        self.total_steps += n
        terminated, truncated = np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(n)]
        if dones.any():
            _, final_obs = final_observations(info, n)
            for i in np.flatnonzero(dones):
                infos[i]["terminal_observation"] = final_obs[i] if final_obs is not None else obs[i]
                infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
            mask, returns, lengths = finished_episodes(info, n)
            if mask.any():
                self.ctx.record_episodes(self.total_steps, returns[mask], lengths[mask])
        return obs, np.asarray(reward, dtype=np.float32), dones, infos

    def close(self) -> None:
        """Nothing to do: the trial runner closes the envs it built."""

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        # SB3 asks for render_mode at construction; the vector env's own attribute serves every sub-env.
        return [getattr(self.envs, attr_name)] * len(list(self._get_indices(indices)))

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        raise NotImplementedError("SuiteVecEnv does not forward set_attr")

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list[Any]:
        raise NotImplementedError("SuiteVecEnv does not forward env_method")

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False] * len(list(self._get_indices(indices)))
