"""Plugins: algorithms and env specs from outside the suite, with the same guarantees as the built-in ones.

Two ways in, both ending in the same registries (:mod:`suite.registry`, :mod:`suite.envs`):

* **Installed packages** declare a module under the entry-point group ``rl_suite.algorithms`` (algorithms) or
  ``rl_suite.envs`` (env specs) in their ``pyproject.toml``; importing that module registers what it provides
  with :func:`suite.api.register` / :func:`suite.api.register_env_spec`. Every suite process discovers them
  when its registry first loads (:func:`load_entry_points`), so worker processes and Ray tasks see them too.
* **A single file or module** named with ``suite run --plugin path/to/my_algo.py`` (or a module name), or in a
  study's ``plugins = [...]``: :func:`load_plugins`. The names travel with every trial
  (``TrialSpec.plugins``) and :meth:`suite.trial.TrialSpec.resolve` loads them again in the process that runs
  it, so forkserver children and Ray tasks register the same algorithms as the process that planned the study.

A plugin that fails to import, or registers an id that is already taken (built-in or by another plugin), is
one :class:`~suite.errors.UserError` naming the plugin, before anything runs; whatever it registered before
failing is removed again, so a failed load leaves the registries as they were. An id is never overridden.

Every registration made while a plugin loads is attributed to it (``AlgorithmSpec.plugin`` and
``plugin_version``, the owner of a plugin env spec), and trial records carry the plugin's name and version in their
provenance (:func:`provenance_of`).

This module pushes into the floors below it, which never import it: each plugin's import runs inside
:func:`suite.registry.attributed_to` and :func:`suite.envs.specs.attributed_to`, and on import it installs
:func:`load_entry_points` and :func:`provenance_of` in :mod:`suite.loading`, where the registries and provenance
find them. It imports only the standard library and the foundation at the top (the registries and envs when it
loads something), so any command may import it first.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from suite import loading
from suite.errors import UserError

ALGORITHMS_GROUP = "rl_suite.algorithms"
"""Entry-point group of algorithm plugins (a module that registers algorithms when imported)."""
ENVS_GROUP = "rl_suite.envs"
"""Entry-point group of env plugins (a module that registers env specs / gymnasium ids when imported)."""
GROUPS = (ALGORITHMS_GROUP, ENVS_GROUP)


@dataclass(frozen=True)
class PluginInfo:
    """One loaded plugin: what it is, which version, and what it registered."""

    name: str
    """Distribution name for installed packages (``rl-suite-reinforce``), module name for a plain module, file
    stem for a single file."""
    version: str | None
    """Distribution version; for a module or file, its ``__version__`` if it defines one, else None."""
    kind: str
    """``"package"`` (an installed distribution), ``"module"`` (importable, not from a distribution) or ``"file"``."""
    source: str
    """Where it came from: the entry point (``group: name = module``), the module name, or the file's absolute path."""
    module: str
    """Name of the imported module in ``sys.modules``."""
    sha256: str | None = None
    """SHA-256 of a single file's bytes (files only: a file has no version unless it says so)."""
    algorithms: tuple[str, ...] = ()
    """Algorithm ids it registered."""
    envs: tuple[str, ...] = ()
    """Env spec ids it registered."""
    spec: str = field(default="", compare=False)
    """The string it was loaded from (a path or module name), as given to :func:`load_plugins`."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready identity (what provenance records): name, version, kind, source, sha256."""
        return {"name": self.name, "version": self.version, "kind": self.kind, "source": self.source, "sha256": self.sha256}


_LOADED: dict[str, PluginInfo] = {}
"""Loaded plugins by key: the absolute path of a file, else the module name."""
_ENTRY_POINTS_DONE = False
_ENTRY_POINTS_LOADING = False


# -- what was loaded ----------------------------------------------------------------------------------------
def loaded_plugins() -> list[PluginInfo]:
    """Every plugin loaded in this process so far, in load order."""
    return list(_LOADED.values())


def plugin_named(name: str) -> PluginInfo | None:
    """The loaded plugin called ``name`` (see :attr:`PluginInfo.name`), or None."""
    return next((p for p in _LOADED.values() if p.name == name), None)


def provenance_of(algo: str, env_id: str) -> dict[str, Any]:
    """Provenance fields of a trial: the plugins that provide its algorithm and env, and every plugin loaded.

    Returns:
        ``{"algo_plugin": {...} | None, "env_plugin": {...} | None, "plugins": [{...}, ...]}``, each ``{...}``
        being :meth:`PluginInfo.as_dict` (None: the suite itself provides it).
    """
    algo_plugin = next((p for p in _LOADED.values() if algo in p.algorithms), None)
    env_plugin = next((p for p in _LOADED.values() if env_id in p.envs), None)
    return {
        "algo_plugin": algo_plugin.as_dict() if algo_plugin else None,
        "env_plugin": env_plugin.as_dict() if env_plugin else None,
        "plugins": [p.as_dict() for p in _LOADED.values()],
    }


# -- loading ----------------------------------------------------------------------------------------------
def load_plugins(specs: Sequence[str]) -> list[PluginInfo]:
    """Load plugins named by path (a ``.py`` file) or module name; already loaded ones are not loaded again.

    Installed entry-point plugins are loaded first (and the built-in algorithms before them), so a clash is
    always reported against the id that was there first. This is the one loader every command uses (``run``,
    ``list``, ``report``, ``evaluate``, study files, claims and regression commands).

    Args:
        specs: File paths (absolute, or relative to the current directory) or importable module names.

    Returns:
        The :class:`PluginInfo` of each spec, in order.

    Raises:
        UserError: a file that does not exist, a module that cannot be found, an import that fails, or an id
            that clashes; one line naming the plugin.
    """
    load_entry_points()
    return [_load_one(str(s)) for s in specs]


def normalise_spec(spec: str, base: Path | None = None) -> str:
    """The canonical form of a plugin spec: an absolute path for files (relative ones resolved against ``base``,
    default the current directory), the module name otherwise. Trial specs carry this form so a worker process
    or Ray task with another working directory loads the same file."""
    spec = str(spec).strip()
    if not spec:
        raise UserError("an empty plugin name was given (expected a .py file or a module name)")
    if _is_path(spec):
        path = Path(spec).expanduser()
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        return str(path.resolve())
    return spec


def _is_path(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or "\\" in spec


def _load_one(spec: str) -> PluginInfo:
    spec = normalise_spec(spec)
    if spec in _LOADED:
        return _LOADED[spec]
    if _is_path(spec):
        return _load_file(Path(spec))
    found = next((p for p in _LOADED.values() if p.module == spec), None)
    if found is not None:  # already loaded through its entry point
        return found
    return _load_module(spec)


def _load_file(path: Path) -> PluginInfo:
    if not path.is_file():
        raise UserError(f"plugin file not found: {path}")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    # One module name per path, the same in every process, so a worker's copy is the parent's.
    module_name = f"rl_suite_plugin_{_identifier(path.stem)}_{hashlib.sha256(str(path).encode()).hexdigest()[:10]}"
    info = PluginInfo(path.stem, None, "file", str(path), module_name, sha256=digest, spec=str(path))

    def run() -> ModuleType:
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f"cannot load {path} as a Python module")
        module = importlib.util.module_from_spec(module_spec)
        # In sys.modules before it runs: dataclasses and typing.get_type_hints look their module up there.
        sys.modules[module_name] = module
        module_spec.loader.exec_module(module)
        return module

    return _import_registering(str(path), info, run)


def _load_module(name: str) -> PluginInfo:
    if importlib.util.find_spec(name.split(".")[0]) is None:
        raise UserError(
            f"plugin {name!r} not found: no such module or .py file (install the plugin package, e.g. "
            f"'pip install -e path/to/plugin', or give the path of a .py file)"
        )
    dist = _distribution_of(name)
    if dist is not None:
        info = PluginInfo(dist[0], dist[1], "package", name, name, spec=name)
    else:
        info = PluginInfo(name, None, "module", name, name, spec=name)
    return _import_registering(name, info, lambda: importlib.import_module(name))


def load_entry_points() -> list[PluginInfo]:
    """Discover and import the installed plugins of both entry-point groups (once per process).

    The built-in algorithms are registered first. Called by the registries on first use, so every process that
    resolves a trial sees the same installed plugins.

    Raises:
        UserError: a plugin that fails to import or clashes (naming its distribution and entry point).
    """
    global _ENTRY_POINTS_DONE, _ENTRY_POINTS_LOADING
    if _ENTRY_POINTS_DONE or _ENTRY_POINTS_LOADING:
        return [p for p in _LOADED.values() if p.kind == "package"]
    _ENTRY_POINTS_LOADING = True
    try:
        import suite.algorithms  # noqa: F401  (built-ins first: a clash is reported against them)

        for group in GROUPS:
            for ep in sorted(importlib.metadata.entry_points(group=group), key=lambda e: (e.name, e.value)):
                module = ep.value.partition(":")[0].strip()
                if module in _LOADED:
                    continue  # the same module under both groups
                dist = ep.dist
                name = dist.name if dist is not None else ep.name
                version = dist.version if dist is not None else None
                source = f"entry point {group}: {ep.name} = {ep.value}"
                info = PluginInfo(name, version, "package", source, module, spec=module)
                _import_registering(module, info, ep.load)
        _ENTRY_POINTS_DONE = True
    finally:
        _ENTRY_POINTS_LOADING = False
    return [p for p in _LOADED.values() if p.kind == "package"]


def _import_registering(key: str, info: PluginInfo, run: Any) -> PluginInfo:
    """Run the import ``run()`` with registrations attributed to ``info``; record what it registered.

    On any failure the registrations it made are removed again and one UserError names the plugin.
    """
    from suite import registry
    from suite.envs import specs

    algos_before, envs_before = registry.snapshot(), specs.snapshot_env_specs()
    modules_before = set(sys.modules)
    try:
        with registry.attributed_to(info.name, info.version), specs.attributed_to(info.name):
            module = run()
    except BaseException as exc:
        registry.restore(algos_before)
        specs.restore_env_specs(envs_before)
        for name in set(sys.modules) - modules_before:
            if name == info.module or name.startswith(info.module + "."):
                del sys.modules[name]
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        raise UserError(_failure_message(info, exc)) from None
    version = info.version
    if info.kind != "package" and isinstance(getattr(module, "__version__", None), str):
        version = module.__version__
    new_algos = tuple(sorted(set(registry.snapshot()[0]) - set(algos_before[0])))
    if version != info.version:
        registry.set_plugin_version(new_algos, version)
    loaded = PluginInfo(
        info.name, version, info.kind, info.source, info.module, info.sha256, algorithms=new_algos,
        envs=tuple(sorted(set(specs.snapshot_env_specs()) - set(envs_before))), spec=info.spec,
    )  # fmt: skip
    _LOADED[key] = loaded
    return loaded


def _failure_message(info: PluginInfo, exc: BaseException) -> str:
    """One line: which plugin, where from, and what went wrong."""
    from suite.registry import DuplicateIdError

    what = f"plugin {info.name!r}" + (f" {info.version}" if info.version else "") + f" ({info.source})"
    if isinstance(exc, DuplicateIdError | UserError):
        return f"{what}: {_one_line(str(exc))}"
    return f"{what} failed to import: {type(exc).__name__}: {_one_line(str(exc))}"


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines) if lines else "(no message)"


def _identifier(text: str) -> str:
    out = "".join(c if c.isalnum() else "_" for c in text)
    return out or "plugin"


def _distribution_of(module: str) -> tuple[str, str] | None:
    """``(distribution name, version)`` of the installed distribution that provides top-level ``module``."""
    top = module.split(".")[0]
    names = importlib.metadata.packages_distributions().get(top, [])
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return name, importlib.metadata.version(name)
    return None


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Run a block, then forget the plugins loaded inside it and remove what they registered (for tests that load
    plugins in-process; a real process never unloads a plugin)."""
    from suite import registry
    from suite.envs import specs

    global _ENTRY_POINTS_DONE
    loaded, done = dict(_LOADED), _ENTRY_POINTS_DONE
    algos, env_specs = registry.snapshot(), specs.snapshot_env_specs()
    try:
        yield
    finally:
        for key in set(_LOADED) - set(loaded):
            module = _LOADED.pop(key).module
            for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
                del sys.modules[name]
        _ENTRY_POINTS_DONE = done
        registry.restore(algos)
        specs.restore_env_specs(env_specs)


loading.install(load_entry_points, provenance_of)
