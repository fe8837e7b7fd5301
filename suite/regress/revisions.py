"""Git revisions as immutable source trees: resolve what the user named, key it by content, extract it.

A revision is either a commit (anything ``git rev-parse`` understands: a branch, a tag, ``HEAD~2``, a hash) or
the working tree with its uncommitted changes (tracked files as they are on disk plus untracked files that git
does not ignore). Either is identified by a **content key**: the SHA-256 of its file listing (mode, git blob id,
path), so two names for the same code (a clean working tree and its ``HEAD``; two commits with the same tree)
share one build, and an edited working tree gets a new one. Nothing here writes to the repository: commits are
read with ``git archive``, the working tree is copied file by file and its blob ids are computed in Python.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from suite.errors import UserError

WORKING_TREE = "working tree"
"""Label of the revision that is the working tree (HEAD's default)."""

_GIT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Revision:
    """One side of a comparison: named by the user, keyed by content."""

    label: str
    """What the user asked for (``main``, ``HEAD~1``) or :data:`WORKING_TREE`."""
    commit: str | None
    """Full hash of the commit (for the working tree: the commit it is based on; None in a repository without one)."""
    dirty: bool
    """The working tree differs from ``commit`` (always False for a commit)."""
    key: str
    """SHA-256 (hex) of the file listing: the build cache's key."""

    @property
    def short(self) -> str:
        """12 hex digits of :attr:`key`, for folder names."""
        return self.key[:12]

    def describe(self) -> str:
        """``main (3f2a1b2c4d5e)`` or ``working tree (3f2a1b2c4d5e + uncommitted changes)``."""
        base = self.commit[:12] if self.commit else "no commit"
        return f"{self.label} ({base}{' + uncommitted changes' if self.dirty else ''})"


def git(repo: Path, *args: str, input_bytes: bytes | None = None) -> bytes:
    """Run ``git -C repo args`` and return its stdout; a failure raises :class:`subprocess.CalledProcessError`."""
    done = subprocess.run(
        ["git", "-C", str(repo), *args], input=input_bytes, capture_output=True, timeout=_GIT_TIMEOUT_S, check=True
    )
    return done.stdout


def repo_root(path: Path) -> Path:
    """The top level of the git checkout that contains ``path``.

    Raises:
        UserError: ``path`` is not inside a git checkout, or git is not installed.
    """
    try:
        return Path(git(path, "rev-parse", "--show-toplevel").decode().strip())
    except FileNotFoundError:
        raise UserError("git is not installed; 'suite regress' builds git revisions") from None
    except subprocess.CalledProcessError:
        raise UserError(f"{path} is not inside a git checkout; 'suite regress' compares git revisions") from None


def resolve_commit(repo: Path, rev: str) -> Revision:
    """A commit by any name git understands.

    Raises:
        UserError: git does not know ``rev`` (the message says how to list what exists).
    """
    if not rev or rev.startswith("-"):
        raise UserError(f"unknown revision {rev!r}: give a branch, tag or commit (see 'git log --oneline')")
    try:
        commit = git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").decode().strip()
    except subprocess.CalledProcessError:
        raise UserError(
            f"unknown revision {rev!r} in {repo}: give a branch, tag or commit (see 'git log --oneline')"
        ) from None
    listing = git(repo, "ls-tree", "-r", "-z", "--full-tree", commit)
    entries = []
    for item in listing.split(b"\0"):
        if not item:
            continue
        meta, _, path = item.partition(b"\t")
        mode, kind, blob = meta.split()
        if kind == b"blob":  # submodules (kind "commit") are not part of the build
            entries.append((mode.decode(), blob.decode(), path.decode()))
    return Revision(rev, commit, False, _listing_key(entries))


def head_commit(repo: Path) -> str | None:
    """The commit ``HEAD`` points at, or None in a repository without commits."""
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}").decode().strip() or None
    except subprocess.CalledProcessError:
        return None


def is_dirty(repo: Path) -> bool:
    """Whether the working tree has changes: modified, staged, deleted or untracked (not ignored) files."""
    return bool(git(repo, "status", "--porcelain", "--untracked-files=normal").strip())


def working_tree(repo: Path) -> Revision:
    """The working tree as it is now; a clean tree is its ``HEAD`` commit (same key, same build)."""
    commit = head_commit(repo)
    if commit is not None and not is_dirty(repo):
        return Revision(WORKING_TREE, commit, False, resolve_commit(repo, commit).key)
    entries = [(_mode(repo / path), _blob_id(repo / path), path) for path in working_tree_files(repo)]
    return Revision(WORKING_TREE, commit, True, _listing_key(sorted(entries, key=lambda e: e[2].encode())))


def working_tree_files(repo: Path) -> list[str]:
    """Paths (relative, sorted) of tracked files present on disk and untracked files git does not ignore."""
    out = git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    paths = sorted({p.decode() for p in out.split(b"\0") if p})
    return [p for p in paths if os.path.lexists(repo / p)]  # a deleted tracked file is listed but absent


def extract(repo: Path, revision: Revision, dest: Path) -> None:
    """Write the revision's files into the new folder ``dest`` (which must not exist yet)."""
    dest.mkdir(parents=True)
    if not revision.dirty:
        assert revision.commit is not None
        with subprocess.Popen(
            ["git", "-C", str(repo), "archive", "--format=tar", revision.commit], stdout=subprocess.PIPE
        ) as proc:
            assert proc.stdout is not None
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                tar.extractall(dest, filter="tar")
        if proc.returncode != 0:
            raise RuntimeError(f"git archive {revision.commit} failed with exit code {proc.returncode}")
        return
    for rel in working_tree_files(repo):
        src, dst = repo / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


def _mode(path: Path) -> str:
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return "120000"
    return "100755" if st.st_mode & stat.S_IXUSR else "100644"


def _blob_id(path: Path) -> str:
    """git's blob id of a file (SHA-1 of ``blob <size>\\0<content>``; a symlink's content is its target)."""
    data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _listing_key(entries: Iterable[tuple[str, str, str]]) -> str:
    digest = hashlib.sha256()
    for mode, blob, path in entries:
        digest.update(f"{mode} {blob} {path}\n".encode())
    return digest.hexdigest()
