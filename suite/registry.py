"""The algorithm registry: a plain dict filled by a decorator when ``suite.algorithms`` is imported.

Each entry names its version (bump it whenever a change can move results: the version is part of every
trial's key, so a bump makes studies re-run instead of mixing old and new records), a one-line summary,
the reference it implements, the action spaces and observation kinds it supports, its frozen config
dataclass and its per-environment default hyperparameters (a TOML data file, one table per env id).

Plugins (:mod:`suite.plugins`) register with the same decorator: installed packages are discovered through the
``rl_suite.algorithms`` entry-point group the first time the registry is used, single files are loaded with
``--plugin``. An id or alias that is already taken, by a built-in or by another plugin, raises
:class:`DuplicateIdError`: nothing is ever overridden. Each entry records the plugin that registered it.

The plugin layer pushes into this module, which never imports it (nor the algorithms): it attributes the
registrations made while a plugin imports (:func:`attributed_to`), and the look-ups first run the loader it installs
(:func:`suite.loading.load_installed`: the built-in algorithms, then the installed plugins).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from suite.config import build_config, load_toml
from suite.context import Agent, TrialContext
from suite.errors import UserError
from suite.loading import load_installed

TrainFn = Callable[[TrialContext, Any], Agent]
Hyperparams = str | os.PathLike[str] | Callable[[str], Mapping[str, Any]] | None
"""Per-env defaults: a file name under ``suite/hyperparams/`` (built-ins), a path to a TOML file (plugins), a
callable ``env_id -> overrides``, or None."""


class DuplicateIdError(ValueError):
    """An algorithm id or alias that is already registered (by a built-in or a plugin); never overridden."""


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
    hyperparams: Hyperparams = None
    """File name under ``suite/hyperparams/`` with per-env default overrides, a path to such a TOML file (plugins:
    ``Path(__file__).with_name("hyperparams.toml")``), a callable ``env_id -> overrides`` (the ``sb3-*`` entries
    read rl-baselines3-zoo YAML this way), or None."""
    aliases: tuple[str, ...] = ()
    """Other names users may know it by (resolved to ``id``)."""
    notes: str = ""
    """Longer documentation (what the names mean, deviations from the source)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Free-form metadata (e.g. the peer library for ``sb3-*`` entries)."""
    policy_factory: Callable[[Any, Any, Any], Any] | None = None
    """``(observation_space, action_space, config) -> module`` rebuilding a saved policy for re-evaluation."""
    imports: tuple[str, ...] = ()
    """Modules a trial of it imports before its clock and memory baseline start (libraries the registry does not
    load, e.g. Stable-Baselines3 for the ``sb3-*`` entries): their import is neither the trial's time nor its memory."""
    plugin: str | None = None
    """Name of the plugin that registered it (:class:`suite.plugins.PluginInfo`), None for a built-in."""
    plugin_version: str | None = None
    """That plugin's version (distribution version, or a file's ``__version__``), None if unknown or built-in."""
    portable_revision: int = 1
    """Revision of the algorithm's portable-kernels path (:mod:`suite.kernels`): bumped, instead of ``version``, when a
    change moves the bits of its portable trials and not those of its native ones (a version bump would orphan every
    native record). Part of a portable trial's key from revision 2 on; revision 1 keeps the keys made before it
    existed."""

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
_OWNERS: list[tuple[str, str | None]] = []
"""Stack of ``(plugin name, version)`` importing right now (pushed by the plugin loader); registrations made now
belong to the top."""


def _hyperparams_table(name: str | os.PathLike[str]) -> dict[str, Any]:
    key = os.fspath(name)
    if key not in _HP_CACHE:
        # A bare file name is a built-in data file; anything with a directory part is a path (a plugin's own file).
        bare = isinstance(name, str) and os.sep not in name and "/" not in name
        path = resources.files("suite") / "hyperparams" / name if bare else Path(name)
        _HP_CACHE[key] = load_toml(path)  # type: ignore[arg-type]
    return _HP_CACHE[key]


def _owner(spec: AlgorithmSpec) -> str:
    return "built-in" if spec.plugin is None else f"by plugin {spec.plugin!r}"


def register(
    id: str,
    *,
    version: str,
    summary: str,
    reference: str,
    action_spaces: tuple[str, ...],
    observations: tuple[str, ...] = ("vector",),
    config: type,
    hyperparams: Hyperparams = None,
    aliases: tuple[str, ...] = (),
    notes: str = "",
    extra: Mapping[str, Any] | None = None,
    policy_factory: Callable[[Any, Any, Any], Any] | None = None,
    imports: tuple[str, ...] = (),
    portable_revision: int = 1,
) -> Callable[[TrainFn], TrainFn]:
    """Decorator registering ``train(ctx, config) -> Agent`` under ``id`` (see :class:`AlgorithmSpec` for the fields).

    Called while a plugin loads, the entry records that plugin's name and version.

    Raises:
        DuplicateIdError: ``id`` or an alias is already registered (built-in or by a plugin).
        ValueError: unknown space kinds, or a ``portable_revision`` that is not an int >= 1.
    """

    def deco(fn: TrainFn) -> TrainFn:
        for name in (id, *aliases):
            taken = _REGISTRY.get(_ALIASES.get(name, name))
            if taken is not None:
                kind = "algorithm id" if name in _REGISTRY else f"alias of {taken.id!r}"
                raise DuplicateIdError(
                    f"algorithm id {name!r} is already registered ({kind}, {_owner(taken)}); ids are never "
                    "overridden: choose another id"
                )
        plugin, plugin_version = _OWNERS[-1] if _OWNERS else (None, None)
        if type(portable_revision) is not int or portable_revision < 1:
            raise ValueError(f"{id}: portable_revision must be an int >= 1, got {portable_revision!r}")
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
            imports=tuple(imports),
            plugin=plugin,
            plugin_version=plugin_version,
            portable_revision=portable_revision,
        )
        for alias in aliases:
            _ALIASES[alias] = id
        return fn

    return deco


@contextlib.contextmanager
def attributed_to(plugin: str, version: str | None) -> Iterator[None]:
    """Attribute every :func:`register` inside the block to ``plugin`` at ``version`` (the plugin loader wraps each
    plugin's import in it)."""
    _OWNERS.append((plugin, version))
    try:
        yield
    finally:
        _OWNERS.pop()


def snapshot() -> tuple[dict[str, AlgorithmSpec], dict[str, str]]:
    """Copies of the registry and alias tables (for :func:`restore`: a failed plugin load is undone)."""
    return dict(_REGISTRY), dict(_ALIASES)


def restore(state: tuple[dict[str, AlgorithmSpec], dict[str, str]]) -> None:
    """Put back a :func:`snapshot`: entries registered since are removed."""
    registry, aliases = state
    _REGISTRY.clear()
    _REGISTRY.update(registry)
    _ALIASES.clear()
    _ALIASES.update(aliases)


def set_plugin_version(ids: Iterable[str], version: str | None) -> None:
    """Record ``version`` as the plugin version of the entries ``ids`` (a single-file plugin's ``__version__`` is
    known only once its import has finished, after its registrations)."""
    for key in ids:
        _REGISTRY[key] = replace(_REGISTRY[key], plugin_version=version)


def list_algorithms() -> list[AlgorithmSpec]:
    """Every registered algorithm (built-in and from loaded plugins), sorted by id."""
    load_installed()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def get_algorithm(name: str) -> AlgorithmSpec:
    """Look up an id or alias; an unknown name is a UserError listing the ids."""
    load_installed()
    key = _ALIASES.get(name, name)
    if key not in _REGISTRY:
        raise UserError(
            f"unknown algorithm {name!r}; registered: {', '.join(sorted(_REGISTRY))} (an algorithm from a plugin "
            "needs its package installed, or --plugin FILE / a study's plugins = [...])"
        )
    return _REGISTRY[key]


def check_compatible(algo: AlgorithmSpec, env_id: str) -> None:
    """Raise a UserError before anything runs when ``algo`` cannot handle ``env_id``'s spaces."""
    from suite.envs.specs import get_env_spec  # gymnasium and the ALE load with it: not at import

    env = get_env_spec(env_id)
    if not algo.supports(env.action_space, env.observation):
        raise UserError(
            f"{algo.id} cannot run on {env_id} ({env.action_space} actions, {env.observation} observations); "
            f"it supports {'/'.join(sorted(algo.action_spaces))} actions and "
            f"{'/'.join(sorted(algo.observations))} observations"
        )
