"""The HTML report in a real browser: headless Chromium renders it with every image decoded, no console
error and no network access, the headline (results) whole within the first screen of a 1366x768 laptop, and a
laptop-size screenshot is not blank.

Needs the Debian package ``chromium`` (``.ci/run`` installs it); the tests skip, saying why, where it is missing.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_report import POI_REPS, REPS, STUDY, main_job_scores, make_headline_db, make_results_db

from suite.report import write_report

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
RUN_TIMEOUT_S = 120
LAPTOP = (1366, 900)
FIRST_SCREEN = (1366, 768)
"""A laptop screen; Chromium's viewport in a window this size is smaller (its own bars), as a reader's is."""

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


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Path of headless Chromium; the tests skip where it is not installed (this module installs nothing)."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install the Debian package 'chromium' (.ci/run does)")
    return CHROMIUM


# Injected into a copy of the page: after load, write the headline's box (viewport coordinates, page at its top)
# and the viewport's size into the DOM.
FIRST_SCREEN_CHECK = """<script>
window.addEventListener("load", () => {
  const marked = document.querySelectorAll("[data-headline]");
  const box = marked.length ? marked[0].getBoundingClientRect() : {top: -1, bottom: -1, right: -1};
  const first = document.querySelector("main > *:not(header)");
  document.body.insertAdjacentHTML("beforeend",
    `<div id="first-screen" data-marked="${marked.length}" data-top="${box.top}" data-bottom="${box.bottom}"`
    + ` data-right="${box.right}" data-first="${first ? first.id : ""}" data-width="${window.innerWidth}"`
    + ` data-height="${window.innerHeight}"></div>`);
});
</script>"""


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


@pytest.fixture(scope="session")
def main_job_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report the size of the main job's (8 algorithms x 3 envs, hand-made records); returns index.html."""
    db = make_headline_db(tmp_path_factory.mktemp("main-job-db") / "suite.db", main_job_scores(), "main-job")
    return write_report(study="main-job", db=db, out_dir=tmp_path_factory.mktemp("main-job-report"), reps=REPS)


def first_screen(chromium: Path, index: Path, tmp_path: Path) -> dict[str, float | str]:
    """The headline's box and the viewport's size, measured in Chromium at :data:`FIRST_SCREEN`."""
    checked = tmp_path / "index-first-screen.html"
    checked.write_text(index.read_text().replace("</body>", FIRST_SCREEN_CHECK + "\n</body>"))
    done = run_chromium(
        chromium, tmp_path / "profile", f"--window-size={FIRST_SCREEN[0]},{FIRST_SCREEN[1]}", "--hide-scrollbars",
        "--virtual-time-budget=10000", "--dump-dom", checked.as_uri(),
    )  # fmt: skip
    found = re.findall(r'<div id="first-screen" (data-marked="\d[^>]*)>', done.stdout)  # not the script's own text
    assert len(found) == 1, f"the check did not run; chromium said: {done.stderr[-2000:]}"
    values = dict(re.findall(r'data-([\w-]+)="([^"]*)"', found[0]))
    return {k: (v if k == "first" else float(v)) for k, v in values.items()}


@pytest.mark.parametrize("which", ["test_study", "main_job"])
def test_headline_is_the_whole_first_screen_of_a_laptop(
    chromium: Path, browser_report: Path, main_job_report: Path, tmp_path: Path, which: str
) -> None:
    """The results come first and fit: the one marked headline is the first thing under the title and lies whole
    (table, verdict, speed and memory lines, aggregate figure) inside the 1366x768 window's viewport, for the test
    study and for one the size of the main job."""
    index = browser_report if which == "test_study" else main_job_report
    box = first_screen(chromium, index, tmp_path)
    assert box["marked"] == 1
    assert box["first"] == "headline"
    assert box["width"] == FIRST_SCREEN[0] and 500 <= box["height"] <= FIRST_SCREEN[1]
    assert 0 < box["top"] < box["bottom"] <= box["height"], box
    assert box["right"] <= box["width"]


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
