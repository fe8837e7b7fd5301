"""Parallel execution: records land in the store, a killed study loses nothing, a re-run completes the rest."""

import os
import signal
import subprocess
import sys
import time

from suite.executor import run_trials
from suite.store import ResultsStore
from suite.trial import TrialSpec, deterministic_view, run_trial


def test_worker_records_equal_in_process_records(tmp_path):
    specs = [TrialSpec("ppo", "TextMatch-v0", s, 512, n_eval_episodes=2).resolve() for s in (0, 1)]
    with ResultsStore(tmp_path / "a.db") as store:
        summary = run_trials(specs, save=store.save_trial, workers=2, show_progress=False)
        assert len(summary.finished) == 2 and summary.skipped == 0
        for r in specs:
            saved = store.get_trial(r.key)
            local = run_trial(r)
            assert saved["status"] == "ok"
            assert deterministic_view(saved)["curve"] == deterministic_view(local)["curve"]
            assert saved["evals"][-1]["returns"] == local["evals"][-1]["returns"]
        again = run_trials(specs, save=store.save_trial, done_keys=store.finished_keys(), show_progress=False)
        assert again.skipped == 2 and not again.finished


def test_a_crashed_worker_is_recorded_as_failed(tmp_path, monkeypatch):
    spec = TrialSpec("ppo", "TextMatch-v0", 0, 512, n_eval_episodes=2).resolve()

    import suite.executor as ex

    monkeypatch.setattr(ex, "_worker", _die)
    monkeypatch.setattr(ex, "_context", lambda: __import__("multiprocessing").get_context("fork"))
    with ResultsStore(tmp_path / "c.db") as store:
        summary = run_trials([spec], save=store.save_trial, workers=1, show_progress=False)
        rec = store.get_trial(spec.key)
    assert summary.finished[0]["status"] == "failed"
    assert rec["status"] == "failed" and "exited with code 3" in rec["error"]


def _die(spec, conn, models_dir):
    os._exit(3)


def test_sigkill_mid_study_loses_no_finished_trial_and_rerun_completes(tmp_path):
    db = tmp_path / "k.db"
    argv = [sys.executable, "-m", "suite.cli", "run", "--algo", "ppo", "--env", "TextMatch-v0", "--seeds", "0-5",
            "--steps", "3000", "--workers", "1", "--db", str(db), "--no-report", "--quiet"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    n_before = 0
    while time.time() < deadline:
        time.sleep(0.5)
        if db.exists():
            with ResultsStore(db) as store:
                n_before = len(store.finished_keys())
            if n_before >= 2:
                break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 2 <= n_before < 6
    with ResultsStore(db) as store:
        saved = {k: store.get_trial(k) for k in store.finished_keys()}
    assert all(len(r["curve"]["step"]) > 0 and r["evals"] for r in saved.values())  # complete, never half-written
    rerun = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{len(saved)} already in" in rerun.stderr
    with ResultsStore(db) as store:
        assert len(store.finished_keys()) == 6
        for k, r in saved.items():  # what was saved before the kill is untouched
            assert store.get_trial(k)["ended_at"] == r["ended_at"]


def test_ctrl_c_exits_130_with_one_message_and_keeps_finished_trials(tmp_path):
    db = tmp_path / "i.db"
    argv = [sys.executable, "-m", "suite.cli", "run", "--algo", "ppo", "--env", "TextMatch-v0", "--seeds", "0-5",
            "--steps", "3000", "--workers", "2", "--db", str(db), "--no-report", "--quiet"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline:
        time.sleep(0.5)
        if db.exists():
            with ResultsStore(db) as store:
                if store.finished_keys():
                    break
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground process group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    with ResultsStore(db) as store:
        assert 1 <= len(store.finished_keys()) < 6
