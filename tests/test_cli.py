"""The `suite` command: user mistakes are one line + exit 2; list/run/status/export work end to end."""

import json
import sqlite3
import subprocess
import sys

import pandas as pd
import pytest

from suite.cli import main

SUITE = [sys.executable, "-m", "suite.cli"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--algo", "nope", "--env", "CartPole-v1"], "unknown algorithm 'nope'; registered:"),
        (["run", "--algo", "ppo", "--env", "Nope-v9"], "unknown env"),
        (["run", "--algo", "ppo", "--env", "CartPole-v1", "--seeds", "3-1"], "bad seed range"),
        (["run", "--algo", "ppo", "--env", "CartPole-v1", "--seeds", "x"], "bad seed spec"),
        (["run", "--algo", "ppo", "--env", "CartPole-v1", "--set", "n_step=3"], "unknown ppo hyperparameter key 'n_step'"),
        (["run", "--algo", "ppo", "--env", "CartPole-v1", "--set", "n_steps=abc"], "n_steps: expected an integer"),
        (["run", "--algo", "ppo", "--env", "CartPole-v1", "--set", "oops"], "--set expects key=value"),
        (["run", "--algo", "ppo", "--env", "TextMatch-v0", "--env-arg", "language=klingon"], "language"),
        (["run", "--algo", "ppo", "--env", "TextMatch-v0", "--env-arg", "target=HELLO"], "target"),
        (["run", "missing_study.toml"], "file not found"),
        (["run", "nostudy"], "unknown study 'nostudy'"),
        (["run", "--tier", "huge"], "unknown tier 'huge'"),
        (["run", "--workers", "0"], "--workers must be >= 1"),
        (["run", "--max-retries", "-1"], "--max-retries must be >= 0"),
        (["run", "--trial-timeout", "-5"], "--trial-timeout must be a number of seconds >= 0"),
        (["run", "--executor", "slurm"], "unknown executor 'slurm'; choose one of local, ray"),
        (["run", "--address", "ray://head:10001"], "--address is for --executor ray"),
        (["run", "--retry-failed", "some"], "invalid choice: 'some'"),
        (
            ["run", "--algo", "ppo", "--env", "CartPole-v1", "--seeds", "0-100000"],
            "100,001 trials to run, not yet checked against the database; 10,000,100,000 env steps; ",
        ),
        (["frobnicate"], "invalid choice"),
        (["export", "--table", "trials"], "required"),
        (["merge", "absent-source.db"], "no results database at absent-source.db"),
    ],
)
def test_user_mistakes_are_one_line_and_exit_2(argv, message, capsys, tmp_path):
    code = main([*argv, "--db", str(tmp_path / "x.db")] if argv[0] == "run" else argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("suite: error: ") and message in err[0], err
    assert not (tmp_path / "x.db").exists()  # nothing was written before the mistake surfaced


def test_database_that_is_not_ours_is_refused(tmp_path, capsys):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    code = main(["run", "--algo", "ppo", "--env", "CartPole-v1", "--steps", "256", "--db", str(other), "--no-report"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "is not a rl-suite results database" in err[-1]


def test_list_json_names_algorithms_envs_and_studies(capsys):
    assert main(["list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ppo = next(a for a in data["algorithms"] if a["id"] == "ppo")
    assert ppo["version"] and "1707.06347" in ppo["reference"] and ppo["action_spaces"] == ["box", "discrete"]
    assert {e["id"] for e in data["envs"]} == {"CartPole-v1", "LunarLander-v3", "ALE/Pong-v5", "Hopper-v5", "TextMatch-v0"}
    assert "default" in data["studies"]


def test_run_status_export_end_to_end_and_resume(tmp_path):
    db = tmp_path / "r.db"
    argv = [*SUITE, "run", "--algo", "ppo", "--env", "TextMatch-v0", "--seeds", "0,1", "--steps", "512", "--db", str(db)]
    first = subprocess.run([*argv, "--no-report", "--quiet"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "2 trials to run, 0 already done" in first.stderr and "ppo" in first.stdout
    again = subprocess.run([*argv, "--no-report", "--quiet"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "0 trials to run, 2 already done" in again.stderr
    status = subprocess.run([*SUITE, "status", "--db", str(db)], capture_output=True, text=True, timeout=60)
    assert status.returncode == 0 and "TextMatch-v0" in status.stdout
    out = tmp_path / "trials.csv"
    exp = subprocess.run(
        [*SUITE, "export", "--table", "trials", "-o", str(out), "--db", str(db)], capture_output=True, text=True
    )
    assert exp.returncode == 0, exp.stderr
    df = pd.read_csv(out, dtype={"key": str})
    assert sorted(df["seed"]) == [0, 1] and set(df["status"]) == {"ok"}
    assert (df["rollout_rss_peak_mb"] > 0).all() and (df["update_seconds"] > 0).all()  # per-phase columns, flat
    bad = subprocess.run(
        [*SUITE, "export", "--table", "nope", "-o", str(out), "--db", str(db)], capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_run_gets_its_report_under_way_while_its_last_trial_runs(tmp_path, monkeypatch, capsys):
    """Three trials on two workers, one of them a thousand times longer than the others (seconds, not milliseconds):
    whichever order they run in, a short one ends while the long one runs and nothing is left to start, so the
    report's helper is started and the report's modules imported then (the CPU the other worker leaves idle); the
    report then draws with that helper, and no helper process outlives the command. (With three equal trials the
    last two can end in the same poll of the executor, and then no worker is ever idle while a trial runs.)"""
    import psutil

    from suite.report import render

    if not render.spare_cpu():
        pytest.skip("a report draws with a helper only where a second CPU is free")
    taken: list[int] = []
    adopt = render._take_prepared

    def take():
        spawned = adopt()
        taken.append(spawned[0].pid if spawned is not None else -1)
        return spawned

    monkeypatch.setattr(render, "_take_prepared", take)
    monkeypatch.chdir(tmp_path)
    study = tmp_path / "spare.toml"
    study.write_text(
        'name = "spare"\ntier = "quick"\nseeds = "0"\nalgos = ["ppo", "ppo-adaptive-clip", "grpo"]\n'
        'envs = ["TextMatch-v0"]\n[budgets.quick]\n"TextMatch-v0" = { default = 256, grpo = 262144 }\n'
    )
    argv = ["run", str(study), "--workers", "2", "--quiet", "--no-save-models", "--db", str(tmp_path / "r.db")]
    assert main(argv) == 0
    assert "report written to" in capsys.readouterr().err
    assert (tmp_path / "reports" / "spare" / "index.html").is_file()
    assert taken[0] > 0 and set(taken[1:]) <= {-1}  # the report's renderer took the prepared helper (then none left)
    assert render._prepared is None
    assert not psutil.pid_exists(taken[0]) or psutil.Process(taken[0]).status() == psutil.STATUS_ZOMBIE


def test_asking_for_ray_without_ray_installed_is_one_line(tmp_path):
    code = "import sys; sys.modules['ray'] = None; from suite.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, "run", "--algo", "ppo", "--env", "TextMatch-v0", "--steps", "64", "--executor", "ray",
         "--db", str(tmp_path / "x.db"), "--no-report"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "suite: error: --executor ray needs Ray, which is not installed here: pip install -e '.[ray]' (ray 2.60.0)"
    ]
    assert not (tmp_path / "x.db").exists()


def test_report_uses_the_only_study_of_a_database(tmp_path, capsys):
    from suite.store import ResultsStore
    from tests.test_store import make_record

    db = tmp_path / "one.db"
    with ResultsStore(db) as store:
        for i in range(2):
            store.save_trial(make_record(i, study="adhoc", algo="ppo", env_label="CartPole-v1"))
        store.add_to_study("adhoc", [make_record(i)["key"] for i in range(2)])
    assert main(["report", "--db", str(db), "-o", str(tmp_path / "out"), "--reps", "10"]) == 0
    assert (tmp_path / "out" / "index.html").exists()
    with ResultsStore(db) as store:
        store.save_trial(make_record(5, study="zoo"))
    capsys.readouterr()
    assert main(["report", "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"suite: error: {db} holds several studies (adhoc, zoo); name one: suite report STUDY"]


def test_status_shows_failures_by_cause(tmp_path, capsys):
    from suite.store import ResultsStore
    from tests.test_store import make_record

    db = tmp_path / "s.db"
    with ResultsStore(db) as store:
        store.save_trial(make_record(0))
        store.save_trial(make_record(1, status="failed", failure_kind="timeout", error="Timeout", attempts=2))
        store.save_trial(make_record(3, status="failed", failure_kind="exception", error="ValueError"))
    assert main(["status", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "not ok, by cause" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("quick")]
    assert ["quick", "failed", "exception", "1", "0"] in rows and ["quick", "failed", "timeout", "1", "1"] in rows
