"""The run-queue wait (suite/schedstat.py): starvation by other load counts, a thread's own sleep does not.

Bounds are conditions the kernel's accounting guarantees, with wide margins, never timings: two CPU-bound processes
pinned to one CPU cannot both run at once, so while both are runnable one of them waits; a sleeping thread is not
runnable, so its sleep never counts as waiting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from suite.schedstat import SCHEDSTAT, RunQueueClock

pytestmark = pytest.mark.skipif(not Path(SCHEDSTAT).exists(), reason="the kernel does not provide run-queue waits")

BUSY = """
import json, os, sys, time
from suite.schedstat import RunQueueClock
os.sched_setaffinity(0, {int(sys.argv[1])})
clock = RunQueueClock()
clock.read()
print("ready", flush=True)
sys.stdin.readline()  # the start signal: both processes are pinned and ready
q0, t0, c0 = clock.read(), time.perf_counter(), time.process_time()
x = 0
for i in range(int(sys.argv[2])):  # a fixed amount of CPU work, not a time
    x += i * i
wall, cpu, wait = time.perf_counter() - t0, time.process_time() - c0, clock.read() - q0
print(json.dumps({"wall": wall, "cpu": cpu, "wait": wait}), flush=True)
"""


def test_two_busy_processes_on_one_cpu_wait_for_each_other():
    cpu = min(os.sched_getaffinity(0))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUSY, str(cpu), "4000000"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )  # fmt: skip
        for _ in range(2)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        out = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r in out:
        assert 0 <= r["wait"] <= r["wall"] + 0.01, r
        assert r["cpu"] > 0.05, r  # the work really ran
    # While both are runnable on the one CPU, one of them waits: over their overlap (about the shorter wall time,
    # less the start-up skew) the waits add up to at least that overlap. Half of it is a wide margin.
    assert out[0]["wait"] + out[1]["wait"] >= 0.5 * min(r["wall"] for r in out), out


def test_a_sleeping_thread_does_not_wait_on_the_run_queue():
    seen: dict[str, float] = {}

    def sleeper() -> None:
        clock = RunQueueClock()
        q0, t0 = clock.read(), time.perf_counter()
        time.sleep(0.3)  # the behaviour under test (a voluntary wait), not a synchronisation
        seen["wall"], q1 = time.perf_counter() - t0, clock.read()
        assert q0 is not None and q1 is not None
        seen["wait"] = q1 - q0
        clock.close()

    thread = threading.Thread(target=sleeper)
    thread.start()
    thread.join()
    # the thread's wall time is its 0.3 s asleep plus whatever it ran or waited around it: the sleep itself never
    # counts as run-queue wait, however loaded the machine (only the wake-up's wait for a CPU does)
    assert 0 <= seen["wait"] <= seen["wall"] - 0.3 + 0.01, seen


def test_a_clock_follows_the_thread_that_reads_it():
    clock = RunQueueClock()
    assert clock.read() is not None
    results: list[float | None] = []
    thread = threading.Thread(target=lambda: results.append(clock.read()))
    thread.start()
    thread.join()
    assert results[0] is not None and clock._thread == thread.native_id  # reopened for the reading thread
    clock.close()


TRIAL = """
import json, os, sys
os.sched_setaffinity(0, {int(sys.argv[1])})
from suite.trial import TrialSpec, run_trial
rec = run_trial(TrialSpec(algo="ppo", env_id="CartPole-v1", seed=0, total_timesteps=2048, n_eval_episodes=1).resolve())
print(json.dumps({n: p for n, p in rec["phases"].items() if n != "eval" and p["calls"]}))
"""


def test_a_starved_trial_keeps_its_cpu_time_on_the_unstarved_wall_clock():
    # a trial sharing its one CPU with a busy process: it waits about half its wall time; wall - wait is what it
    # ran (it neither sleeps nor does I/O), so it must come out at its CPU time, not below (which a wait window
    # wider than the wall clock's gave: preemptions at a read's return counted as waiting, not as wall time)
    cpu = min(os.sched_getaffinity(0))
    busy = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass"])
    try:
        done = subprocess.run([sys.executable, "-c", TRIAL, str(cpu)], capture_output=True, text=True, timeout=600)
    finally:
        busy.kill()
        busy.wait()
    assert done.returncode == 0, done.stderr
    phases = json.loads(done.stdout.strip().splitlines()[-1])
    wall, wait, cpu_s = (sum(p[k] for p in phases.values()) for k in ("time_s", "wait_s", "cpu_s"))
    assert wait >= 0.2 * wall, phases  # it was starved
    assert 0.8 * cpu_s <= wall - wait <= 1.5 * cpu_s + 0.05, phases


def test_without_the_file_nothing_is_read_or_recorded(monkeypatch, tmp_path):
    missing = RunQueueClock(str(tmp_path / "no-schedstat"))
    assert missing.read() is None and missing.available is False and missing.read() is None

    import suite.schedstat
    from suite.trial import TrialSpec, run_trial

    monkeypatch.setattr(suite.schedstat, "SCHEDSTAT", str(tmp_path / "no-schedstat"))
    rec = run_trial(TrialSpec(algo="ppo", env_id="TextMatch-v0", seed=0, total_timesteps=128, n_eval_episodes=1).resolve())
    assert rec["status"] == "ok"
    timed = {name: p for name, p in rec["phases"].items() if p["calls"]}
    assert set(timed) >= {"rollout", "update"} and all("wait_s" not in p for p in timed.values())
