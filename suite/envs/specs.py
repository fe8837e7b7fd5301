"""The env spec registry: what the suite knows about each env id, and the kwargs it accepts.

The five built-in ids have hand-written specs; any other registered gymnasium id gets an inferred one
(:func:`get_env_spec`); a plugin may register its own (:func:`register_env_spec`). The plugin loader
(:mod:`suite.plugins`) pushes into this registry: it attributes the specs registered while a plugin imports
(:func:`attributed_to`), and :func:`get_env_spec` runs the loader it installs (:func:`suite.loading.load_installed`)
for an id it does not know yet; this module never imports the plugin layer.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import ale_py
import gymnasium as gym

from suite.errors import UserError
from suite.loading import load_installed
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

_OWNERS: list[str] = []
"""Stack of plugins importing right now (pushed by the plugin loader); a spec registered now belongs to the top."""


@contextlib.contextmanager
def attributed_to(plugin: str) -> Iterator[None]:
    """Attribute every :func:`register_env_spec` inside the block to ``plugin`` (the plugin loader wraps each
    plugin's import in it)."""
    _OWNERS.append(plugin)
    try:
        yield
    finally:
        _OWNERS.pop()


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
    _PLUGIN_SPECS[spec.id] = (spec, _OWNERS[-1] if _OWNERS else None)
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
        load_installed()  # installed env plugins (entry-point group rl_suite.envs) may register it
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
