"""Where the low floors reach the plugin layer without importing it: the loader of installed plugins, and the
plugin fields of provenance.

The registries (:mod:`suite.registry`, :mod:`suite.envs.specs`) call :func:`load_installed` before a look-up that
an installed plugin may answer, and :mod:`suite.provenance` asks :func:`plugin_provenance` which plugins a trial
came from. :mod:`suite.plugins` fills both when it is imported (:func:`install`); the trial runner, the study
loader, the CLI and :mod:`suite.api` import it. Until then no plugin is loaded, and these say so: the look-ups see
what was registered by import, and provenance names no plugin. This module imports nothing of the suite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_LOADER: list[Callable[[], object]] = []
_PROVENANCE: list[Callable[[str, str], dict[str, Any]]] = []


def install(loader: Callable[[], object], provenance: Callable[[str, str], dict[str, Any]]) -> None:
    """Install the plugin layer: ``loader()`` registers the built-in algorithms, then the installed plugins (once per
    process; later calls cost a look-up); ``provenance(algo, env_id)`` gives a trial's plugin fields."""
    _LOADER[:] = [loader]
    _PROVENANCE[:] = [provenance]


def load_installed() -> None:
    """Register the built-in algorithms and the installed plugins, if the plugin layer is installed."""
    for load in _LOADER:
        load()


def plugin_provenance(algo: str, env_id: str) -> dict[str, Any]:
    """``{"algo_plugin", "env_plugin", "plugins"}`` of a trial of ``algo`` on ``env_id`` (see
    :func:`suite.plugins.provenance_of`); None and ``[]`` while no plugin layer is installed."""
    if _PROVENANCE:
        return _PROVENANCE[0](algo, env_id)
    return {"algo_plugin": None, "env_plugin": None, "plugins": []}
