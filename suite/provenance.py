"""Where and with what a trial ran: the provenance block stored with every trial record.

A number in a results table is only reproducible if we know the code (suite version, git commit, whether the
working tree had uncommitted changes), the libraries, the interpreter and the machine that produced it. This
follows pytest-benchmark's ``machine_info`` / ``commit_info`` (STYLE.md, "Records"), minus its extra
dependencies: no py-cpuinfo, no GitPython.

Everything here is best effort: a missing git binary, a non-checkout install or an unreadable
``/proc/cpuinfo`` yields ``None`` for that field, never an exception, because losing a finished trial over
its metadata would be worse than recording the metadata as unknown.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import socket
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import suite
from suite.loading import plugin_provenance

PROVENANCE_FORMAT_VERSION = 1
"""Bumped when keys of :func:`collect_provenance`'s dict are renamed or removed (adding keys does not bump it)."""

KEY_PACKAGES: tuple[str, ...] = (
    "torch",
    "numpy",
    "gymnasium",
    "ale-py",
    "mujoco",
    "stable-baselines3",
    "rliable",
    "pandas",
    "scipy",
)
"""Distributions whose versions can change results; looked up by distribution name, not import name."""

_GIT_TIMEOUT_S = 10.0


def utc_now_iso() -> str:
    """Return the current time as a UTC ISO 8601 string with microseconds.

    Returns:
        e.g. ``"2025-01-31T12:34:56.123456+00:00"``; :meth:`datetime.fromisoformat` parses it back to an
        aware datetime.
    """
    return datetime.now(UTC).isoformat(timespec="microseconds")


def collect_provenance(threads: int, *, algo: str | None = None, env_id: str | None = None) -> dict[str, Any]:
    """Describe the code, libraries and machine this process runs on, and the plugins a trial came from.

    The git and CPU look-ups are cached per process (they cannot change under a running worker, and a
    ``git status`` per trial would be wasted time; trial processes inherit their forkserver's, :func:`warm`); the
    returned dict is a fresh copy on every call.

    Args:
        threads: the torch intra-op thread count the trial runs with (``torch.set_num_threads``).
        algo: the trial's algorithm id (to name the plugin that provides it).
        env_id: the trial's env id (to name the plugin that provides its env spec).

    Returns:
        A JSON-able dict with keys ``format_version``, ``suite_version``, ``git_commit`` (hex or None),
        ``git_dirty`` (bool or None), ``packages`` ({distribution: version or None}), ``python_version``,
        ``python_implementation``, ``platform``, ``cpu_model`` (str or None), ``cpu_capability`` (the vector
        instruction set torch's CPU kernels dispatch to: ``AVX512``, ``AVX2``, ``DEFAULT``...; str or None),
        ``cpu_count`` (logical CPUs in the machine), ``cpu_count_usable`` (CPUs this process may run on:
        affinity / container limit), ``torch_threads``, ``hostname``, and from
        :func:`suite.plugins.provenance_of`: ``algo_plugin`` and ``env_plugin`` (``{name, version, kind,
        source, sha256}`` of the plugin providing the algorithm / env spec, None for the suite's own) and
        ``plugins`` (every plugin loaded in the process).
    """
    commit, dirty = _git_state(_suite_root())
    return {
        "format_version": PROVENANCE_FORMAT_VERSION,
        "suite_version": suite.__version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "packages": dict(_package_versions()),
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_capability": _cpu_capability(),
        "cpu_count": os.cpu_count(),
        "cpu_count_usable": _usable_cpu_count(),
        "torch_threads": int(threads),
        "hostname": socket.gethostname(),
        **plugin_provenance(algo or "", env_id or ""),
    }


def warm() -> None:
    """Fill this process's provenance caches (git state, package versions, CPU, platform). The trial forkservers call
    it when they start (:mod:`suite.executors.preload`), so their trial processes are born with the caches filled
    instead of each running two ``git rev-parse``, ``git status``, a package metadata scan and ``uname -p`` when it
    records its provenance. A trial records the checkout's state when its run started, the code its forkserver
    imported."""
    _git_state(_suite_root())
    _package_versions()
    _cpu_model()
    _cpu_capability()
    platform.platform()  # computes and caches uname's processor field (``uname -p``, a subprocess on Linux)


def _suite_root() -> Path:
    """The directory that contains the ``suite`` package (the repository root in a checkout)."""
    return Path(suite.__file__).resolve().parent.parent


@functools.cache
def _git_state(root: Path) -> tuple[str | None, bool | None]:
    """Return ``(commit, dirty)`` of the git checkout at ``root``, or ``(None, None)`` if there is none.

    ``root`` only counts as the checkout if git's top level *is* ``root``: an installed copy of the package
    inside some other repository (e.g. a venv under a project) must not report that project's commit.
    Untracked files count as dirty, since an untracked module can change what a run does.
    """
    try:
        top = _git(root, "rev-parse", "--show-toplevel")
        if top is None or Path(top).resolve() != root.resolve():
            return None, None
        commit = _git(root, "rev-parse", "HEAD")
        if commit is None:  # a fresh repository without commits
            return None, None
        status = _git(root, "status", "--porcelain")
        return commit, None if status is None else bool(status)
    except Exception:  # provenance must never fail a trial (see module docstring)
        return None, None


def _git(cwd: Path, *args: str) -> str | None:
    """Run ``git -C cwd args``; return stripped stdout, or None on any failure (no git, not a repo, timeout)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip()


@functools.cache
def _package_versions() -> tuple[tuple[str, str | None], ...]:
    """Installed versions of :data:`KEY_PACKAGES` (None where not installed); cached, as a tuple so it is immutable."""
    versions: list[tuple[str, str | None]] = []
    for name in KEY_PACKAGES:
        try:
            versions.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            versions.append((name, None))
    return tuple(versions)


@functools.cache
def _cpu_capability() -> str | None:
    """The instruction set torch's CPU kernels run with here (``torch.backends.cpu.get_cpu_capability()``).

    Two machines with the same ``cpu_model`` text ("Intel(R) Xeon(R) Processor" on many virtual machines) can
    differ in it, and it decides which kernels compute a trial's floats and how fast: speed ratios measured on an
    AVX-512 machine and an AVX2 one are not the same measurement.
    """
    try:
        import torch

        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # noqa: BLE001 - provenance must never fail a trial
        return None


@functools.cache
def _cpu_model() -> str | None:
    """The CPU's marketing name, from ``/proc/cpuinfo`` on Linux, else whatever :mod:`platform` knows."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    # x86 says "model name"; ARM kernels vary between "Hardware", "Processor", "cpu model" and "Model".
    for field in ("model name", "hardware", "processor", "cpu model", "model"):
        for line in text.splitlines():
            name, sep, value = line.partition(":")
            value = value.strip()
            # "processor : 0" on x86 is the CPU index, not a name.
            if sep and name.strip().lower() == field and value and not value.isdigit():
                return value
    return platform.processor() or platform.machine() or None


def _usable_cpu_count() -> int | None:
    """CPUs this process is allowed to run on (cgroup/affinity aware where the OS supports it)."""
    if hasattr(os, "process_cpu_count"):  # Python >= 3.13
        return os.process_cpu_count()
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()
