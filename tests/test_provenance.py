"""Tests for suite.provenance: every field present and right, failures become None, expensive parts cached."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import suite
from suite import provenance
from suite.provenance import KEY_PACKAGES, collect_provenance, utc_now_iso

REPO_ROOT = Path(suite.__file__).resolve().parent.parent


def _git_head(root: Path) -> str | None:
    if shutil.which("git") is None:
        return None
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def test_collect_provenance_has_every_field_with_expected_values() -> None:
    info = collect_provenance(threads=3)

    assert info["format_version"] == 1
    assert info["suite_version"] == suite.__version__
    assert info["torch_threads"] == 3
    assert set(info["packages"]) == set(KEY_PACKAGES)
    import numpy

    assert info["packages"]["numpy"] == numpy.__version__
    assert info["python_implementation"] in {"CPython", "PyPy"}
    assert info["python_version"].count(".") == 2
    assert isinstance(info["platform"], str) and info["platform"]
    assert isinstance(info["hostname"], str) and info["hostname"]
    assert info["cpu_count"] >= 1
    assert 1 <= info["cpu_count_usable"] <= info["cpu_count"]
    assert info["cpu_model"] is None or (isinstance(info["cpu_model"], str) and not info["cpu_model"].isdigit())
    import torch

    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    # The record goes into the results database as JSON.
    assert json.loads(json.dumps(info)) == info


def test_git_commit_matches_the_checkout_the_suite_lives_in() -> None:
    head = _git_head(REPO_ROOT)
    info = collect_provenance(threads=1)
    assert info["git_commit"] == head
    if head is None:
        assert info["git_dirty"] is None
    else:
        assert len(head) == 40
        assert isinstance(info["git_dirty"], bool)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_state_reports_dirty_and_clean(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "a.txt").write_text("a")
    git("add", "a.txt")
    git("commit", "-q", "-m", "init")
    head = _git_head(tmp_path)

    assert provenance._git_state.__wrapped__(tmp_path) == (head, False)
    (tmp_path / "a.txt").write_text("changed")
    assert provenance._git_state.__wrapped__(tmp_path) == (head, True)


def test_git_state_is_none_outside_a_checkout(tmp_path: Path) -> None:
    assert provenance._git_state.__wrapped__(tmp_path) == (None, None)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_state_ignores_an_enclosing_repository(tmp_path: Path) -> None:
    # An installed copy of the package inside some other project's checkout must not report that commit.
    subprocess.run(["git", "-C", str(tmp_path), "init", "-q"], check=True)
    nested = tmp_path / "venv" / "site-packages"
    nested.mkdir(parents=True)
    assert provenance._git_state.__wrapped__(nested) == (None, None)


def test_git_state_is_none_without_a_git_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_git(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("git")

    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    assert provenance._git_state.__wrapped__(REPO_ROOT) == (None, None)


def test_missing_package_version_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "KEY_PACKAGES", ("numpy", "surely-not-an-installed-package"))
    versions = dict(provenance._package_versions.__wrapped__())
    assert versions["surely-not-an-installed-package"] is None
    assert versions["numpy"] is not None


def test_git_and_cpu_are_looked_up_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    collect_provenance(threads=1)  # fill the caches

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("git was run again")

    monkeypatch.setattr(provenance.subprocess, "run", forbidden)
    monkeypatch.setattr(provenance.Path, "read_text", forbidden)
    first = collect_provenance(threads=1)
    second = collect_provenance(threads=2)
    assert first["git_commit"] == second["git_commit"]
    # Callers get independent copies: mutating one record must not leak into the cache.
    first["packages"]["numpy"] = "mutated"
    assert collect_provenance(threads=1)["packages"]["numpy"] != "mutated"


def test_cpu_model_parses_x86_and_arm_cpuinfo(monkeypatch: pytest.MonkeyPatch) -> None:
    x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n"
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n\nHardware\t: BCM2835\nModel\t: Raspberry Pi 4\n"
    for text, expected in ((x86, "Intel(R) Xeon(R) CPU @ 2.20GHz"), (arm, "BCM2835")):
        monkeypatch.setattr(provenance.Path, "read_text", lambda self, errors=None, text=text: text)
        assert provenance._cpu_model.__wrapped__() == expected


def test_utc_now_iso_is_utc_with_microseconds() -> None:
    before = datetime.now(UTC)
    stamp = utc_now_iso()
    parsed = datetime.fromisoformat(stamp)
    assert parsed.utcoffset() == timedelta(0)
    assert stamp.endswith("+00:00")
    assert len(stamp.split("T")[1].split("+")[0].split(".")[1]) == 6  # always 6 digits, even at .000000
    assert before <= parsed <= datetime.now(UTC)
