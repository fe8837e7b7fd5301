"""The repository stays quick to clone: no tracked file over 5 MB, and the committed reports (claim tables with their
records) within 15 MB. Sizes of the files ``git ls-files`` lists, as they are in this checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_FILE_BYTES = 5_000_000
MAX_REPORTS_BYTES = 15_000_000


def tracked_sizes() -> dict[str, int]:
    """``{path: bytes}`` of every tracked file present in the checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    sizes = {}
    for name in out.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file():
            sizes[name] = path.stat().st_size
    return sizes


def test_no_tracked_file_is_over_5_mb() -> None:
    sizes = tracked_sizes()
    assert len(sizes) > 100  # the listing worked
    large = {name: size for name, size in sizes.items() if size > MAX_FILE_BYTES}
    assert not large, f"tracked files over {MAX_FILE_BYTES:,} bytes: {large}"


def test_committed_reports_are_within_15_mb() -> None:
    reports = sum(size for name, size in tracked_sizes().items() if name.startswith("reports/"))
    assert 0 < reports <= MAX_REPORTS_BYTES, f"reports/ holds {reports:,} bytes (limit {MAX_REPORTS_BYTES:,})"
