"""The Ray executor on a local 2-CPU Ray instance: the same records, faults, retries and timeouts as locally; Ray
confined to a private network; a SIGKILLed driver leaves no Ray process and its re-run completes the study.

Skipped only where Ray cannot be installed (``pip install -e '.[ray]'``)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from pathlib import Path

import psutil
import pytest

pytest.importorskip("ray", reason="Ray is not installed here: pip install -e '.[ray]' (ray 2.60.0)")

from suite.executors import run_trials  # noqa: E402
from suite.executors.local import LocalBackend  # noqa: E402
from suite.executors.ray import RayBackend, start_local_ray  # noqa: E402
from suite.store import ResultsStore  # noqa: E402
from suite.trial import TrialSpec, deterministic_view, run_trial  # noqa: E402
from tests.test_executor import (  # noqa: E402
    SUITE,
    KillingBackend,
    assert_complete,
    assert_intact,
    descendants,
    recorded,
    tiny,
    wait_until,
)

OUTSIDE_NET = os.readlink("/proc/self/ns/net")
"""pytest's network namespace, read at collection, before any test started Ray."""


@pytest.fixture(scope="module")
def local_ray():
    """One in-process Ray instance with 2 CPUs for the module's tests (starting Ray takes seconds)."""
    shutdown = start_local_ray(2)
    yield
    shutdown()


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _name(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def _listening(pid: int) -> list[str]:
    """Local addresses of the TCP sockets in LISTEN state in the network namespace of ``pid``."""
    out = []
    for name in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                out.append(fields[1].split(":")[0])
    return out


def test_in_process_ray_listens_only_inside_a_private_network(local_ray):
    ray_processes = [p for p in descendants(os.getpid()) if p.name() in ("raylet", "gcs_server")]
    assert {p.name() for p in ray_processes} == {"raylet", "gcs_server"}
    outside = OUTSIDE_NET  # read before Ray started (the driver thread is inside while Ray runs)
    for p in ray_processes:
        assert os.readlink(f"/proc/{p.pid}/ns/net") != outside
        addresses = _listening(p.pid)
        assert addresses, p.name()
        # 127.0.0.1, as IPv4 or IPv4-mapped IPv6, in a namespace whose only interface is loopback
        assert set(addresses) <= {"0100007F", "0000000000000000FFFF00000100007F"}, addresses


def test_records_are_identical_whichever_executor_ran_them(local_ray, tmp_path):
    specs = [tiny(0), TrialSpec("grpo", "TextMatch-v0", 1, 512, n_eval_episodes=2).resolve()]
    on_ray, locally = [], []
    summary = run_trials(specs, save=on_ray.append, backend=RayBackend(workers=2, models_dir=tmp_path), show_progress=False)
    run_trials(specs, save=locally.append, backend=LocalBackend(2), show_progress=False)
    assert len(summary.finished) == 2
    by_key = {r["key"]: r for r in locally}
    for record in on_ray:
        assert record["status"] == "ok"
        view = deterministic_view(record)
        assert view == deterministic_view(by_key[record["key"]])
        spec = next(s for s in specs if s.key == record["key"])
        assert view == deterministic_view(run_trial(spec))
        assert Path(record["model_path"]).parent == tmp_path and Path(record["model_path"]).stat().st_size > 0
        where = record["provenance"]["ray"]  # where it ran: this process's Ray node, one CPU, no GPU
        assert (where["resources"], where["gpu_ids"], len(where["node_id"])) == ({"CPU": 1.0}, [], 56)


def test_ray_worker_killed_mid_trial_is_retried_and_recorded_once(local_ray, tmp_path):
    db = tmp_path / "k.db"
    spec = tiny(0, steps=4096)
    backend = KillingBackend(RayBackend(workers=1), attempts=(1,))
    with ResultsStore(db) as store:
        summary = run_trials([spec], save=store.save_trial, backend=backend, show_progress=False)
        rec = assert_complete(store, spec.key)
    assert backend.killed == [(spec.label, 1)] and summary.retried == 1
    assert (rec["status"], rec["attempts"]) == ("ok", 2)
    with ResultsStore(db) as store:
        backend = KillingBackend(RayBackend(workers=1), attempts=(1, 2))
        other = tiny(1, steps=4096)
        run_trials([other], save=store.save_trial, backend=backend, max_retries=1, show_progress=False)
        failed = store.get_trial(other.key)
    assert (failed["status"], failed["failure_kind"], failed["attempts"]) == ("failed", "worker_died", 2)
    # seen on its node, as locally, and the node named (in the line and in the record's provenance)
    node = failed["provenance"]["ray"]["node_id"]
    assert failed["error"] == f"WorkerDied: trial process killed by SIGKILL (on node {node[:12]} at {socket.gethostname()})"
    assert_intact(db)


def test_ray_trial_that_raises_is_kept_and_one_past_its_timeout_is_ended(local_ray, tmp_path):
    db = tmp_path / "f.db"
    raises = tiny(0, learning_rate=-1.0)
    hangs = TrialSpec("ppo", "CartPole-v1", 0, 50_000_000, n_eval_episodes=2).resolve()
    with ResultsStore(db) as store:
        # the raising trial runs without a limit (on a loaded machine its first update can come after 3 s: it was
        # once recorded as a timeout); the hanging one with a 3 s limit
        run_trials([raises], save=store.save_trial, backend=RayBackend(workers=1), trial_timeout=0, show_progress=False)
        summary = run_trials(
            [hangs], save=store.save_trial, backend=RayBackend(workers=1), trial_timeout=3, show_progress=False
        )
        a, b = assert_complete(store, raises.key), assert_complete(store, hangs.key)
    assert (a["status"], a["failure_kind"], a["attempts"]) == ("failed", "exception", 1)
    assert (b["status"], b["failure_kind"], b["attempts"]) == ("failed", "timeout", 2)
    assert summary.retried == 1
    assert_intact(db)


def test_ray_driver_sigkilled_then_interrupted_then_rerun_completes_the_study(tmp_path):
    """SIGKILL of the driver mid-study: Ray exits with it, finished trials stay. Ctrl-C of the re-run: exit 130, one
    line, no failure recorded. A third run completes the study, each trial once."""
    db = tmp_path / "d.db"
    argv = [*SUITE, "run", "--algo", "ppo", "--env", "TextMatch-v0", "--seeds", "0-5", "--steps", "2048", "--workers", "1",
            "--executor", "ray", "--db", str(db), "--no-report", "--quiet"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_until(lambda: len(recorded(db)) >= 1, 300, "a trial to be recorded")
    ray_processes = descendants(proc.pid)
    assert any(p.name() == "raylet" for p in ray_processes)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # Ray's dashboard and runtime-env agents notice a dead raylet only after a few checks and a GCS timeout (about
    # 2 minutes); everything else (GCS, raylet, the workers and their trial processes) exits with the driver.
    agents = [p for p in ray_processes if _name(p).startswith(("ray::DashboardAgent", "ray::RuntimeEnvAgent"))]
    core = [p for p in ray_processes if p not in agents]
    wait_until(lambda: not any(_alive(p) for p in core), 60, "Ray's processes to exit with the driver")
    for agent in agents:  # do not wait for them here
        with contextlib.suppress(psutil.NoSuchProcess):
            agent.kill()
    with ResultsStore(db) as store:
        saved = {k: assert_complete(store, k) for k in store.finished_keys()}
    assert 1 <= len(saved) < 6

    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_until(lambda: len(recorded(db)) > len(saved), 300, "the re-run to record a trial")
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.startswith("suite:")]
    assert proc.returncode == 130 and lines == [err.strip().splitlines()[-1]], err
    assert "interrupted by SIGINT" in lines[0] and "Traceback" not in err
    with ResultsStore(db) as store:
        assert all(assert_complete(store, k)["status"] == "ok" for k in store.finished_keys())
        done = len(store.finished_keys())

    rerun = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{6 - done} trials to run, {done} already done" in rerun.stderr  # resumed, not restarted
    with ResultsStore(db) as store:
        assert len(store.finished_keys()) == 6
        assert all(store.get_trial(k)["attempts"] == 1 for k in store.finished_keys())
        for k, r in saved.items():
            assert store.get_trial(k)["ended_at"] == r["ended_at"]
    assert_intact(db)
