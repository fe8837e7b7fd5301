"""``benchmarks/bench_mainjob.py``: the main job before/after in one command, and its control-normalised ratios."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "bench_mainjob.py"


def _module():
    from benchmarks import bench_mainjob  # the repository root is on pytest's path (pyproject.toml)

    return bench_mainjob


def _run(side: str, wall: float, suite_s: float, sb3_s: float) -> dict:
    return {"side": side, "commit": "0" * 40, "wall_s": wall, "trials": {"ppo": suite_s, "sb3-dqn": sb3_s}}


def test_summary_ratios_and_control_normalisation() -> None:
    bm = _module()
    # the machine runs 20% slower during the second and third runs: every trial of those runs takes 1.2x as long
    runs = [
        _run("after", 300.0, 100.0, 400.0),
        _run("before", 1.2 * 500.0, 1.2 * 300.0, 1.2 * 400.0),
        _run("before", 1.2 * 500.0, 1.2 * 300.0, 1.2 * 400.0),
        _run("after", 300.0, 100.0, 400.0),
    ]
    s = bm.summarize(runs)
    assert s["whole_job"]["ratio"] == pytest.approx(300.0 / 600.0)
    assert s["whole_job"]["ratio_normalised"] == pytest.approx(300.0 / 500.0)  # the drift taken out
    assert s["suite_share"]["speedup"] == pytest.approx(3.6)
    assert s["suite_share"]["speedup_normalised"] == pytest.approx(3.0)
    assert s["control"]["ratio"] == pytest.approx(1 / 1.2)
    assert s["control"]["spread"] == pytest.approx(1.2)
    assert s["per_algorithm"]["ppo"]["speedup"] == pytest.approx(3.6)
    # a steady machine: normalised and raw agree
    steady = [_run("before", 500.0, 300.0, 400.0), _run("after", 300.0, 100.0, 400.0)]
    t = bm.summarize(steady)
    assert t["whole_job"]["ratio_normalised"] == pytest.approx(t["whole_job"]["ratio"]) == pytest.approx(0.6)
    with pytest.raises(ValueError):
        bm.summarize([_run("before", 1.0, 1.0, 1.0)])


def test_csv_layout(tmp_path: Path) -> None:
    bm = _module()
    runs = [_run("after", 300.0, 100.0, 400.0), _run("before", 500.0, 300.0, 400.0)]
    s = bm.summarize(runs)
    out = tmp_path / "m.csv"
    bm.write_csv(runs, s, out)
    lines = out.read_text().splitlines()
    assert lines[0] == "algo,after1_0000000,before2_0000000"
    assert "ppo,100.0,300.0" in lines and "sb3-dqn,400.0,400.0" in lines
    assert "whole job (wall),300.0,500.0" in lines
    assert lines[-3] == "# whole job after/before: 0.600 raw, 0.600 normalised by the control"


def test_one_command_runs_both_commits_and_summarises(tmp_path: Path) -> None:
    """A tiny 'main job' (one suite algorithm, one baseline, 2,000 steps) at HEAD on both sides, in the order AB; then
    ``--summarize`` on the recorded runs gives the same summary."""
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    work, out = tmp_path / "work", tmp_path / "m.csv"
    argv = [sys.executable, str(SCRIPT), "--before", "HEAD", "--after", "HEAD", "--order", "AB", "--work", str(work),
            "--out", str(out), "--", "--algo", "grpo", "--algo", "sb3-ppo", "--env", "TextMatch-v0", "--steps", "2000",
            "--seeds", "0", "--no-report", "--no-save-models", "--workers", "1"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads((work / "runs.json").read_text())
    assert [r["side"] for r in runs] == ["after", "before"]
    for r in runs:
        assert r["rc"] == 0 and r["wall_s"] > 0
        with sqlite3.connect(work / r["db"]) as con:
            assert sorted(a for (a,) in con.execute("SELECT algo FROM trials WHERE status = 'ok'")) == ["grpo", "sb3-ppo"]
        assert set(r["trials"]) == {"grpo", "sb3-ppo"}
    summary = json.loads(out.with_suffix(".json").read_text())["summary"]
    again = subprocess.run([sys.executable, str(SCRIPT), "--summarize", str(work / "runs.json")], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert f"{summary['whole_job']['ratio']:.3f}x raw" in again.stdout


def test_a_commit_that_does_not_exist_is_one_clear_line(tmp_path: Path) -> None:
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    done = subprocess.run([sys.executable, str(SCRIPT), "--before", "no-such-rev", "--work", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"bench_mainjob: error: --before 'no-such-rev' is not a commit of {REPO}"]


def test_summarize_of_missing_runs_is_one_clear_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--summarize", str(tmp_path / "runs.json")], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert (done.returncode, done.stderr.strip()) == (2, f"bench_mainjob: error: no runs file {tmp_path / 'runs.json'}")
    (tmp_path / "runs.json").write_text(json.dumps([{"side": "after", "commit": "0" * 40, "db": "gone.db", "wall_s": 1.0}]))
    done = subprocess.run([sys.executable, str(SCRIPT), "--summarize", str(tmp_path / "runs.json")], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    missing = f"bench_mainjob: error: run database {tmp_path / 'gone.db'} is missing"
    assert (done.returncode, done.stderr.strip()) == (2, missing)
    assert not (tmp_path / "gone.db").exists()  # nothing created


def test_one_sided_order_or_runs_are_one_clear_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--order", "AA", "--work", str(tmp_path / "w")],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and last.endswith("each at least once (A = after); --repeat >= 1")
    assert not (tmp_path / "w").exists()  # nothing exported, nothing run
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps([{"side": "after", "commit": "0" * 40, "db": "x.db", "wall_s": 1.0, "trials": {"ppo": 1.0}}]))
    done = subprocess.run([sys.executable, str(SCRIPT), "--summarize", str(runs)], capture_output=True, text=True, timeout=120)
    one_sided = f"bench_mainjob: error: {runs} needs runs of both sides (before and after)"
    assert (done.returncode, done.stderr.strip()) == (2, one_sided)


def test_export_replaces_an_earlier_export(tmp_path: Path) -> None:
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    bm = _module()
    dest = tmp_path / "after"
    dest.mkdir()
    (dest / "stale.py").write_text("left from another commit")
    commit = bm.export("HEAD", dest)
    assert len(commit) == 40 and not (dest / "stale.py").exists() and (dest / "suite" / "cli" / "__init__.py").is_file()


def test_the_control_is_the_baselines_update_time_when_recorded() -> None:
    """A commit that speeds up the suite's envs also shortens the SB3 baselines' trials (their env steps run the
    suite's envs): their update time, SB3's own code, stays the control, so the normalised ratio is not skewed."""
    bm = _module()
    steady = [
        {**_run("before", 500.0, 300.0, 400.0), "control_s": 250.0},
        {**_run("after", 280.0, 100.0, 360.0), "control_s": 250.0},  # baselines' rollouts 40 s faster
    ]
    s = bm.summarize(steady)
    assert s["control"]["measure"] == "sb3 update time"
    assert s["control"]["ratio"] == pytest.approx(1.0) and s["control"]["spread"] == pytest.approx(1.0)
    assert s["whole_job"]["ratio_normalised"] == pytest.approx(s["whole_job"]["ratio"]) == pytest.approx(0.56)
    assert s["control"]["baselines_after_s"] == pytest.approx(360.0)
    # the machine 20% slower in the after run: the update-time control sees it
    slow = [steady[0], {**_run("after", 1.2 * 280.0, 120.0, 1.2 * 360.0), "control_s": 1.2 * 250.0}]
    t = bm.summarize(slow)
    assert t["whole_job"]["ratio_normalised"] == pytest.approx(0.56)
    # a run without it (an older runs.json): the trial-time control for all
    assert bm.summarize([steady[0], _run("after", 280.0, 100.0, 360.0)])["control"]["measure"] == "sb3 trial time"


def test_the_run_records_the_baselines_update_time(tmp_path: Path) -> None:
    bm = _module()
    db = tmp_path / "r.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE trials (algo TEXT, wall_time_s REAL, update_time_s REAL)")
        con.executemany("INSERT INTO trials VALUES (?, ?, ?)", [("sb3-dqn", 10.0, 6.0), ("sb3-ppo", 5.0, 3.5),
                                                                  ("ppo", 4.0, 3.0)])  # fmt: skip
    assert bm.baseline_update_time(db) == pytest.approx(9.5)
    assert bm.trial_times(db) == {"sb3-dqn": 10.0, "sb3-ppo": 5.0, "ppo": 4.0}
