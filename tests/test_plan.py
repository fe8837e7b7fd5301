"""Plan before spending: trials, env steps, core-hours and wall time from recorded speeds, on a hand-made database
whose speeds are known, so every figure is checked against arithmetic done by hand."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import suite.algorithms  # noqa: F401  (registers every algorithm)
from suite.cli import main
from suite.plan import THIS_DB, make_run_plan
from suite.store import ResultsStore
from suite.trial import TrialSpec
from tests.test_store import make_record

PPO_BUDGET = 359_500
"""ppo on CartPole in the hand-made database: 100 steps/s on the training clock plus 5 s a trial beyond it, so a
trial of this budget takes 5 + 3,595 = 3,600 s: one core-hour on one thread."""
GRPO_BUDGET = 90_000
"""grpo on TextMatch: 50 steps/s and no time beyond the training clock: 1,800 s, one core-hour on two threads."""


def speed_db(path: Path, *, ppo_key: str | None = None) -> Path:
    """Two recorded (algorithm, env) pairs with known speeds (and ``ppo_key``, a real trial's key, for seed 0)."""
    with ResultsStore(path) as store:
        for i in range(2):  # two ppo runs: 1,000 steps in 10 s of training, 15 s in all
            key = ppo_key if i == 0 and ppo_key else f"{2 * i:064x}"
            store.save_trial(
                make_record(
                    2 * i,
                    key=key,
                    algo="ppo",
                    env_id="CartPole-v1",
                    env_label="CartPole-v1",
                    steps=1_000,
                    steps_per_second=100.0,
                    wall_time_s=15.0,
                    config={},
                )  # fmt: skip
            )
        store.save_trial(
            make_record(
                1,
                algo="grpo",
                env_id="TextMatch-v0",
                env_label="TextMatch-v0",
                steps=500,
                steps_per_second=50.0,
                wall_time_s=10.0,
                config={},
            )  # fmt: skip
        )
    return path


def test_plan_prices_each_trial_from_its_recorded_speed(tmp_path: Path) -> None:
    db = speed_db(tmp_path / "speeds.db")
    specs = [TrialSpec("ppo", "CartPole-v1", s, PPO_BUDGET) for s in range(3)]
    specs.append(TrialSpec("grpo", "TextMatch-v0", 0, GRPO_BUDGET, threads=2))
    specs.append(TrialSpec("grpo-pairwise", "TextMatch-v0", 0, 1_000))  # no speed anywhere
    plan = make_run_plan(specs, done=4, db_path=db, claims_dir=tmp_path / "no-claims")
    assert plan.seconds[:4] == pytest.approx((3600.0, 3600.0, 3600.0, 1800.0))
    assert plan.core_hours() == pytest.approx(4.0)  # 3 x 1 thread x 1 h + 1 x 2 threads x 0.5 h
    assert plan.unknown == ["grpo-pairwise/TextMatch-v0"]
    assert plan.sources[:4] == (THIS_DB,) * 4
    # longest first, each on the worker that frees first: 2 workers 3600+3600 | 3600+1800 -> 7200 s
    assert plan.wall_seconds(1) == 12_600 and plan.wall_seconds(2) == 7_200 and plan.wall_seconds(8) == 3_600
    assert plan.lines(2, 4, at_hand_label=" (here)") == [
        f"plan: 5 trials to run, 4 already done; {3 * PPO_BUDGET + GRPO_BUDGET + 1_000:,} env steps",
        "  core-hours: 4.00 (speeds recorded: 4 from this run's database); plus 1 trials with no recorded speed "
        "(grpo-pairwise/TextMatch-v0): unknown",
        "  wall time: about 2.0 h on 2 workers (here); about 60 min on 4 workers (--workers 4) (known speeds only)",
    ]


def test_a_pair_the_database_lacks_is_priced_from_the_claim_records_without_writing_them(tmp_path: Path) -> None:
    claims = tmp_path / "claims" / "some-set"
    claims.mkdir(parents=True)
    committed = speed_db(claims / "records.db")
    before = committed.read_bytes()
    spec = TrialSpec("grpo", "TextMatch-v0", 0, GRPO_BUDGET)
    plan = make_run_plan([spec], done=0, db_path=tmp_path / "absent.db", claims_dir=tmp_path / "claims")
    assert plan.seconds == pytest.approx((1800.0,)) and plan.sources == (str(committed),)
    assert committed.read_bytes() == before and sorted(p.name for p in claims.iterdir()) == ["records.db"]
    assert not (tmp_path / "absent.db").exists()
    nothing = make_run_plan([spec], done=0, db_path=None, claims_dir=None)
    assert nothing.lines(2) == [
        "plan: 1 trials to run, 0 already done; 90,000 env steps",
        "  core-hours: unknown (no recorded speed for grpo/TextMatch-v0)",
    ]


def test_run_plan_prints_the_plan_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import suite.executors.common

    monkeypatch.setattr(suite.executors.common, "worker_count", lambda workers: workers or 2)  # the workers at hand
    done_key = TrialSpec("ppo", "CartPole-v1", 0, PPO_BUDGET).resolve().key
    db = speed_db(tmp_path / "speeds.db", ppo_key=done_key)
    argv = ["run", "--algo", "ppo", "--env", "CartPole-v1", "--seeds", "0-2", "--steps", str(PPO_BUDGET), "--db", str(db)]
    assert main([*argv, "--plan", "--workers", "4"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"plan: 2 trials to run, 1 already done; {2 * PPO_BUDGET:,} env steps",
        "  core-hours: 2.00 (speeds recorded: 2 from this run's database)",
        "  wall time: about 60 min on 2 workers (this machine's cores); about 60 min on 4 workers (--workers 4)",
    ]
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 3  # nothing ran
    conn.close()
    assert not (tmp_path / "models").exists()


def test_reproduce_plan_prints_the_plan_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_claims_reproduce import CLAIMS

    (tmp_path / "tiny.toml").write_text(CLAIMS)
    out = tmp_path / "out"
    argv = ["reproduce", str(tmp_path / "tiny.toml"), "--db", str(tmp_path / "r.db"), "-o", str(out), "--plan"]
    assert main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "plan: 6 trials to run, 0 already done; 2,400 env steps"  # 2 arms x 3 seeds x 400 steps
    assert not out.exists() and not (tmp_path / "r.db").exists()


def test_the_plan_and_the_start_line_of_the_same_run_say_the_same_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--plan``, then the same command run: its start line (:func:`suite.executors.execute`) prints the plan's
    trials, env steps, core-hours and wall time, read from the same estimate (no trial code runs: a scripted
    backend ends each trial)."""
    import suite.executors
    import suite.executors.common
    import suite.executors.local
    from tests.test_executor import ScriptedBackend

    monkeypatch.setattr(suite.executors.common, "worker_count", lambda workers: workers or 2)  # the workers at hand
    monkeypatch.setattr(suite.executors.local, "start_forkserver", lambda: None)
    done_key = TrialSpec("ppo", "CartPole-v1", 0, PPO_BUDGET).resolve().key
    to_run = {TrialSpec("ppo", "CartPole-v1", s, PPO_BUDGET).resolve().key for s in (1, 2, 3)}
    for workers, wall in (("2", "about 2.0 h on 2 workers"), ("4", "about 60 min on 4 workers")):
        db = speed_db(tmp_path / f"speeds-{workers}.db", ppo_key=done_key)
        argv = ["run", "--algo", "ppo", "--env", "CartPole-v1", "--seeds", "0-3", "--steps", str(PPO_BUDGET),
                "--db", str(db), "--no-report", "--quiet", "--workers", workers]  # fmt: skip
        assert main([*argv, "--plan"]) == 0
        plan = capsys.readouterr().err.splitlines()
        backend = ScriptedBackend(talks=to_run, rounds=1, slots=int(workers))
        monkeypatch.setattr(suite.executors, "_backend", lambda options, models_dir, todo, b=backend: b)
        assert main(argv) == 0
        start = [line for line in capsys.readouterr().err.splitlines() if line.startswith("study ")]
        assert plan[0] == f"plan: 3 trials to run, 1 already done; {3 * PPO_BUDGET:,} env steps"
        assert plan[1].startswith("  core-hours: 3.00 (") and wall in plan[2]
        head = plan[0].removeprefix("plan: ")
        assert start == [f"study 'adhoc' (custom tier, local executor): {head}; 3.00 core-hours, {wall}; results in {db}"]
