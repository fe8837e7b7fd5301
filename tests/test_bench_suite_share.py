"""``benchmarks/bench_suite_share.py``: the suite's share from a ``suite regress`` run folder, paired per trial."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "bench_suite_share.py"


def _module():
    from benchmarks import bench_suite_share  # the repository root is on pytest's path (pyproject.toml)

    return bench_suite_share


def _db(path: Path, rows: list[tuple[str, str, int, float, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE trials (algo TEXT, env_label TEXT, seed INTEGER, wall_time_s REAL, status TEXT)")
        con.executemany("INSERT INTO trials VALUES (?, ?, ?, ?, ?)", rows)


def _run_folder(tmp: Path) -> Path:
    run = tmp / "run"
    # repeat 0: ppo 3 trials 3x faster, grpo 2 trials 2x faster; a failed 'before' trial does not count
    _db(
        run / "base" / "r0" / "suite.db",
        [("ppo", "CartPole-v1", s, 30.0, "ok") for s in range(3)]
        + [("grpo", "TextMatch-v0", s, 10.0, "ok") for s in range(2)]
        + [("grpo", "TextMatch-v0", 2, 1.0, "failed")],
    )
    _db(
        run / "head" / "r0" / "suite.db",
        [("ppo", "CartPole-v1", s, 10.0, "ok") for s in range(3)] + [("grpo", "TextMatch-v0", s, 5.0, "ok") for s in range(3)],
    )
    # repeat 1 stopped early: only two ppo trials at both commits, the machine 10% slower for both
    _db(run / "base" / "r1" / "suite.db", [("ppo", "CartPole-v1", s, 33.0, "ok") for s in range(3)])
    _db(run / "head" / "r1" / "suite.db", [("ppo", "CartPole-v1", s, 11.0, "ok") for s in range(2)])
    revisions = {"base": {"commit": "b" * 40}, "head": {"commit": "a" * 40}}
    (run / "run.json").write_text(json.dumps({"revisions": revisions}))
    return run


def test_share_per_repeat_overall_and_per_algorithm(tmp_path: Path) -> None:
    bs = _module()
    s = bs.summarize(bs.collect(_run_folder(tmp_path)))
    r0, r1 = s["repeats"]
    assert (r0["trials"], r0["complete"]) == (5, True)
    assert r0["share"] == pytest.approx((90.0 + 20.0) / (30.0 + 10.0))
    assert (r1["trials"], r1["complete"]) == (2, False)  # the 'before' trial without its twin is left out
    assert r1["share"] == pytest.approx(3.0)
    assert s["share"] == pytest.approx((110.0 + 66.0) / (40.0 + 22.0))
    assert s["complete_repeats"] == 1 and s["share_range"] == [pytest.approx(2.75), pytest.approx(2.75)]
    assert s["per_algorithm"]["grpo"]["share"] == pytest.approx(2.0)
    assert s["per_algorithm"]["ppo"]["share"] == pytest.approx((90.0 + 66.0) / (30.0 + 22.0))
    # the CI resamples the two trials present in both repeats (ppo seeds 0 and 1): every one of them is 3x
    ci = s["ci95"]
    assert ci["trials"] == 2 and ci["low"] == pytest.approx(3.0) and ci["high"] == pytest.approx(3.0)


def test_bootstrap_interval_brackets_the_estimate_and_is_reproducible(tmp_path: Path) -> None:
    bs = _module()
    run = tmp_path / "run"
    rng = [2.5, 3.5, 2.8, 3.2, 3.0, 2.6, 3.4]
    _db(run / "base" / "r0" / "suite.db", [("ppo", "CartPole-v1", i, 10.0 * x, "ok") for i, x in enumerate(rng)])
    _db(run / "head" / "r0" / "suite.db", [("ppo", "CartPole-v1", i, 10.0, "ok") for i in range(len(rng))])
    s1 = bs.summarize(bs.collect(run))
    s2 = bs.summarize(bs.collect(run))
    ci = s1["ci95"]
    assert ci["low"] < s1["share"] < ci["high"]
    assert 2.5 <= ci["low"] and ci["high"] <= 3.5
    assert s1["ci95"] == s2["ci95"]  # a fixed bootstrap seed


def test_summarize_command_writes_csv_and_json(tmp_path: Path) -> None:
    out = tmp_path / "share.csv"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--summarize", str(_run_folder(tmp_path)), "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "suite share over all repeats" in proc.stdout and "2.84x" in proc.stdout
    csv = out.read_text().splitlines()
    assert csv[0] == "algo,before_r0,after_r0,before_r1,after_r1"
    assert csv[1] == "grpo,20.0,10.0,0.0,0.0" and csv[2] == "ppo,90.0,30.0,66.0,22.0"
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["commits"] == {"before": "b" * 40, "after": "a" * 40}
    assert len(doc["trials"]) == 7 and doc["summary"]["share"] == pytest.approx(176.0 / 62.0)


def test_a_folder_that_is_not_a_run_is_one_clear_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--summarize", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "not a 'suite regress' run folder" in proc.stderr


def test_the_share_study_is_the_default_study_without_the_baselines() -> None:
    share = tomllib.loads((REPO / "benchmarks" / "suite-share.toml").read_text())
    default = tomllib.loads((REPO / "suite" / "studies" / "default.toml").read_text())
    for key in ("tier", "seeds", "n_eval_episodes", "envs"):
        assert share[key] == default[key], key
    from suite.registry import list_algorithms

    suite_algos = sorted(a.id for a in list_algorithms() if a.plugin is None and not a.id.startswith("sb3-"))
    assert sorted(share["algos"]) == suite_algos
