"""Build a revision into a runnable ``suite``: its sources, a shared dependency environment, its own small venv.

A full install per revision costs minutes (torch alone is hundreds of MB), yet consecutive revisions almost
always share their dependencies. So the cache holds two kinds of environment::

    <cache>/src/<key>/            the revision's files (git archive, or a copy of the working tree)
    <cache>/deps/<deps-hash>/     a venv with the dependencies only, one per hash of (requires-python,
                                  [project] dependencies, [build-system] requires, constraints.txt, Python version)
    <cache>/venvs/<key>-<deps>/   per revision: a venv *without* packages of its own except the suite, installed
                                  editable from the revision's sources (the suite reads ``baselines/`` beside its
                                  package) with ``pip install --no-deps --no-build-isolation -e``; a ``.pth``
                                  file puts the dependency venv's site-packages on its path

A revision whose dependencies changed gets a dependency venv of its own (a full install, the cold cost); one
whose dependencies did not costs a small venv and a pip install of the suite alone (the warm cost); a revision
built before costs nothing. ``--deps-env PATH`` uses an existing environment as the dependency venv instead
(e.g. the one ``suite`` itself runs in, right after ``pip install -c constraints.txt -e .``).

Every build folder is written under a temporary name and renamed into place when complete, under a file lock,
so an interrupted build leaves nothing half-made and two concurrent ``suite regress`` share one build.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.errors import UserError
from suite.regress.revisions import Revision, extract

CACHE_ENV_VAR = "SUITE_CACHE"
"""Environment variable naming the build cache folder."""

BUILD_FORMAT = 1
"""Version of the cache layout; bumped when a cached build can no longer be reused."""

_PIP_TIMEOUT_S = 3600.0
_LIST_TIMEOUT_S = 600.0


def default_cache_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """``path`` if given, else ``$SUITE_CACHE``, else ``$XDG_CACHE_HOME/rl-suite`` (``~/.cache/rl-suite``)."""
    if path:
        return Path(path).expanduser()
    if os.environ.get(CACHE_ENV_VAR):
        return Path(os.environ[CACHE_ENV_VAR]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rl-suite"


@dataclass(frozen=True)
class Build:
    """A revision ready to run: ``suite`` is its own command line."""

    revision: Revision
    """What was built."""
    venv: Path
    """The revision's venv."""
    deps: Path
    """The environment that provides its dependencies."""
    deps_hash: str
    """Hash of its dependency declaration (equal hashes share a dependency venv)."""
    capabilities: dict[str, Any] = field(hash=False)
    """``suite list --json`` of the revision: its algorithms (ids, versions, spaces), envs and studies."""
    seconds: dict[str, float] = field(hash=False)
    """Time spent building now, by step (``sources``, ``deps``, ``venv``); empty when everything was cached."""

    @property
    def suite(self) -> Path:
        """The revision's ``suite`` command."""
        return self.venv / "bin" / "suite"


@dataclass(frozen=True)
class DepsSpec:
    """What a revision declares it needs, from its ``pyproject.toml`` and ``constraints.txt``."""

    requirements: tuple[str, ...]
    """``[project] dependencies`` then ``[build-system] requires`` (setuptools: the suite is built without isolation)."""
    constraints: str
    """Text of ``constraints.txt`` ('' when the revision has none)."""
    requires_python: str
    """``[project] requires-python``."""

    @property
    def hash(self) -> str:
        """16 hex digits over the declaration and this interpreter's version (a venv is tied to its Python)."""
        blob = json.dumps(
            {
                "format": BUILD_FORMAT,
                "requirements": sorted(self.requirements),
                "constraints": self.constraints,
                "requires_python": self.requires_python,
                "python": f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}",
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def read_deps(src: Path) -> DepsSpec:
    """The dependency declaration of the sources at ``src``.

    Raises:
        UserError: no readable ``pyproject.toml`` with a ``[project]`` table (not a revision of rl-suite).
    """
    try:
        with open(src / "pyproject.toml", "rb") as fh:
            data = tomllib.load(fh)
        project = data["project"]
    except (OSError, tomllib.TOMLDecodeError, KeyError) as exc:
        raise UserError(f"{src} has no readable pyproject.toml with a [project] table ({exc}); is it rl-suite?") from None
    requires = data.get("build-system", {}).get("requires", ["setuptools"])
    constraints = src / "constraints.txt"
    return DepsSpec(
        requirements=tuple(project.get("dependencies", [])) + tuple(requires),
        constraints=constraints.read_text() if constraints.is_file() else "",
        requires_python=str(project.get("requires-python", "")),
    )


def env_site_packages(python: Path) -> list[str]:
    """The ``purelib`` and ``platlib`` folders of the environment whose interpreter is ``python``."""
    code = "import json, sysconfig; p = sysconfig.get_paths(); print(json.dumps(sorted({p['purelib'], p['platlib']})))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise UserError(f"{python} does not run: {done.stderr.strip().splitlines()[-1:] or done.returncode}")
    return list(json.loads(done.stdout))


class Builder:
    """Builds revisions into the cache (see the module docstring)."""

    def __init__(
        self,
        repo: Path,
        cache: Path,
        *,
        deps_env: Path | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        """Args:
        repo: the git checkout revisions come from.
        cache: the cache folder (created if needed).
        deps_env: an existing environment (venv folder) to use as every revision's dependency environment.
        log: called with one line per build step (default: nothing).
        """
        self.repo = repo
        self.cache = cache
        self.deps_env = deps_env
        self._log = log or (lambda line: None)
        if deps_env is not None and not (deps_env / "bin" / "python").exists():
            raise UserError(f"--deps-env {deps_env}: no bin/python there (give a virtual environment's folder)")
        try:
            for sub in ("src", "deps", "venvs", "locks"):
                (cache / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create the build cache {cache}: {exc}") from None

    def build(self, revision: Revision) -> Build:
        """Sources, dependency environment and venv of ``revision``, reusing whatever the cache has."""
        seconds: dict[str, float] = {}
        src = self.cache / "src" / revision.short
        with self._step(seconds, "sources"), self._lock(f"src-{revision.short}"):
            if not src.is_dir():
                self._log(f"extracting {revision.describe()}")
                tmp = self._fresh_tmp(src)
                extract(self.repo, revision, tmp)
                tmp.rename(src)
        spec = read_deps(src)
        deps = self._deps(spec, seconds)
        venv = self.cache / "venvs" / f"{revision.short}-{hashlib.sha256(str(deps).encode()).hexdigest()[:8]}"
        with self._step(seconds, "venv"), self._lock(venv.name), self._lock(f"src-{revision.short}"):
            if not (venv / "build.json").is_file():
                self._log(f"installing {revision.describe()} into a venv over {deps}")
                self._make_revision_venv(venv, src, deps, revision)
        info = json.loads((venv / "build.json").read_text())
        return Build(revision, venv, deps, spec.hash, info["capabilities"], {k: v for k, v in seconds.items() if v > 0.05})

    # -- dependency environment ------------------------------------------------------------------------------
    def _deps(self, spec: DepsSpec, seconds: dict[str, float]) -> Path:
        if self.deps_env is not None:
            return self.deps_env
        path = self.cache / "deps" / spec.hash
        with self._step(seconds, "deps"), self._lock(f"deps-{spec.hash}"):
            if not (path / "deps.json").is_file():
                self._log(f"installing the dependencies into {path} (a full install: minutes)")
                tmp = self._fresh_tmp(path)
                self._run([sys.executable, "-m", "venv", str(tmp)], tmp.parent / f"{path.name}.log", "create a venv")
                args = [str(tmp / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
                if spec.constraints:
                    (tmp / "constraints.txt").write_text(spec.constraints)
                    args += ["-c", str(tmp / "constraints.txt")]
                self._run([*args, *spec.requirements], tmp / "pip.log", "install the dependencies")
                (tmp / "deps.json").write_text(json.dumps({"requirements": spec.requirements, "hash": spec.hash}))
                # venv scripts hold absolute paths: recreate-free rename is fine because only bin/python is used.
                tmp.rename(path)
                _fix_venv_paths(path, tmp)
        return path

    # -- the revision's own venv -----------------------------------------------------------------------------
    def _make_revision_venv(self, venv: Path, src: Path, deps: Path, revision: Revision) -> None:
        tmp = self._fresh_tmp(venv)
        python = deps / "bin" / "python"
        self._run([str(python), "-m", "venv", "--without-pip", str(tmp)], tmp.parent / f"{venv.name}.log", "create a venv")
        site = env_site_packages(tmp / "bin" / "python")
        dep_paths = env_site_packages(python)
        for folder in site:
            # A .pth line appends the dependency venv's site-packages to sys.path, after the venv's own, so the
            # suite installed here wins over any copy there (.pth files *inside* it are not processed: an
            # editable install of another checkout in --deps-env stays invisible).
            Path(folder).mkdir(parents=True, exist_ok=True)
            (Path(folder) / "_rl_suite_deps.pth").write_text("".join(f"{p}\n" for p in dep_paths))
        self._run(
            [str(tmp / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
             "--no-build-isolation", "--ignore-installed", "--no-warn-script-location", "--editable", str(src)],
            tmp / "pip.log", f"install {revision.describe()}",
        )  # fmt: skip
        tmp.rename(venv)
        _fix_venv_paths(venv, tmp)
        listing = subprocess.run(
            [str(venv / "bin" / "suite"), "list", "--json"],
            capture_output=True,
            text=True,
            timeout=_LIST_TIMEOUT_S,
            check=False,
        )
        if listing.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            tail = (listing.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise UserError(f"{revision.describe()} was installed but 'suite list --json' fails: {tail}")
        info = {
            "format": BUILD_FORMAT,
            "revision": revision.__dict__,
            "deps": str(deps),
            "capabilities": json.loads(listing.stdout),
        }
        (venv / "build.json").write_text(json.dumps(info, indent=1))

    # -- helpers -----------------------------------------------------------------------------------------------
    def _run(self, argv: list[str], log_file: Path, what: str) -> None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "ab") as log:
            done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=_PIP_TIMEOUT_S, check=False)
        if done.returncode != 0:
            lines = [
                ln for ln in log_file.read_text(errors="replace").splitlines() if ln.strip() and "Location 'file:" not in ln
            ]
            raise UserError(f"cannot {what}: {lines[-1] if lines else f'exit code {done.returncode}'} (log: {log_file})")

    @staticmethod
    def _fresh_tmp(final: Path) -> Path:
        tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        return tmp

    @contextlib.contextmanager
    def _lock(self, name: str) -> Iterator[None]:
        with open(self.cache / "locks" / f"{name}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    @staticmethod
    @contextlib.contextmanager
    def _step(seconds: dict[str, float], name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0


def _fix_venv_paths(venv: Path, old: Path) -> None:
    """Point a venv built at ``old`` to where it now lives: console-script shebangs and ``pyvenv.cfg`` name the
    folder they were created in (``bin/python`` is a symlink to the base interpreter, so it needs nothing)."""
    old_b, new_b = str(old).encode(), str(venv).encode()
    for path in [*(venv / "bin").iterdir(), venv / "pyvenv.cfg"]:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old_b in data[:4096] or path.name == "pyvenv.cfg":
            path.write_bytes(data.replace(old_b, new_b))
