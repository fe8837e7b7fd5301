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
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, SupportsFloat

import ale_py
import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv, VectorWrapper
from gymnasium.wrappers import (
    AtariPreprocessing,
    FrameStackObservation,
    RecordEpisodeStatistics,
    TimeLimit,
    TransformReward,
)

from suite.errors import UserError
from suite.textmatch import CHARSETS, DEFAULT_TARGETS, TextMatchEnv, validate_text_target

gym.register_envs(ale_py)  # makes the "ALE/..." ids known to gym.make

TEXTMATCH_ID = "TextMatch-v0"


def _register_textmatch() -> None:
    """Register ``TextMatch-v0`` once; a different env already under that id is an error, never overridden."""
    existing = gym.registry.get(TEXTMATCH_ID)
    if existing is not None:
        if existing.entry_point is not TextMatchEnv:
            raise RuntimeError(f"{TEXTMATCH_ID} is already registered with entry point {existing.entry_point!r}")
        return
    # No max_episode_steps: the env terminates by itself after len(target) steps.
    gym.register(TEXTMATCH_ID, entry_point=TextMatchEnv, kwargs={"language": "english", "target": None})  # type: ignore[arg-type]


_register_textmatch()


FAMILIES = ("classic", "box2d", "atari", "mujoco", "text", "toy_text", "other")
"""Env families. ``atari`` selects the suite's Atari pipeline (:func:`make_single_env`); the others build the env
with ``gym.make`` as registered."""

# Module prefixes of gymnasium entry points -> family (an inferred spec's family; "other" when none matches).
_FAMILY_OF_MODULE = (
    ("gymnasium.envs.classic_control", "classic"),
    ("gymnasium.envs.box2d", "box2d"),
    ("gymnasium.envs.mujoco", "mujoco"),
    ("gymnasium.envs.toy_text", "toy_text"),
    ("ale_py", "atari"),
    ("suite.textmatch", "text"),
)


@dataclass(frozen=True)
class EnvSpec:
    """What the suite knows about one environment id (static; kwargs are resolved by :func:`resolve_env_kwargs`).

    The five built-in ids have hand-written specs; any other registered gymnasium id gets an inferred one
    (:func:`get_env_spec`), and a plugin may register its own (:func:`register_env_spec`) to override the
    inference or to add reference numbers and budgets. Round-trips through :meth:`as_dict` (JSON).
    """

    id: str
    """Versioned gymnasium id, e.g. ``"CartPole-v1"``, ``"ALE/Pong-v5"``."""
    family: str
    """One of :data:`FAMILIES`: ``"classic"``, ``"box2d"``, ``"atari"``, ``"mujoco"``, ``"text"``, ``"toy_text"``,
    ``"other"``."""
    action_space: str
    """``"discrete"`` or ``"box"``."""
    observation: str
    """``"vector"`` (flat float vector) or ``"image"`` (uint8 frames, Atari: ``(4, 84, 84)``)."""
    max_episode_steps: int
    """Agent steps per episode cap of the env itself with default kwargs (Pong: 108000 frames / 4 = 27000)."""
    default_kwargs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    """Env constructor kwargs used when the user gives none (read-only mapping)."""
    threshold: float | None = None
    """Sample-efficiency target in raw return, used when ``suite/data/envs.toml`` has no entry for the id
    (inferred specs: gymnasium's ``reward_threshold``); None: no threshold."""
    random_score: float | None = None
    """Expected return of a uniformly random policy (normalised score 0), when ``envs.toml`` has none."""
    reference_score: float | None = None
    """A published trained-agent return (normalised score 1), when ``envs.toml`` has none. Without both scores
    the env's results are reported as not normalised."""
    references_source: str = ""
    """Where ``threshold``, ``random_score`` and ``reference_score`` come from."""
    budgets: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    """Step budget per tier (``smoke``/``quick``/``standard``/``paper``), used when neither the study nor
    ``suite/data/tiers.toml`` gives one (read-only mapping)."""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"env spec {self.id!r}: unknown family {self.family!r}; allowed: {', '.join(FAMILIES)}")
        if self.action_space not in ("discrete", "box"):
            raise ValueError(f"env spec {self.id!r}: action_space must be 'discrete' or 'box', got {self.action_space!r}")
        if self.observation not in ("vector", "image"):
            raise ValueError(f"env spec {self.id!r}: observation must be 'vector' or 'image', got {self.observation!r}")
        if (
            isinstance(self.max_episode_steps, bool)
            or not isinstance(self.max_episode_steps, int)
            or self.max_episode_steps < 1
        ):
            raise ValueError(f"env spec {self.id!r}: max_episode_steps must be a positive int, got {self.max_episode_steps!r}")
        for name in ("default_kwargs", "budgets"):
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, MappingProxyType(dict(value)))

    @property
    def normalised(self) -> bool:
        """Whether the spec gives both scores that define the normalised score."""
        return self.random_score is not None and self.reference_score is not None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready plain dict of all fields."""
        return {
            "id": self.id,
            "family": self.family,
            "action_space": self.action_space,
            "observation": self.observation,
            "max_episode_steps": self.max_episode_steps,
            "default_kwargs": dict(self.default_kwargs),
            "threshold": self.threshold,
            "random_score": self.random_score,
            "reference_score": self.reference_score,
            "references_source": self.references_source,
            "budgets": dict(self.budgets),
        }


class DuplicateEnvSpecError(ValueError):
    """An env spec id that is already registered (built-in or by a plugin); never overridden."""


_SPECS: dict[str, EnvSpec] = {}
"""The built-in specs."""
_PLUGIN_SPECS: dict[str, tuple[EnvSpec, str | None]] = {}
"""Specs registered by plugins (:func:`register_env_spec`), with the registering plugin's name."""
_INFERRED: dict[str, EnvSpec] = {}
"""Specs inferred from gymnasium's registry, cached per process."""


def _add_spec(spec: EnvSpec) -> None:
    if spec.id in _SPECS:
        raise RuntimeError(f"duplicate env spec {spec.id!r}")
    _SPECS[spec.id] = spec


_add_spec(EnvSpec("CartPole-v1", "classic", "discrete", "vector", 500))
_add_spec(EnvSpec("LunarLander-v3", "box2d", "discrete", "vector", 1000))
# ALE v5 truncates at max_num_frames_per_episode=108_000 frames (ale_py/registration.py); 4 frames per agent step.
_add_spec(EnvSpec("ALE/Pong-v5", "atari", "discrete", "image", 108_000 // 4))
_add_spec(EnvSpec("Hopper-v5", "mujoco", "box", "vector", 1000))
_add_spec(
    EnvSpec(
        TEXTMATCH_ID,
        "text",
        "discrete",
        "vector",
        len(DEFAULT_TARGETS["english"]),
        MappingProxyType({"language": "english", "target": DEFAULT_TARGETS["english"]}),
    )
)

VECTORIZATIONS = ("auto", "sync", "async")
"""Allowed values of ``make_vec_env(vectorization=...)``."""

# "auto" never picks async: on the 2-core dev machine (load from other jobs, best of 3) Pong async was no faster
# than sync (n_envs 2/4/8: sync 2.0-2.5k, async 1.2-2.6k agent steps/s, no consistent winner), Hopper and
# LunarLander were 2-4x slower async (IPC dominates), and worker processes compete with the learner for the cores.
_AUTO_ASYNC_FAMILIES: frozenset[str] = frozenset()


def register_env_spec(spec: EnvSpec) -> EnvSpec:
    """Register an :class:`EnvSpec` for a gymnasium id (a plugin's own env, or one whose inferred spec should be
    replaced: other spaces, reference scores, budgets). Called while a plugin loads, it is attributed to it.

    The env itself must already be registered with gymnasium (``gymnasium.register``); when gymnasium knows an
    episode limit for it, ``spec.max_episode_steps`` must equal it (the suite sizes buffers and caps from it).

    Returns:
        ``spec``.

    Raises:
        DuplicateEnvSpecError: the id is a built-in or already registered by a plugin (never overridden).
        ValueError: the id is not registered with gymnasium, or the episode limit disagrees with gymnasium's.
    """
    from suite.plugins import current_plugin

    if spec.id in _SPECS:
        raise DuplicateEnvSpecError(f"env id {spec.id!r} is a built-in env spec; env specs are never overridden")
    if spec.id in _PLUGIN_SPECS:
        owner = _PLUGIN_SPECS[spec.id][1]
        by = f"by plugin {owner!r}" if owner else "outside any plugin"
        raise DuplicateEnvSpecError(f"env id {spec.id!r} is already registered ({by}); env specs are never overridden")
    registered = gym.registry.get(spec.id)
    if registered is None:
        raise ValueError(f"env spec {spec.id!r}: no such gymnasium id; register the env with gymnasium.register first")
    limit = registered.max_episode_steps
    if spec.family != "atari" and limit is not None and limit != spec.max_episode_steps:
        raise ValueError(
            f"env spec {spec.id!r}: max_episode_steps {spec.max_episode_steps} differs from the gymnasium "
            f"registration's {limit}"
        )
    plugin = current_plugin()
    _PLUGIN_SPECS[spec.id] = (spec, plugin.name if plugin else None)
    _INFERRED.pop(spec.id, None)
    return spec


def snapshot_env_specs() -> dict[str, tuple[EnvSpec, str | None]]:
    """A copy of the plugin-registered specs (for :func:`restore_env_specs`)."""
    return dict(_PLUGIN_SPECS)


def restore_env_specs(state: Mapping[str, tuple[EnvSpec, str | None]]) -> None:
    """Put back a :func:`snapshot_env_specs`: specs registered since are removed (and inferred ones forgotten)."""
    _PLUGIN_SPECS.clear()
    _PLUGIN_SPECS.update(state)
    _INFERRED.clear()


def list_envs() -> list[EnvSpec]:
    """The built-in envs in a fixed order, then the plugin-registered ones by id. Any other registered gymnasium
    id is usable too (:func:`get_env_spec` infers its spec) but is not listed."""
    return list(_SPECS.values()) + [_PLUGIN_SPECS[k][0] for k in sorted(_PLUGIN_SPECS)]


def get_env_spec(env_id: str) -> EnvSpec:
    """The :class:`EnvSpec` of ``env_id``: built-in, else registered by a plugin, else inferred from gymnasium.

    An inferred spec takes the action space (``Discrete`` -> discrete, 1-D ``Box`` -> box), observation (1- or
    2-D ``Box`` -> vector; Atari ids -> image through the suite's Atari pipeline), episode limit
    (``max_episode_steps``; Atari: the frame limit / 4) and family (from the entry point's module) from the env
    and its registration, and gymnasium's ``reward_threshold`` as the sample-efficiency threshold.

    Raises:
        UserError: unknown id (the message lists the built-in ids and says any registered gymnasium id works),
            or a gymnasium env the suite cannot handle (its spaces, no episode limit, it fails to build).
    """
    if not isinstance(env_id, str):
        raise UserError(f"an env id is a string, got {env_id!r}")
    spec = _SPECS.get(env_id)
    if spec is not None:
        return spec
    if env_id not in _PLUGIN_SPECS:
        from suite.plugins import load_entry_points

        load_entry_points()  # installed env plugins (entry-point group rl_suite.envs) may register it
    if env_id in _PLUGIN_SPECS:
        return _PLUGIN_SPECS[env_id][0]
    if env_id not in _INFERRED:
        if env_id not in gym.registry:
            close = difflib.get_close_matches(env_id, [*_SPECS, *_PLUGIN_SPECS, *gym.registry], n=3, cutoff=0.75)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            known = ", ".join([*_SPECS, *sorted(_PLUGIN_SPECS)])
            raise UserError(f"unknown env id {env_id!r}; allowed: {known}, or any registered gymnasium id{hint}")
        _INFERRED[env_id] = _infer_spec(env_id)
    return _INFERRED[env_id]


def _family(entry_point: Any) -> str:
    module = entry_point.partition(":")[0] if isinstance(entry_point, str) else getattr(entry_point, "__module__", "")
    return next((family for prefix, family in _FAMILY_OF_MODULE if str(module).startswith(prefix)), "other")


def _infer_spec(env_id: str) -> EnvSpec:
    """Build the env once with its registered defaults and read what the suite needs from it (see get_env_spec)."""
    registered = gym.registry[env_id]
    family = _family(registered.entry_point)
    try:
        env = gym.make(env_id)
    except Exception as exc:  # noqa: BLE001  (a missing extra, a broken env: the user's id cannot be used)
        raise UserError(f"cannot build gymnasium env {env_id!r} to infer its spec: {type(exc).__name__}: {exc}") from None
    try:
        obs_space, act_space = env.observation_space, env.action_space
    finally:
        env.close()
    unsupported = f"the suite cannot run {env_id!r}"
    if isinstance(act_space, gym.spaces.Discrete) and int(act_space.start) == 0:
        action = "discrete"
    elif isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        action = "box"
    else:
        raise UserError(f"{unsupported}: action space {act_space} (supported: Discrete from 0, or a 1-D Box)")
    if family == "atari":
        observation = "image"  # the Atari pipeline turns frames into (4, 84, 84) uint8 stacks
        # The pipeline makes the ALE with frameskip=1, so gymnasium's TimeLimit counts frames, like the ALE's own cap.
        frames = [x for x in (registered.max_episode_steps, registered.kwargs.get("max_num_frames_per_episode")) if x]
        limit = min(frames) // 4 if frames else None
    elif isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) in (1, 2):
        observation = "vector"
        limit = registered.max_episode_steps
    else:
        raise UserError(f"{unsupported}: observation space {obs_space} (supported: a 1-D or 2-D Box, or Atari frames)")
    if not limit:
        raise UserError(
            f"{unsupported}: its gymnasium registration has no episode limit (max_episode_steps); register it with "
            "one, or register an EnvSpec for it in a plugin (suite.api.register_env_spec)"
        )
    threshold = registered.reward_threshold
    return EnvSpec(
        env_id, family, action, observation, int(limit),
        threshold=None if threshold is None else float(threshold),
        references_source=f"threshold: gymnasium {env_id} reward_threshold" if threshold is not None else "",
    )  # fmt: skip


def resolve_env_kwargs(env_id: str, kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge ``kwargs`` over the env's defaults and validate them.

    For ``TextMatch-v0`` a language given without a target gets that language's default target
    (``{"language": "code"}`` -> target ``"12345"``).

    Returns:
        A new dict with every constructor kwarg of the env.

    Raises:
        UserError: unknown id, unknown key, or bad value (TextMatch: unsupported language, empty target,
            target character outside the charset).
    """
    spec = get_env_spec(env_id)
    kwargs = dict(kwargs or {})
    unknown = sorted(set(kwargs) - set(spec.default_kwargs))
    if unknown:
        allowed = ", ".join(spec.default_kwargs) or "none"
        raise UserError(f"unknown env kwargs {unknown} for {env_id}; allowed: {allowed}")
    if env_id == TEXTMATCH_ID:
        language = kwargs.get("language", spec.default_kwargs["language"])
        if not isinstance(language, str) or language not in CHARSETS:
            raise UserError(f"unsupported TextMatch language {language!r}; allowed: {', '.join(CHARSETS)}")
        try:
            target = validate_text_target(language, kwargs.get("target"))
        except ValueError as e:
            raise UserError(str(e)) from None
        return {"language": language, "target": target}
    return {**spec.default_kwargs, **kwargs}


def env_label(env_id: str, kwargs: Mapping[str, Any] | None) -> str:
    """Short human label: the plain id for default kwargs, else e.g. ``"TextMatch-v0[code:12345]"``."""
    spec = get_env_spec(env_id)
    resolved = resolve_env_kwargs(env_id, kwargs)
    if resolved == dict(spec.default_kwargs):
        return env_id
    if env_id == TEXTMATCH_ID:
        return f"{env_id}[{resolved['language']}:{resolved['target']}]"
    return f"{env_id}[{','.join(f'{k}={v}' for k, v in sorted(resolved.items()))}]"


def episode_limit(env_id: str, kwargs: Mapping[str, Any] | None) -> int:
    """Maximum agent steps in one episode of the env itself (``TextMatch-v0``: ``len(target)``)."""
    if env_id == TEXTMATCH_ID:
        return len(resolve_env_kwargs(env_id, kwargs)["target"])
    return get_env_spec(env_id).max_episode_steps


# ----------------------------------------------------------------------------------------------------------------
# single-env pipelines


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
        # frame is wasted work (measured 2.1k -> 2.6k agent steps/s for one env).
        env = gym.make(env_id, frameskip=1, obs_type="grayscale")
        env = AtariPreprocessing(
            env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True, terminal_on_life_loss=False
        )
        return wrap_atari_agent_side(env, training=training, max_episode_steps=max_episode_steps)
    # gym.make puts TimeLimit(max_episode_steps) below RecordEpisodeStatistics, so capped episodes are recorded.
    env = gym.make(env_id, max_episode_steps=max_episode_steps, **env_kwargs)
    return RecordEpisodeStatistics(env)


# ----------------------------------------------------------------------------------------------------------------
# vector envs


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


def _episode_info(done: np.ndarray, returns: np.ndarray, lengths: np.ndarray, final_obs: np.ndarray) -> dict[str, Any]:
    """The info of a step where the sub-envs in ``done`` ended, in SyncVectorEnv + RecordEpisodeStatistics' layout
    (without the wall-time field), as :func:`finished_episodes` and :func:`final_observations` read it."""
    episode = {"r": np.where(done, returns, 0.0), "_r": done, "l": np.where(done, lengths, 0), "_l": done}
    return {
        "final_obs": final_obs,
        "_final_obs": done,
        "final_info": {"episode": episode, "_episode": done},
        "_final_info": done,
    }


class SeededCartPole(VectorEnv):
    """``n`` gymnasium ``CartPole-v1`` envs (``CartPoleEnv`` + ``TimeLimit`` + ``RecordEpisodeStatistics``) stepped
    together in numpy with SAME_STEP autoreset; the info layout of ``SyncVectorEnv`` + ``RecordEpisodeStatistics``
    (without the wall-time field), except that ``info["final_obs"]`` is a float32 ``(n_envs, 4)`` array (read it
    through :func:`final_observations`).

    Two seedings, each reproducing a gymnasium vector env bit for bit (same float64 dynamics, same draws; tested):

    * ``per_env_seeds=True`` (``vectorization="sync"``): each sub-env has its own generator seeded like the single
      env's (``reset(seed=s)`` seeds sub-env ``k`` with ``s + k``, or takes a list) and draws its own resets: what
      ``SyncVectorEnv`` of ``gym.make("CartPole-v1")`` returns (evaluation, GRPO's same-seed groups), ~10x faster;
    * ``per_env_seeds=False`` (``"auto"``): one generator for all, as gymnasium's ``CartPoleVectorEnv`` (its
      ``vector_entry_point``) draws it, with its NEXT_STEP autoreset turned into SAME_STEP (the ended envs are
      re-drawn within the reset bounds at the step they end); an int seed only.
    """

    def __init__(self, n_envs: int, max_episode_steps: int, per_env_seeds: bool = True):
        from gymnasium.envs.classic_control.cartpole import CartPoleEnv

        ref = CartPoleEnv()  # the physics constants, read from the real env rather than copied
        self.per_env_seeds = per_env_seeds
        self._rng: np.random.Generator | None = None
        self.num_envs = n_envs
        self.max_episode_steps = max_episode_steps
        self.single_observation_space = ref.observation_space
        self.single_action_space = ref.action_space
        self.observation_space = gym.vector.utils.batch_space(ref.observation_space, n_envs)
        self.action_space = gym.vector.utils.batch_space(ref.action_space, n_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
        self.render_mode = None
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
        # order as the env's numpy scalars: bit for bit, tested): on 8 envs ~3x faster than ~35 numpy calls on
        # 8-element arrays. cos and sin stay numpy's (the env's own functions, one call each for all envs).
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
            info = _episode_info(done, self._elapsed.astype(np.float64), self._elapsed.copy(), obs.copy())
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
        from suite.textmatch import MATCH_REWARD, MISMATCH_REWARD

        ref = TextMatchEnv(language, target)
        self.num_envs = n_envs
        self.target, self.charset = ref.target, ref.charset
        self.match, self.mismatch = MATCH_REWARD, MISMATCH_REWARD
        self.limit = len(ref.target) if max_episode_steps is None else min(max_episode_steps, len(ref.target))
        self._codes = np.array([ref.charset.index(ch) for ch in ref.target], dtype=np.int64)
        self.single_observation_space = ref.observation_space
        self.single_action_space = ref.action_space
        self.observation_space = gym.vector.utils.batch_space(ref.observation_space, n_envs)
        self.action_space = gym.vector.utils.batch_space(ref.action_space, n_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
        self.render_mode = None
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
            final = _episode_info(done, np.array(returns, dtype=np.float64), np.array(pos, dtype=np.int64), obs.copy())
            final["final_info"]["text"] = np.array([t if d else None for t, d in zip(texts, done, strict=True)], dtype=object)
            final["final_info"]["_text"] = done
            info.update(final)
            for k in np.flatnonzero(done).tolist():
                pos[k], returns[k], text[k] = 0, 0.0, ""
            obs = self._obs()
            info["text"] = np.array(text, dtype=object)
        return obs, rewards, terminated, truncated, info


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


# ----------------------------------------------------------------------------------------------------------------
# reading step infos


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
