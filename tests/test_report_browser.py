"""The HTML report in a real browser: headless Chromium renders it with every image decoded, no console
error and no network access, and a laptop-size screenshot is not blank.

Needs the Debian package ``chromium``: the session fixture installs it with apt-get when it is missing and
the tests run as root, and skips (saying why) otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_report import POI_REPS, REPS, STUDY, make_results_db

from suite.report import write_report

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
INSTALL_TIMEOUT_S = 900
RUN_TIMEOUT_S = 120
LAPTOP = (1366, 900)

# Injected into a copy of the page only (the report itself has no script): after load, write the number of
# images and how many decoded with a non-zero natural width into the DOM, where --dump-dom shows them.
IMAGE_CHECK = """<script>
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  const ok = images.filter((img) => img.complete && img.naturalWidth > 0).length;
  const wide = document.documentElement.scrollWidth > window.innerWidth + 1;
  document.body.insertAdjacentHTML("beforeend",
    `<div id="image-check" data-total="${images.length}" data-ok="${ok}" data-page-scrolls-sideways="${wide}"></div>`);
});
</script>"""


def _apt_get(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(["apt-get", *args], capture_output=True, text=True, env=env, timeout=INSTALL_TIMEOUT_S, check=False)


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Path of headless Chromium, installed with apt-get when missing (root only), else the tests skip."""
    if CHROMIUM.exists():
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"{CHROMIUM} is missing; install the Debian package 'chromium' (needs root and apt-get)")
    done = _apt_get("install", "-y", "chromium")
    if done.returncode != 0:  # a fresh image has no package lists yet
        _apt_get("update")
        done = _apt_get("install", "-y", "chromium")
    if done.returncode != 0 or not CHROMIUM.exists():
        pytest.skip(f"could not install chromium with apt-get: {done.stderr.strip().splitlines()[-1:]}")
    return CHROMIUM


def run_chromium(chromium: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium, isolated (own profile, no background traffic, every host name unresolvable)."""
    command = [
        str(chromium), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}", *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)


@pytest.fixture(scope="session")
def browser_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of the test study (real trials, with failures and hostile strings); returns index.html."""
    db = make_results_db(tmp_path_factory.mktemp("browser-db") / "suite.db")
    out = tmp_path_factory.mktemp("browser-report")
    return write_report(study=STUDY, db=db, out_dir=out, reps=REPS, poi_reps=POI_REPS)


def test_every_image_decodes_and_the_page_fits_a_laptop(chromium: Path, browser_report: Path, tmp_path: Path) -> None:
    page = browser_report.read_text()
    checked = tmp_path / "index-checked.html"
    checked.write_text(page.replace("</body>", IMAGE_CHECK + "\n</body>"))
    done = run_chromium(
        chromium, tmp_path / "profile", f"--window-size={LAPTOP[0]},{LAPTOP[1]}", "--virtual-time-budget=10000",
        "--dump-dom", checked.as_uri(),
    )  # fmt: skip
    found = re.search(r'id="image-check" data-total="(\d+)" data-ok="(\d+)" data-page-scrolls-sideways="(\w+)"', done.stdout)
    assert found, f"the check did not run; chromium said: {done.stderr[-2000:]}"
    total, ok, sideways = int(found.group(1)), int(found.group(2)), found.group(3)
    assert total == page.count("<img ") >= 7
    assert ok == total, f"{total - ok} of {total} images did not decode"
    assert sideways == "false", "the page scrolls sideways at 1366 px; wide tables must scroll inside their box"
    # The injected checker ran inside the page, and the hostile error text stayed text (no alert, no element).
    assert "<script>alert(1)</script>" not in done.stdout


def test_no_console_errors(chromium: Path, browser_report: Path, tmp_path: Path) -> None:
    done = run_chromium(
        chromium, tmp_path / "profile", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom",
        browser_report.as_uri(),
    )  # fmt: skip
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], console
    assert "Failures (2)" in done.stdout  # rendered to the end


def test_laptop_screenshot_is_not_blank(chromium: Path, browser_report: Path, tmp_path: Path) -> None:
    """A 1366x900 screenshot of the top of the page (looked at by hand once: title, summary, contents, table)."""
    from PIL import Image

    shot = tmp_path / "laptop.png"
    done = run_chromium(
        chromium, tmp_path / "profile", f"--window-size={LAPTOP[0]},{LAPTOP[1]}", "--hide-scrollbars",
        f"--screenshot={shot}", browser_report.as_uri(),
    )  # fmt: skip
    assert shot.is_file(), done.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.shape == (LAPTOP[1], LAPTOP[0])
    dark = (pixels < 128).mean()
    assert 0.005 < dark < 0.5, f"{dark:.3%} dark pixels: blank or unstyled page"
