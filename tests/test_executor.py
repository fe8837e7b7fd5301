"""The local executor and the policy every executor shares: records land once, failures are classified and retried
as the policy says, timeouts end hung trials, signals end a study cleanly at any moment, concurrent runs share work.

Faults are real: a worker process is SIGKILLed (through a backend wrapper that sees its pid), a trial raises (a
negative learning rate makes torch's Adam raise), a trial stops reporting (a plugin algorithm that blocks on an
event nobody sets), the driver is SIGKILLed (a CLI subprocess). The database is checked with ``PRAGMA
integrity_check`` after each."""

from __future__ import annotations

import functools
import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from suite.executors import ExecOptions, execute, run_trials
from suite.executors.common import (
    Backend,
    Event,
    Progress,
    Started,
    Task,
    default_trial_timeout,
    describe_exit,
    oom_kill_count,
)
from suite.executors.local import LocalBackend
from suite.store import ResultsStore
from suite.trial import TrialSpec, deterministic_view, run_trial

SUITE = [sys.executable, "-m", "suite.cli"]


# ------------------------------------------------------------------------------------------------ helpers


def tiny(seed: int, steps: int = 256, **overrides: Any) -> Any:
    """A TextMatch PPO trial of a few hundred steps (seconds)."""
    return TrialSpec("ppo", "TextMatch-v0", seed, steps, n_eval_episodes=2, overrides=overrides).resolve()


def assert_intact(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


def assert_complete(store: ResultsStore, key: str) -> dict[str, Any]:
    """The trial is recorded whole: its curve, evaluations and updates are there."""
    rec = store.get_trial(key)
    assert rec is not None
    if rec["status"] == "ok":
        assert len(rec["curve"]["step"]) > 0 and rec["evals"] and rec["updates"]
    return rec


class KillingBackend:
    """Wraps a backend and SIGKILLs a trial's worker process once it has reported progress, in the listed attempts:
    what the OOM killer or a crashing node does to a trial."""

    def __init__(self, inner: Backend, attempts: tuple[int, ...] = (1,)) -> None:
        self.inner, self.attempts = inner, attempts
        self.slots, self.name = inner.slots, inner.name
        self.pids: dict[int, int] = {}
        self.killed: list[tuple[str, int]] = []

    def start(self, task: Task) -> Any:
        return self.inner.start(task)

    def poll(self, timeout: float) -> list[Event]:
        events = self.inner.poll(timeout)
        for event in events:
            if isinstance(event, Started):
                self.pids[id(event.task)] = event.pid
            elif isinstance(event, Progress) and event.task.attempt in self.attempts:
                pid = self.pids.pop(id(event.task), None)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    self.killed.append((event.task.label, event.task.attempt))
        return events

    def kill(self, task: Task) -> None:
        self.inner.kill(task)

    def close(self) -> None:
        self.inner.close()


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def recorded(db: Path) -> set[str]:
    if not db.exists():
        return set()
    with ResultsStore(db) as store:
        return store.finished_keys()


# --------------------------------------------------------------------------------------------- records


def test_worker_records_equal_in_process_records(tmp_path):
    specs = [tiny(s) for s in (0, 1)]
    with ResultsStore(tmp_path / "a.db") as store:
        summary = run_trials(specs, save=store.save_trial, workers=2, show_progress=False)
        assert len(summary.finished) == 2 and summary.skipped == 0
        for r in specs:
            saved = store.get_trial(r.key)
            assert saved["status"] == "ok" and saved["attempts"] == 1
            assert deterministic_view(saved) == deterministic_view(_round_trip(tmp_path, run_trial(r)))
        again = run_trials(specs, save=store.save_trial, done_keys=store.finished_keys(), show_progress=False)
        assert again.skipped == 2 and not again.finished


def _round_trip(tmp_path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """A record as the store gives it back (JSON and float conversions), for comparisons with stored ones."""
    with ResultsStore(tmp_path / f"rt-{record['key'][:8]}.db") as store:
        store.save_trial(record)
        return store.get_trial(record["key"])


# -------------------------------------------------------------------------------------------- faults


def test_a_worker_killed_mid_trial_is_retried_and_recorded_once(tmp_path):
    db = tmp_path / "k.db"
    spec = tiny(0, steps=4096)
    backend = KillingBackend(LocalBackend(1), attempts=(1,))
    with ResultsStore(db) as store:
        summary = run_trials([spec], save=store.save_trial, backend=backend, show_progress=False)
        rec = assert_complete(store, spec.key)
    assert backend.killed == [(spec.label, 1)]
    assert summary.retried == 1 and len(summary.finished) == 1
    assert rec["status"] == "ok" and rec["attempts"] == 2 and rec["failure_kind"] is None
    assert deterministic_view(rec) == deterministic_view(_round_trip(tmp_path, run_trial(spec)))  # the retry is the trial
    assert_intact(db)


def test_a_worker_killed_in_every_attempt_is_recorded_as_worker_died(tmp_path):
    db = tmp_path / "k.db"
    spec = tiny(0, steps=4096)
    with ResultsStore(db) as store:
        backend = KillingBackend(LocalBackend(1), attempts=(1, 2))
        run_trials([spec], save=store.save_trial, backend=backend, max_retries=1, show_progress=False)
        rec = assert_complete(store, spec.key)
        assert backend.killed == [(spec.label, 1), (spec.label, 2)]
        assert (rec["status"], rec["failure_kind"], rec["attempts"]) == ("failed", "worker_died", 2)
        assert "SIGKILL" in rec["error"]
        # --max-retries 0: the first death is recorded
        other = tiny(1, steps=4096)
        run_trials([other], save=store.save_trial, backend=KillingBackend(LocalBackend(1)), max_retries=0, show_progress=False)
        assert (store.get_trial(other.key)["failure_kind"], store.get_trial(other.key)["attempts"]) == ("worker_died", 1)
    assert_intact(db)


def test_a_trial_that_raises_is_data_recorded_once_and_not_retried(tmp_path):
    db = tmp_path / "x.db"
    raises = tiny(0, learning_rate=-1.0)  # torch's Adam: "Invalid learning rate"
    diverges = TrialSpec("ppo", "CartPole-v1", 0, 4096, n_eval_episodes=2, overrides={"learning_rate": float("inf")}).resolve()
    with ResultsStore(db) as store:
        summary = run_trials([raises, diverges], save=store.save_trial, workers=2, max_retries=3, show_progress=False)
        a, b = assert_complete(store, raises.key), assert_complete(store, diverges.key)
    assert summary.retried == 0
    assert (a["status"], a["failure_kind"], a["attempts"]) == ("failed", "exception", 1)
    assert "Invalid learning rate" in a["error"] and "Traceback" in a["traceback"]
    assert (b["status"], b["failure_kind"], b["attempts"]) == ("diverged", "diverged", 1)
    assert_intact(db)


HANGS = """
import threading

from suite import api


@api.register("hangs", version="0.0.1", summary="a trial that stops reporting: it waits on an event nobody sets",
              reference="test", action_spaces=("discrete",), config=api.ActorCriticConfig,
              policy_factory=api.actor_critic_policy)
def train(ctx, cfg):
    threading.Event().wait()  # no step, no progress, no end: a real hang
"""


def test_a_trial_that_stops_reporting_is_ended_retried_and_recorded_as_timeout(tmp_path, monkeypatch):
    """A real worker process whose trial blocks on an event that is never set (a plugin algorithm): it reports
    nothing after it starts, so the default rule (no sign of life for the limit) ends it, retries it once and records
    a timeout; a trial beside it that does report runs to its end."""
    import suite.executors.common as common
    from suite import plugins

    plugin = tmp_path / "hangs.py"
    plugin.write_text(HANGS)
    monkeypatch.setattr(common, "default_trial_timeout", lambda budget: 2.0)
    db = tmp_path / "t.db"
    quick = tiny(1)
    # Resolving the spec loads the plugin into this process's registry: isolated, so that no later test in this
    # worker process sees a plugin algorithm among the built-ins.
    with plugins.isolated(), ResultsStore(db) as store:
        hangs = TrialSpec("hangs", "CartPole-v1", 0, 1024, n_eval_episodes=2, plugins=(str(plugin),)).resolve()
        # the quick trial runs without a limit: on a loaded machine it can be silent (importing torch) for 2 s
        run_trials([quick], save=store.save_trial, workers=1, trial_timeout=0, show_progress=False)
        summary = run_trials([hangs], save=store.save_trial, workers=2, max_retries=1, show_progress=False)
        rec = assert_complete(store, hangs.key)
        assert store.get_trial(quick.key)["status"] == "ok"
    assert (rec["status"], rec["failure_kind"], rec["attempts"]) == ("failed", "timeout", 2)
    assert rec["error"].startswith("Timeout: no progress for 2 s (hung;") and rec["wall_time_s"] >= 2.0
    assert summary.retried == 1
    assert_intact(db)


class ScriptedBackend:
    """A backend whose trials run no code: ``talks`` trials start and then report progress at every poll until
    ``rounds`` polls have passed, then finish with an algorithm failure (kept, never retried); ``silent`` trials start
    and then say nothing. Deterministic whatever the load: the driver looks at the clock only after it has handled a
    poll's events, so a trial that reports at every poll is never silent for longer than one poll."""

    name = "scripted"

    def __init__(self, talks: set[str], rounds: int, slots: int = 2) -> None:
        self.talks, self.rounds, self.slots = talks, rounds, slots
        self.running: dict[int, list[Any]] = {}
        self.killed: list[str] = []

    def start(self, task: Task) -> Any:
        self.running[id(task)] = [task, 0, False]
        return id(task)

    def poll(self, timeout: float) -> list[Event]:
        from suite.executors.common import Finished
        from suite.trial import failure_record

        time.sleep(min(timeout, 0.05))
        events: list[Event] = []
        for handle, state in list(self.running.items()):
            task, polls, started = state
            if not started:
                state[2] = True
                events.append(Started(task, 1, "scripted"))
                continue
            if task.resolved.key in self.talks:
                state[1] = polls + 1
                if state[1] >= self.rounds:
                    del self.running[handle]
                    events.append(Finished(task, failure_record(task.resolved, "Done", failure_kind="exception")))
                else:
                    events.append(Progress(task, polls))
        return events

    def kill(self, task: Task) -> None:
        self.killed.append(task.resolved.key)
        self.running.pop(id(task), None)

    def close(self) -> None:
        self.running.clear()


def test_by_default_a_trial_is_hung_only_when_it_stops_showing_progress(monkeypatch):
    """A trial that keeps reporting (a long Pong evaluation ticks at every step) runs past the default limit; one
    that falls silent is ended at it, retried, and recorded as a timeout that says why. A limit given with
    --trial-timeout is a total, progress or not."""
    import suite.executors.common as common

    monkeypatch.setattr(common, "default_trial_timeout", lambda budget: 0.3)
    talks, silent = tiny(0), tiny(1)
    saved: dict[str, dict[str, Any]] = {}

    def save(rec: dict[str, Any]) -> None:
        saved[rec["key"]] = rec

    backend = ScriptedBackend({talks.key}, rounds=40)  # >= 40 polls of 50 ms: 2 s, past the 0.3 s limit
    t0 = time.monotonic()
    summary = run_trials([talks, silent], save=save, backend=backend, max_retries=1, show_progress=False)
    assert time.monotonic() - t0 >= 40 * 0.05
    assert (saved[talks.key]["failure_kind"], saved[talks.key]["error"]) == ("exception", "Done")  # ran to its end
    rec = saved[silent.key]
    assert (rec["failure_kind"], rec["attempts"]) == ("timeout", 2) and summary.retried == 1
    assert rec["error"].startswith("Timeout: no progress for 0 s (hung;") and backend.killed == [silent.key] * 2

    saved.clear()
    backend = ScriptedBackend({talks.key}, rounds=40)
    run_trials([talks], save=save, backend=backend, max_retries=0, trial_timeout=0.3, show_progress=False)
    rec = saved[talks.key]
    assert rec["failure_kind"] == "timeout" and "ran longer than its 0 s limit" in rec["error"]


def test_an_evaluation_ticks_at_every_step_of_its_longest_episode():
    """What keeps a trial alive to the default timeout during a long evaluation (whole Pong games)."""
    import numpy as np

    from suite.trial import eval_seeds, evaluate_policy

    ticks = [0]

    def tick() -> None:
        ticks[0] += 1

    _, lengths = evaluate_policy(lambda o: np.zeros(len(o), dtype=np.int64), "CartPole-v1", {}, eval_seeds(0, 3), tick=tick)
    assert ticks[0] == int(lengths.max()) > 0


def test_default_timeout_rule():
    assert default_trial_timeout(2048) == pytest.approx(300 + 2048 / 5)  # smoke: 12 min
    assert default_trial_timeout(1_000_000) == pytest.approx(300 + 200_000)  # paper Hopper: SAC at 23 steps/s needs 12 h


def test_the_start_line_says_which_trials_its_time_estimate_leaves_out():
    from suite.plan import RunPlan

    plan = RunPlan(done=0, labels=("ppo/CartPole-v1", "grpo/LunarLander-v3", "grpo/LunarLander-v3"),
                   steps=(1_000, 10_000_000, 10_000_000), threads=(1, 1, 1), seconds=(82.0, math.nan, math.nan),
                   sources=("this run's database", "", ""))  # fmt: skip
    assert plan.summary(1) == (
        "3 trials to run, 0 already done; 20,001,000 env steps; 0.02 core-hours, about 82 s on 1 worker (known speeds "
        "only: 2 trials with no recorded speed)"
    )
    cluster = replace(plan, seconds=(7200.0, math.nan, math.nan), done=None, rerun=1)
    assert cluster.summary(None) == (
        "3 trials to run (1 recorded failures again), not yet checked against the database; 20,001,000 env steps; "
        "2.00 core-hours (known speeds only: 2 trials with no recorded speed)"
    )
    assert (
        replace(plan, seconds=(math.nan,) * 3)
        .summary(2)
        .endswith("; core-hours unknown (no recorded speed for ppo/CartPole-v1, grpo/LunarLander-v3)")
    )


def test_the_time_estimate_adds_a_trials_fixed_cost_and_times_a_warm_up_apart(tmp_path):
    """A smoke run is mostly start-up and evaluations (a 1,024-step Pong trial: ~60 s, 10 whole games), so a rate per
    step put a 10M-step run at days too many; and SB3's DQN collects 100,000 steps at ~1,000 steps/s before it trains
    at a tenth of that, so its smoke runs say nothing about training. The estimate is a trial's fixed cost plus its
    training time phase by phase; a budget past a warm-up no run crossed is left out (and counted)."""
    from suite.plan import make_run_plan
    from tests.test_store import make_record

    ppo = make_record(0, algo="ppo", env_id="ALE/Pong-v5", steps=1_000, steps_per_second=100.0, wall_time_s=70.0)
    dqn_cfg = {"learning_starts": 100_000}
    dqn_smoke = make_record(1, algo="sb3-dqn", env_id="ALE/Pong-v5", config=dqn_cfg, steps=1_000,
                            steps_per_second=1_000.0, wall_time_s=31.0)  # fmt: skip
    db = tmp_path / "r.db"
    with ResultsStore(db) as store:
        store.save_trial(ppo)
        store.save_trial(dqn_smoke)
    specs = [TrialSpec("ppo", "ALE/Pong-v5", seed=0, total_timesteps=1_000_000),
             TrialSpec("sb3-dqn", "ALE/Pong-v5", seed=0, total_timesteps=50_000),
             TrialSpec("sb3-dqn", "ALE/Pong-v5", seed=1, total_timesteps=1_000_000)]  # fmt: skip
    plan = make_run_plan(specs, done=0, db_path=db, claims_dir=None)
    # ppo: 60 s fixed + 1M / 100; sb3-dqn at 50k: 30 s + 50k at its warm-up's 1,000/s; at 1M: unknown
    assert plan.seconds[:2] == pytest.approx((60.0 + 10_000.0, 30.0 + 50.0)) and plan.unknown == ["sb3-dqn/ALE/Pong-v5"]
    assert plan.wall_seconds(1) == pytest.approx(10_140.0) and math.isnan(plan.seconds[2])
    stamps = [{"step": s, "final": s == 120_000, "returns": [-21.0], "lengths": [800], "wall_time_s": t}
              for s, t in ((100_000, 100.0), (120_000, 300.0))]  # fmt: skip
    longer = make_record(2, algo="sb3-dqn", env_id="ALE/Pong-v5", config=dqn_cfg, steps=120_000,
                         steps_per_second=400.0, wall_time_s=330.0, evals=stamps)  # fmt: skip
    with ResultsStore(db) as store:
        store.save_trial(longer)
    plan = make_run_plan(specs[2:], done=0, db_path=db, claims_dir=None)
    # fixed cost: the mean of 30 and 30 s; warm-up at the mean of 1,000/s (smoke) and 1,000/s (100k in 100 s); then
    # 20k steps in 200 s: 100 steps/s
    assert plan.seconds == pytest.approx((30.0 + 100.0 + 900_000 / 100.0,)) and plan.unknown == []


def test_trials_start_longest_first_by_their_recorded_speeds(tmp_path, monkeypatch):
    """With more trials than workers, a long trial started last keeps one worker busy while the others idle: the run
    starts the trials no record estimates first (they may be long), then the rest longest first (LPT)."""
    import suite.executors as executors
    from suite.plan import longest_first, make_run_plan
    from tests.test_store import make_record

    db = tmp_path / "lpt.db"
    with ResultsStore(db) as store:
        store.save_trial(make_record(0, algo="ppo", env_id="CartPole-v1", steps=100_000, steps_per_second=10_000.0,
                                     wall_time_s=12.0))  # fmt: skip
        store.save_trial(make_record(1, algo="ppo", env_id="ALE/Pong-v5", steps=1_000, steps_per_second=100.0,
                                     wall_time_s=70.0))  # fmt: skip
    specs = [TrialSpec("ppo", "CartPole-v1", seed=0, total_timesteps=100_000),  # ~12 s
             TrialSpec("ppo", "ALE/Pong-v5", seed=0, total_timesteps=1_000),  # ~70 s
             TrialSpec("grpo", "LunarLander-v3", seed=0, total_timesteps=1_000),  # no record
             TrialSpec("ppo", "ALE/Pong-v5", seed=1, total_timesteps=10_000),  # ~160 s
             TrialSpec("ppo", "CartPole-v1", seed=1, total_timesteps=100_000)]  # fmt: skip
    estimates = make_run_plan(specs, done=0, db_path=db, claims_dir=None).seconds
    assert estimates[3] > estimates[1] > estimates[0] == estimates[4]
    assert longest_first(estimates) == [2, 3, 1, 0, 4]

    resolved = [s.resolve() for s in specs]
    started: list[str] = []
    backend = ScriptedBackend(talks={r.key for r in resolved}, rounds=1, slots=1)
    original_start = backend.start
    monkeypatch.setattr(backend, "start", lambda task: (started.append(task.resolved.key), original_start(task))[1])
    monkeypatch.setattr(executors, "_backend", lambda options, models_dir, todo: backend)
    # priced from this database alone: the committed claim records know grpo on LunarLander
    monkeypatch.setattr(executors, "make_run_plan", functools.partial(make_run_plan, claims_dir=None))
    execute(resolved, db_path=db, study="lpt", tier="custom", options=ExecOptions(workers=1, show_progress=False))
    assert started == [resolved[i].key for i in (2, 3, 1, 0, 4)]


def test_the_run_tells_when_a_worker_is_left_without_a_trial(tmp_path, monkeypatch):
    """``on_spare_worker`` is called once, when every trial has started and a worker is free (the CLI gets the report
    under way then, on the CPU the last trials leave idle), and what it returns is waited for before the run ends."""
    import suite.executors as executors

    specs = [TrialSpec("ppo", "CartPole-v1", seed=s, total_timesteps=1_000) for s in range(5)]
    resolved = [s.resolve() for s in specs]
    backend = ScriptedBackend(talks={r.key for r in resolved}, rounds=3, slots=2)
    started: list[str] = []
    original_start = backend.start
    monkeypatch.setattr(backend, "start", lambda task: (started.append(task.resolved.key), original_start(task))[1])
    monkeypatch.setattr(executors, "_backend", lambda options, models_dir, todo: backend)
    calls: list[tuple[int, int]] = []
    waited: list[int] = []

    def on_spare_worker():
        calls.append((len(started), len(backend.running)))
        return lambda: waited.append(len(started))

    options = ExecOptions(workers=2, show_progress=False, on_spare_worker=on_spare_worker)
    summary = execute(resolved, db_path=tmp_path / "spare.db", study="spare", tier="custom", options=options)
    assert len(summary.finished) == 5
    assert len(calls) == 1 and calls[0][0] == 5 and calls[0][1] < 2
    assert waited == [5]


def test_oom_kills_are_told_from_other_deaths(tmp_path, monkeypatch):
    import suite.executors.common as common

    v1 = tmp_path / "memory.oom_control"
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    v2 = tmp_path / "memory.events"
    v2.write_text("low 0\nhigh 0\nmax 2\noom 1\noom_kill 7\noom_group_kill 0\n")
    monkeypatch.setattr(common, "_cgroup_oom_files", lambda pid="self": [tmp_path / "missing", v1])
    assert oom_kill_count() == 3
    monkeypatch.setattr(common, "_cgroup_oom_files", lambda pid="self": [v2])
    assert oom_kill_count() == 7
    assert describe_exit(-9, 3, 4)[0] == "oom"
    assert describe_exit(-9, 4, 4) == ("worker_died", "WorkerDied: trial process killed by SIGKILL")
    assert "an OOM kill looks the same" in describe_exit(-9, None, None)[1]
    assert describe_exit(-11, 3, 4)[1] == "WorkerDied: trial process killed by SIGSEGV"  # only a SIGKILL can be the OOM killer
    assert describe_exit(3, None, None)[1] == "WorkerDied: trial process exited with code 3 without a record"


# ---------------------------------------------------------------------------------------------- signals


def test_a_signal_during_a_save_lets_the_save_finish_and_ends_the_run(tmp_path, monkeypatch):
    db = tmp_path / "s.db"
    specs = [tiny(s) for s in range(4)]
    original = ResultsStore._write_series

    def signalled(self, conn, curve_row, *rest):
        os.kill(os.getpid(), signal.SIGINT)  # arrives inside the trial's transaction
        original(self, conn, curve_row, *rest)

    monkeypatch.setattr(ResultsStore, "_write_series", signalled)
    summary = execute(specs, db_path=db, study="s", tier="custom", options=ExecOptions(workers=1, show_progress=False))
    assert summary.interrupted and summary.signum == signal.SIGINT and summary.exit_code == 130
    with ResultsStore(db) as store:
        keys = store.finished_keys()
        assert len(keys) == len(summary.finished) == 1  # the save in progress completed; nothing started after
        assert_complete(store, next(iter(keys)))
        assert store.active_runs().empty  # the run unregistered and released its claims
    assert_intact(db)


def test_a_signal_while_workers_start_records_nothing_for_them(tmp_path, monkeypatch):
    db = tmp_path / "w.db"
    original = LocalBackend.start

    def start_then_signal(self, task):
        handle = original(self, task)
        os.kill(os.getpid(), signal.SIGTERM)  # the trial process exists and is starting
        return handle

    monkeypatch.setattr(LocalBackend, "start", start_then_signal)
    summary = execute(
        [tiny(s) for s in range(3)], db_path=db, study="w", tier="custom", options=ExecOptions(workers=2, show_progress=False)
    )
    assert summary.interrupted and summary.exit_code == 143 and not summary.finished and summary.not_run == 3
    assert recorded(db) == set()  # started, interrupted: recorded as nothing, not as a failure
    assert_intact(db)


STORM = textwrap.dedent(
    """
    import os, signal, threading, time
    from suite.executors.common import Policy, Task, drive
    from suite.executors.local import LocalBackend
    from suite.trial import TrialSpec

    def storm():  # what a terminal does on Ctrl-C, again and again, while trial processes start and run
        while True:
            os.killpg(0, signal.SIGINT)
            time.sleep(0.005)

    if __name__ == "__main__":
        # The driver lives through the storm with a handler that does nothing (not SIG_IGN, which its children
        # would inherit): only the forkserver and the trial processes are under test.
        signal.signal(signal.SIGINT, lambda signum, frame: None)
        specs = [TrialSpec("ppo", "TextMatch-v0", s, 64, n_eval_episodes=1).resolve() for s in range(6)]
        threading.Thread(target=storm, daemon=True).start()
        records = []
        drive([Task(s) for s in specs], LocalBackend(2), save=records.append, policy=Policy(max_retries=0),
              interrupted=lambda: None, show_progress=False)
        print(sorted(r["status"] for r in records), sum(r["failure_kind"] is not None for r in records))
    """
)


def test_workers_never_die_of_the_terminals_ctrl_c(tmp_path):
    """SIGINT to the whole process group every 5 ms while 6 trial processes are forked, start and run: none dies
    (before the fix, one that got it between fork and its first line exited and was recorded as a failure)."""
    script = tmp_path / "storm.py"
    script.write_text(STORM)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, start_new_session=True,
        cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[0] == "['ok', 'ok', 'ok', 'ok', 'ok', 'ok'] 0", done.stderr[-3000:]


FORKED_FROM = textwrap.dedent(
    """
    import multiprocessing as mp, os, sys
    from suite.executors.local import _ImportsProcess, _context, start_forkserver

    def probe(conn):
        conn.send((os.getppid(), "stable_baselines3" in sys.modules, "torch" in sys.modules))

    def run(process):
        parent, child = mp.get_context("forkserver").Pipe(duplex=False)
        process._args = (child,)
        process.start()
        child.close()
        answer = parent.recv()
        process.join()
        return answer

    if __name__ == "__main__":
        start_forkserver()
        plain = run(_context().Process(target=probe))
        with_sb3 = _ImportsProcess(target=probe)
        with_sb3.imports = ("stable_baselines3",)
        sb3 = run(with_sb3)
        again = _ImportsProcess(target=probe)
        again.imports = ("stable_baselines3",)
        second = run(again)  # the same server, started once
        print(plain[1:], sb3[1:], sb3[0] != plain[0], second[0] == sb3[0], "stable_baselines3" in sys.modules)
    """
)


def test_a_trial_with_imports_is_forked_from_a_server_that_has_them(tmp_path):
    """An algorithm's ``imports`` (SB3 for the ``sb3-*`` baselines) are preloaded by a forkserver of their own, so a
    trial no longer pays them at its start; that server is started once, the main forkserver (every suite trial's
    parent) stays without them, and so does the driver."""
    script = tmp_path / "forked_from.py"
    script.write_text(FORKED_FROM)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[0] == "(False, True) (True, True) True True False", done.stderr[-3000:]


TRIAL_CHILD = textwrap.dedent(
    """
    import json, multiprocessing as mp, sys

    def probe(conn):
        born_with = set(sys.modules)
        from suite import provenance

        warm = [provenance._git_state.cache_info().currsize, provenance._package_versions.cache_info().currsize]
        import suite.cli  # what the child re-imports as its main module (the ``suite`` console script's)
        from suite.executors.local import _worker  # the trial processes' target, unpickled from this module
        from suite.trial import TrialSpec, run_trial

        for algo in ("ppo", "ppo-adaptive-clip", "ppo-rlvr-prm", "grpo", "grpo-pairwise"):
            for env in ("CartPole-v1", "TextMatch-v0"):
                run_trial(TrialSpec(algo, env, 0, 300, n_eval_episodes=1).resolve())
        new = set(sys.modules) - born_with
        conn.send({
            "heavy": [m for m in ("pandas", "pyarrow", "scipy", "matplotlib") if m in sys.modules],
            "imported": sorted(m for m in new if m.split(".")[0] in ("suite", "psutil", "sqlite3", "pandas")),
            "warm": warm,
        })

    if __name__ == "__main__":
        from suite.executors.local import _context, start_forkserver

        start_forkserver()
        parent, child = mp.get_context("forkserver").Pipe(duplex=False)
        process = _context().Process(target=probe, args=(child,))
        process.start()
        child.close()
        print(json.dumps(parent.recv()))
        process.join()
    """
)


@pytest.fixture(scope="module")
def trial_child(tmp_path_factory) -> dict[str, Any]:
    """What a real forkserver child had loaded after running the five suite algorithms on CartPole and TextMatch."""
    script = tmp_path_factory.mktemp("trial-child") / "trial_child.py"
    script.write_text(TRIAL_CHILD)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_suite_trial_process_loads_no_pandas(trial_child):
    """pandas (with pyarrow) is the driver's and the report's: a trial process that imported it (it came with the
    results store through the executors' package) spent ~0.3 s of every trial's start on it and carried ~65 MB of it
    in every trial's recorded peak RSS (ppo on TextMatch: 261 -> 194 MB once it was gone, 2026-12-03)."""
    assert trial_child["heavy"] == []


def test_a_trial_process_is_born_with_every_suite_module_it_runs(trial_child):
    """Every module a trial process runs (the executor's worker and the results store under it, the memory probe,
    psutil, the CLI it re-imports as its main module) is preloaded by the forkserver: a trial process that imported
    them itself spent 60-80 ms of every trial's start on it (measured 2026-12-04 with ``-X importtime``: 72 trials of
    the main job, ~5 CPU-seconds), and forked it costs nothing (its resident memory at birth is not larger: the trial
    imported them before its memory baseline anyway). Its provenance caches (git state, package versions) are
    filled too: it no longer runs git when it records its provenance."""
    assert trial_child["imported"] == []
    assert trial_child["warm"] == [1, 1]


def _sigterm_caught(pid: int) -> bool:
    """Whether the process has installed a SIGTERM handler, i.e. the CLI's main() is running."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def test_sigint_and_sigterm_at_random_moments_end_the_study_cleanly(tmp_path):
    """20 runs of a small study, each sent SIGINT (Ctrl-C: the whole process group) or SIGTERM at a moment drawn
    uniformly from the start of main() to past the end of a complete run (measured first): parsing, imports, store,
    forkserver start, trial processes starting and running, records being saved, the summary. Every run exits
    130/143 with one line (or 0 if it had finished), records only finished trials, whole, never a failure."""
    db = tmp_path / "r.db"
    argv = [*SUITE, "run", "--algo", "ppo", "--env", "TextMatch-v0", "--seeds", "0-2", "--steps", "128", "--workers", "2",
            "--db", str(db), "--no-report", "--quiet", "--no-save-models"]  # fmt: skip

    def fresh_database() -> None:
        for path in [db, *db.parent.glob(db.name + "-*")]:
            path.unlink(missing_ok=True)

    def launch() -> tuple[subprocess.Popen, float]:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        wait_until(lambda: _sigterm_caught(proc.pid) or proc.poll() is not None, 120, "main() to start")
        return proc, time.monotonic()

    proc, t0 = launch()  # a complete run: how long the window is
    out, err = proc.communicate(timeout=600)
    full = time.monotonic() - t0
    assert proc.returncode == 0 and len(recorded(db)) == 3, err
    rng = random.Random(8)
    outcomes = []
    for i in range(20):
        fresh_database()
        sig = signal.SIGINT if i % 2 == 0 else signal.SIGTERM
        proc, t0 = launch()
        time.sleep(rng.uniform(0, 1.1 * full))
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=120)
        lines = [line for line in err.splitlines() if line.strip()]
        assert "Traceback" not in err and not any(line.lstrip().startswith(("failed", "retry")) for line in lines), err
        if proc.returncode == 0:
            assert "ppo" in out and len(recorded(db)) == 3
        else:
            assert proc.returncode == 128 + sig, err
            interrupted = [line for line in lines if line.startswith("suite: interrupted")]
            assert interrupted == [lines[-1]] and signal.Signals(sig).name in lines[-1], err
        if db.exists():
            with ResultsStore(db) as store:
                for key in store.finished_keys():
                    assert assert_complete(store, key)["status"] == "ok"
                assert store.active_runs().empty
            assert_intact(db)
        outcomes.append(proc.returncode)
    assert outcomes.count(130) + outcomes.count(143) >= 10, outcomes  # most signals landed mid-run


def test_sigkill_of_the_driver_loses_no_finished_trial_and_the_rerun_completes(tmp_path):
    db = tmp_path / "k.db"
    argv = [*SUITE, "run", "--algo", "ppo", "--env", "TextMatch-v0", "--seeds", "0-3", "--steps", "2048", "--workers", "1",
            "--db", str(db), "--no-report", "--quiet"]  # fmt: skip
    err_path = tmp_path / "driver.err"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)

    def first_record() -> bool:
        if proc.poll() is not None:  # the driver ended before the kill: say why, not "timed out"
            raise AssertionError(f"the run ended early (exit {proc.returncode}): {err_path.read_text()[-3000:]}")
        return len(recorded(db)) >= 1

    try:
        wait_until(first_record, 300, "a trial to be recorded")
    except AssertionError as exc:  # what the run and its processes were doing, for a failure under load
        tree = [f"{p.pid} {p.status()} cpu={sum(p.cpu_times()[:2]):.1f}s {' '.join(p.cmdline())[:120]}" for p in
                [psutil.Process(proc.pid), *descendants(proc.pid)] if p.is_running()]  # fmt: skip
        proc.kill()
        raise AssertionError(f"{exc}; stderr: {err_path.read_text()[-3000:]!r}; processes: {tree}") from None
    workers = descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)  # the driver only: its trial processes must notice and exit by themselves
    proc.wait()
    wait_until(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in workers), 30, "orphans to exit")
    with ResultsStore(db) as store:
        saved = {k: assert_complete(store, k) for k in store.finished_keys()}
    assert 1 <= len(saved) < 4 and all(r["status"] == "ok" for r in saved.values())
    rerun = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{len(saved)} already done" in rerun.stderr
    with ResultsStore(db) as store:
        assert len(store.finished_keys()) == 4
        assert all(store.get_trial(k)["attempts"] == 1 for k in store.finished_keys())
        for k, r in saved.items():  # what was saved before the kill is untouched
            assert store.get_trial(k)["ended_at"] == r["ended_at"]
    assert_intact(db)


# ---------------------------------------------------------------------------------------- load and runs


def test_200_smoke_trials_on_2_workers_land_200_records(tmp_path):
    db = tmp_path / "load.db"
    specs = [TrialSpec("ppo", "TextMatch-v0", s, 16, n_eval_episodes=1).resolve() for s in range(200)]
    options = ExecOptions(workers=2, save_models=False, show_progress=False, print_table=False, max_retries=0)
    summary = execute(specs, db_path=db, study="load", tier="custom", options=options)
    assert len(summary.finished) == 200 and not summary.interrupted and summary.retried == 0
    with ResultsStore(db) as store:
        trials = store.trials(study="load")
        assert len(trials) == 200 and set(trials["status"]) == {"ok"} and set(trials["attempts"]) == {1}
    assert_intact(db)


def test_two_runs_on_one_database_at_once_run_each_trial_once(tmp_path):
    db = tmp_path / "two.db"
    argv = [*SUITE, "run", "--algo", "ppo", "--env", "TextMatch-v0", "--seeds", "0-7", "--steps", "256", "--workers", "1",
            "--db", str(db), "--no-report", "--quiet", "--no-save-models"]  # fmt: skip
    runs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=600) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    ran = [{line.split()[1] for line in err.splitlines() if line.lstrip().startswith("ok ")} for _, err in outputs]
    assert not ran[0] & ran[1] and len(ran[0] | ran[1]) == 8, ran  # every trial once, by one of them
    with ResultsStore(db) as store:
        trials = store.trials()
        assert len(trials) == 8 and set(trials["attempts"]) == {1} and store.active_runs().empty
    assert_intact(db)


def test_retry_failed_runs_machine_failures_again_and_the_report_uses_the_new_record(tmp_path):
    db = tmp_path / "rf.db"
    killed, raises = tiny(0, steps=4096), tiny(1, learning_rate=-1.0)
    with ResultsStore(db) as store:
        store.add_to_study("rf", [killed.key, raises.key])
        run_trials(
            [killed, raises], save=store.save_trial, backend=KillingBackend(LocalBackend(1), attempts=(1,)), max_retries=0,
            show_progress=False,
        )  # fmt: skip
        assert store.get_trial(killed.key)["failure_kind"] == "worker_died"
    options = ExecOptions(workers=1, show_progress=False, print_table=False)
    plain = execute([killed, raises], db_path=db, study="rf", tier="custom", options=options)
    assert not plain.finished  # without --retry-failed every recorded trial is kept
    env = execute([killed, raises], db_path=db, study="rf", tier="custom", options=replace(options, retry_failed="env"))
    assert [r["key"] for r in env.finished] == [killed.key]  # the algorithm's own failure is data: not run again
    with ResultsStore(db) as store:
        new = store.get_trial(killed.key)
        assert (new["status"], new["attempts"]) == ("ok", 2)  # cumulative: one failed attempt, then this one
        report = store.trials(study="rf").set_index("key")
        assert report.loc[killed.key, "status"] == "ok"  # what a report reads is the new record
    everything = execute([killed, raises], db_path=db, study="rf", tier="custom", options=replace(options, retry_failed="all"))
    assert [r["key"] for r in everything.finished] == [raises.key]
    assert_intact(db)


def test_a_signal_inside_interrupts_after_is_raised_only_when_the_block_ends():
    """A Ctrl-C while ale_py's native module initialises aborted the process ('terminate called', seen once in the
    random-signal test): the CLI imports torch and the envs inside interrupts_after, which holds the signal."""
    from suite.interrupts import Interrupted, interrupts_after, raising_interrupts

    reached_end = False
    with raising_interrupts(), pytest.raises(Interrupted) as caught:
        with interrupts_after():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # the handler runs at the next bytecode boundary: it must not raise here
            reached_end = True
    assert reached_end and caught.value.exit_code == 130


def test_the_progress_bar_eta_is_the_plans_wall_time_then_follows_the_pace():
    """The bar's first ETA is the plan's wall time on the run's workers (what ``--plan`` and the start line say);
    running trials count with what their reported steps leave of their planned time, and the finished trials' wall
    time over their planned time scales it."""
    from suite.executors.common import Task, eta_text
    from suite.plan import RunPlan

    specs = [TrialSpec("ppo", "CartPole-v1", seed=s, total_timesteps=1_000) for s in range(4)]
    seconds = (1800.0, 1800.0, 900.0, math.nan)
    plan = RunPlan(done=0, labels=("ppo/CartPole-v1",) * 4, steps=(1_000,) * 4, threads=(1,) * 4, seconds=seconds,
                   sources=("x",) * 4)  # fmt: skip
    tasks = [Task(s.resolve(), planned_s=p) for s, p in zip(specs, seconds, strict=True)]
    assert plan.wall_text(2) == "about 45 min on 2 workers"  # 1800 | 1800 + 900
    assert eta_text(tasks, [], slots=2) == "ETA 45 min + 1 trials with no recorded speed"
    tasks[0].steps = tasks[1].steps = 500  # both running, half their budget reported: 900 s each left
    assert eta_text(tasks[2:3], tasks[:2], slots=2) == "ETA 30 min"  # 900 | 900 + 900
    assert eta_text(tasks[2:3], tasks[:2], slots=2, pace={("ppo", "CartPole-v1"): 1.5}) == "ETA 45 min"


def test_the_eta_paces_each_algorithm_and_env_by_its_own_finished_trials():
    """A pair whose records are stale (priced at 8x its speed today) must not speed up the ETA of a pair priced
    right: each pair's planned times scale by its own finished trials' pace, an unseen pair's by 1 (the ablation
    re-run of issue 57 showed ETA 4 min where 25 min were left, with one pace for the run)."""
    from suite.executors.common import Task, eta_text

    def tasks(algo: str, n: int, planned: float) -> list[Task]:
        specs = [TrialSpec(algo, "CartPole-v1", seed=s, total_timesteps=1_000) for s in range(n)]
        return [Task(spec.resolve(), planned_s=planned) for spec in specs]

    stale, right = tasks("ppo", 2, 800.0), tasks("grpo", 4, 600.0)
    assert eta_text([stale[1], *right], [], slots=2) == "ETA 30 min"  # 800 + 600 | 600 + 600 + 600
    # ppo's first trial took 100 s of its planned 800: ppo's pace is 1/8, grpo's stays 1
    paced = eta_text([stale[1], *right], [], slots=2, pace={("ppo", "CartPole-v1"): 0.125})
    assert paced == "ETA 22 min"  # 600 + 600 + 100 | 600 + 600
    # one pace for the run (the old rule) would have said 1800 s / 8: 4 min
    assert eta_text(right, [], slots=2, pace={("grpo", "CartPole-v1"): 0.5}) == "ETA 10 min"  # 300 + 300 per worker
