"""The algorithm registry: a plain dict filled by a decorator when ``suite.algorithms`` is imported.

Each entry names its version (bump it whenever a change can move results: the version is part of every
trial's key, so a bump makes studies re-run instead of mixing old and new records), a one-line summary,
the reference it implements, the action spaces and observation kinds it supports, its frozen config
dataclass and its per-environment default hyperparameters (a TOML data file, one table per env id).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

from suite.config import build_config, load_toml
from suite.errors import UserError

if TYPE_CHECKING:
    from suite.trial import Agent, TrialContext

TrainFn = Callable[["TrialContext", Any], "Agent"]


@dataclass(frozen=True)
class AlgorithmSpec:
    """Everything the suite knows about one registered algorithm."""

    id: str
    """Registry id, e.g. ``ppo``; part of every trial key."""
    version: str
    """Implementation version; bumped whenever a change can move results."""
    summary: str
    """One line: what the algorithm is."""
    reference: str
    """The paper or source document it implements."""
    action_spaces: frozenset[str]
    """Subset of ``{"discrete", "box"}``."""
    observations: frozenset[str]
    """Subset of ``{"vector", "image"}``."""
    config_cls: type
    """Frozen dataclass of hyperparameters (SB3 names)."""
    train: TrainFn
    """``train(ctx, config) -> Agent``: runs the whole training loop inside a trial."""
    hyperparams: str | Callable[[str], Mapping[str, Any]] | None = None
    """File name under ``suite/hyperparams/`` with per-env default overrides, a callable ``env_id -> overrides``
    (the ``sb3-*`` entries read rl-baselines3-zoo YAML this way), or None."""
    aliases: tuple[str, ...] = ()
    """Other names users may know it by (resolved to ``id``)."""
    notes: str = ""
    """Longer documentation (what the names mean, deviations from the source)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Free-form metadata (e.g. the peer library for ``sb3-*`` entries)."""
    policy_factory: Callable[[Any, Any, Any], Any] | None = None
    """``(observation_space, action_space, config) -> module`` rebuilding a saved policy for re-evaluation."""

    def supports(self, action_space: str, observation: str) -> bool:
        return action_space in self.action_spaces and observation in self.observations

    def env_defaults(self, env_id: str) -> dict[str, Any]:
        """Per-env overrides from the hyperparameter file (``[default]`` then ``[env_id]``)."""
        if not self.hyperparams:
            return {}
        if callable(self.hyperparams):
            return dict(self.hyperparams(env_id))
        table = _hyperparams_table(self.hyperparams)
        out = dict(table.get("default", {}))
        out.update(table.get(env_id, {}))
        return out

    def make_config(self, env_id: str, *layers: Mapping[str, Any]) -> Any:
        """Resolve the config for ``env_id``: defaults < data file < each of ``layers``."""
        return build_config(self.config_cls, [self.env_defaults(env_id), *layers], what=f"{self.id} hyperparameter")


_REGISTRY: dict[str, AlgorithmSpec] = {}
_ALIASES: dict[str, str] = {}
_HP_CACHE: dict[str, dict[str, Any]] = {}


def _hyperparams_table(name: str) -> dict[str, Any]:
    if name not in _HP_CACHE:
        path = resources.files("suite") / "hyperparams" / name
        _HP_CACHE[name] = load_toml(path)  # type: ignore[arg-type]
    return _HP_CACHE[name]


def register(
    id: str,
    *,
    version: str,
    summary: str,
    reference: str,
    action_spaces: tuple[str, ...],
    observations: tuple[str, ...] = ("vector",),
    config: type,
    hyperparams: str | Callable[[str], Mapping[str, Any]] | None = None,
    aliases: tuple[str, ...] = (),
    notes: str = "",
    extra: Mapping[str, Any] | None = None,
    policy_factory: Callable[[Any, Any, Any], Any] | None = None,
) -> Callable[[TrainFn], TrainFn]:
    """Decorator registering ``train(ctx, config) -> Agent`` under ``id``. A duplicate id or alias raises."""

    def deco(fn: TrainFn) -> TrainFn:
        for name in (id, *aliases):
            if name in _REGISTRY or name in _ALIASES:
                raise ValueError(f"algorithm id {name!r} is already registered")
        bad = set(action_spaces) - {"discrete", "box"} | set(observations) - {"vector", "image"}
        if bad:
            raise ValueError(f"{id}: unknown space kinds {sorted(bad)}")
        _REGISTRY[id] = AlgorithmSpec(
            id=id,
            version=version,
            summary=summary,
            reference=reference,
            action_spaces=frozenset(action_spaces),
            observations=frozenset(observations),
            config_cls=config,
            train=fn,
            hyperparams=hyperparams,
            aliases=aliases,
            notes=notes,
            extra=dict(extra or {}),
            policy_factory=policy_factory,
        )
        for alias in aliases:
            _ALIASES[alias] = id
        return fn

    return deco


def _ensure_loaded() -> None:
    import suite.algorithms  # noqa: F401  (registers every algorithm on import)


def list_algorithms() -> list[AlgorithmSpec]:
    """Every registered algorithm, sorted by id."""
    _ensure_loaded()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def get_algorithm(name: str) -> AlgorithmSpec:
    """Look up an id or alias; an unknown name is a UserError listing the ids."""
    _ensure_loaded()
    key = _ALIASES.get(name, name)
    if key not in _REGISTRY:
        raise UserError(f"unknown algorithm {name!r}; registered: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[key]


def check_compatible(algo: AlgorithmSpec, env_id: str) -> None:
    """Raise a UserError before anything runs when ``algo`` cannot handle ``env_id``'s spaces."""
    from suite.envs import get_env_spec

    env = get_env_spec(env_id)
    if not algo.supports(env.action_space, env.observation):
        raise UserError(
            f"{algo.id} cannot run on {env_id} ({env.action_space} actions, {env.observation} observations); "
            f"it supports {'/'.join(sorted(algo.action_spaces))} actions and "
            f"{'/'.join(sorted(algo.observations))} observations"
        )
