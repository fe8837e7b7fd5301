"""The report's figures drawn in two processes (suite.report.render): the same files as in one, and nothing lost when
the helper fails."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from test_report import POI_REPS, REPS, STUDY, make_results_db

from suite.report import render, write_report
from suite.report.render import FigureJob, FigureRenderer, discard_prepared, prepare


@pytest.fixture(scope="module")
def results_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_results_db(tmp_path_factory.mktemp("render-db") / "suite.db")


def test_a_report_drawn_with_the_helper_has_the_same_files(results_db: Path, tmp_path: Path) -> None:
    """Every table and figure byte for byte the same with the helper (forced on) and without."""
    outs = {}
    for helper in (True, False):
        outs[helper] = tmp_path / f"helper-{helper}"
        write_report(study=STUDY, db=results_db, out_dir=outs[helper], reps=REPS, poi_reps=POI_REPS, helper=helper)
    files = sorted(p.relative_to(outs[False]) for p in outs[False].rglob("*") if p.is_file())
    assert len([f for f in files if f.parts[0] == "figures"]) >= 14  # PNG + SVG of every figure
    for name in files:
        if name.name in ("index.html", "report.md"):  # their footer carries the time of writing
            continue
        assert (outs[True] / name).read_bytes() == (outs[False] / name).read_bytes(), name


def line_figure(label: str) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1, 2], [0, 1, 0], label=label)
    ax.set_title(label)
    return fig


def dies_in_the_helper(label: str, parent_pid: int) -> plt.Figure:
    """A drawing that kills the process it runs in unless that is the report's own."""
    if os.getpid() != parent_pid:
        os._exit(3)
    return line_figure(label)


def raises_everywhere(label: str) -> plt.Figure:
    raise RuntimeError(f"cannot draw {label}")


def test_figures_the_helper_took_when_it_died_are_drawn_here(tmp_path: Path) -> None:
    jobs = [FigureJob(f"fig{i}", dies_in_the_helper, (f"fig{i}", os.getpid()), tmp_path) for i in range(4)]
    with FigureRenderer(helper=True) as renderer:
        assert renderer.helper_started
        for job in jobs:
            renderer.add(job)
        assert renderer.wait_for_helper(1, timeout=120)  # it took fig0 (equal costs: the first added) and died on it
        pngs = renderer.finish()
    assert renderer.helper_exit_code == 3
    assert list(pngs) == [j.name for j in jobs]
    for job in jobs:
        assert pngs[job.name].startswith(b"\x89PNG")
        assert (tmp_path / f"{job.name}.png").read_bytes() == pngs[job.name]
        assert (tmp_path / f"{job.name}.svg").is_file()


def test_a_drawing_error_surfaces_in_the_report_process(tmp_path: Path) -> None:
    with FigureRenderer(helper=True) as renderer:
        renderer.add(FigureJob("fine", line_figure, ("fine",), tmp_path))
        renderer.add(FigureJob("broken", raises_everywhere, ("broken",), tmp_path, cost=2))
        assert renderer.wait_for_helper(1, timeout=120)  # "broken", the costliest: it fails there first
        with pytest.raises(RuntimeError, match="cannot draw broken"):
            renderer.finish()
    assert (tmp_path / "fine.png").is_file()


def test_a_figure_drawn_by_the_helper_is_the_same_file(tmp_path: Path) -> None:
    names = [f"line{i}" for i in range(3)]
    drawn = {}
    for helper in (True, False):
        out = tmp_path / f"helper-{helper}"
        with FigureRenderer(helper=helper) as renderer:
            for name in names:
                renderer.add(FigureJob(name, line_figure, (name,), out))
            if helper:
                assert renderer.wait_for_helper(len(names), timeout=120)  # the helper draws all three
            drawn[helper] = renderer.finish()
        assert renderer.helper_exit_code == (0 if helper else None)
    assert drawn[True] == drawn[False]
    for name in names:
        for ext in ("png", "svg"):
            assert (tmp_path / "helper-True" / f"{name}.{ext}").read_bytes() == (
                tmp_path / "helper-False" / f"{name}.{ext}"
            ).read_bytes()


def records_pid(label: str, directory: Path) -> plt.Figure:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{label}.pid").write_text(str(os.getpid()))
    return line_figure(label)


def test_the_costliest_figure_is_taken_first(tmp_path: Path) -> None:
    costs = {"small": 1.0, "large": 3.0, "medium": 2.0}
    with FigureRenderer(helper=True) as renderer:
        for name, cost in costs.items():
            renderer.add(FigureJob(name, records_pid, (name, tmp_path), tmp_path, cost=cost))
        assert renderer.wait_for_helper(1, timeout=120)
        renderer.finish()
    pids = {name: int((tmp_path / f"{name}.pid").read_text()) for name in costs}
    assert pids["large"] != os.getpid()  # the helper's first
    assert pids["medium"] == os.getpid()  # then this process's first


def test_a_prepared_helper_is_taken_over_by_the_next_renderer(tmp_path: Path) -> None:
    """``prepare`` (called while the last trials of a run leave a CPU free) starts the helper ahead of the report;
    the next renderer draws with that very process, and the files are those drawn without it."""
    wait = prepare(helper=True)
    wait()
    assert render._prepared is not None
    pid = render._prepared[0].pid
    drawn = {}
    for helper in (True, False):
        with FigureRenderer(helper=helper) as renderer:
            if helper:
                assert renderer._proc is not None and renderer._proc.pid == pid
            renderer.add(FigureJob("prepared", records_pid, ("prepared", tmp_path / str(helper)), tmp_path / str(helper)))
            if helper:
                assert renderer.wait_for_helper(1, timeout=120)
            drawn[helper] = renderer.finish()
        assert render._prepared is None
    assert int((tmp_path / "True" / "prepared.pid").read_text()) == pid
    assert drawn[True] == drawn[False]


def test_a_prepared_helper_no_report_takes_is_stopped(tmp_path: Path) -> None:
    prepare(helper=True)()
    assert render._prepared is not None
    proc = render._prepared[0]
    discard_prepared()
    assert proc.poll() is not None and render._prepared is None
    prepare(helper=True)()
    assert render._prepared is not None
    proc = render._prepared[0]
    with FigureRenderer(helper=False) as renderer:  # a renderer without a helper stops it too
        assert not renderer.helper_started
    assert proc.poll() is not None and render._prepared is None


def test_the_same_figure_twice_is_refused(tmp_path: Path) -> None:
    with FigureRenderer(helper=False) as renderer:
        renderer.add(FigureJob("a", line_figure, ("a",), tmp_path))
        with pytest.raises(ValueError, match="added twice"):
            renderer.add(FigureJob("a", line_figure, ("a",), tmp_path))


def test_a_script_without_a_main_guard_is_not_run_again(results_db: Path, tmp_path: Path) -> None:
    """The helper is a plain child interpreter: a script calling ``write_report`` at top level (no ``if __name__ ==
    "__main__"``) runs once, as multiprocessing's spawn would not let it."""
    marker = tmp_path / "runs.txt"
    script = tmp_path / "make_report.py"
    script.write_text(
        textwrap.dedent(f"""
        from suite.report import write_report
        with open({str(marker)!r}, "a") as f:
            f.write("run\\n")
        write_report(study={STUDY!r}, db={str(results_db)!r}, out_dir={str(tmp_path / "out")!r}, reps={REPS},
                     poi_reps={POI_REPS}, helper=True)
        """)
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "run\n"
    assert (tmp_path / "out" / "figures" / "learning_curves.png").is_file()


def test_a_helper_that_cannot_start_drawing_only_costs_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd) -> None:
    """A helper that fails at once (here an "interpreter" that prints a traceback-like line and exits) leaves every
    figure to this process, and its output never reaches the user's terminal."""
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'Traceback (most recent call last): boom' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(broken))
    with FigureRenderer(helper=True) as renderer:
        renderer.add(FigureJob("a", line_figure, ("a",), tmp_path))
        pngs = renderer.finish()
    assert pngs["a"].startswith(b"\x89PNG") and renderer.helper_exit_code == 1
    assert "boom" not in capfd.readouterr().err


@pytest.mark.parametrize("n_runs", [1, 2, 3, 4, 5, 8, 9, 12])
def test_curve_band_iqm_is_scipys_trimmed_mean(n_runs: int) -> None:
    """The learning-curve bands' IQM (a sort network up to 8 runs, np.sort above) is ``trim_mean(x, 0.25)`` over runs,
    ties included."""
    from scipy.stats import trim_mean

    from suite.report.figures import _iqm_of, iqm_band

    rng = np.random.default_rng(n_runs)
    matrix = np.round(rng.normal(size=(n_runs, 60)), 1)  # rounded: ties between runs
    np.testing.assert_allclose(_iqm_of(list(matrix)), trim_mean(matrix, 0.25, axis=0), rtol=1e-12, atol=1e-12)
    point, lo, hi = iqm_band(matrix, reps=50, seed=1)
    idx = np.random.default_rng(1).integers(0, n_runs, size=(50, n_runs))
    boot = trim_mean(matrix[idx], 0.25, axis=1)
    np.testing.assert_allclose(point, trim_mean(matrix, 0.25, axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lo, np.percentile(boot, 2.5, axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(hi, np.percentile(boot, 97.5, axis=0), rtol=1e-12, atol=1e-12)
