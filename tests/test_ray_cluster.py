"""A real Ray cluster, started apart from the study's process as a user would: a head (``ray start --head``) and
nodes joining it (``ray start --address``), on loopback, in a private temp dir, with ports of their own; studies run
through the suite's CLI with ``--executor ray --address``.

Covered: a plugin loads on the other node; a node killed mid-study (its trial re-run on a survivor, nothing lost, no
duplicate); the driver killed and the same command resumed; ``--trial-gpus`` on the node that declares a GPU, the
trial told its device; a paper-tier ``reproduce`` at a tiny budget merging like any other run; the whole cluster going
away (one line, non-zero exit, finished trials kept). Each record says where it ran.

Other processes on the machine use Ray too (xdist workers running tests/test_executor_ray.py, other checkouts), so
nothing here runs ``ray stop``: each node is one ``ray start --block`` process in a session of its own, stopped by
signalling it and its descendants. Every wait is on a condition (nodes alive in the GCS, records in the database).

Where the time goes: not the trials (tiny budgets) but each command's fixed cost: the CLI, and on every node it uses
a Ray worker and that worker's trial forkserver, each importing torch (``results/evidence/cluster-tests.csv``). So the
file runs as few commands as its checks need, on as few nodes as each needs; the head and the second node start
together (a joining node waits for the GCS); and a test's work that does not depend on each other runs at once (the
two ``--trial-gpus`` studies; the local ``reproduce`` while the cluster's runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

pytest.importorskip("ray", reason="Ray is not installed here: pip install -e '.[ray]' (ray 2.60.0)")

from suite.cli import main  # noqa: E402
from suite.store import ResultsStore  # noqa: E402
from tests.test_executor import SUITE, assert_complete, assert_intact, recorded, wait_until  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RAY = str(Path(sys.executable).with_name("ray"))
PLUGIN = ROOT / "examples" / "accelerated" / "ppo_logit_penalty.py"
DEADLINE_S = 300.0
"""Generous limit of every wait (the machine may be shared and loaded); a wait ends as soon as its condition holds."""

SYSTEM_CONFIG = json.dumps({"health_check_period_ms": 500, "health_check_failure_threshold": 4})
"""The head notices a dead node after ~2 s instead of Ray's default ~15 s."""


NODE_IP = "127.0.0.2"
"""The nodes' address: loopback (Linux routes all of 127.0.0.0/8 to ``lo``), but not 127.0.0.1, which ``ray start``
replaces with the machine's network address."""
ENV = {
    **os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16),
}  # fmt: skip
"""Every process of the test cluster and every driver: token authentication with a token of this module's own (not
``~/.ray/auth_token``, which an in-process Ray of another test may have written meanwhile, and which ``ray start``
would then pick up on its own)."""

WATCHER = """
import json, sys
from ray._raylet import GcsClient
for _ in sys.stdin:
    try:
        infos = GcsClient(address=sys.argv[1], cluster_id=None).get_all_node_info(timeout=5)
        alive = {node_id.hex(): info.node_manager_port for node_id, info in infos.items() if info.state == 0}
    except Exception:
        alive = {}
    print(json.dumps(alive), flush=True)
"""
"""Asked a line, answers the nodes the GCS holds alive (state ALIVE) as JSON, each id with its node manager's port
(which tells the nodes apart: each has a port of its own): a process apart, so this one's Ray (token cache,
environment) stays untouched for the in-process Ray tests of the same worker."""

JOIN_WAIT_S = str(int(DEADLINE_S))
"""How long a joining node's ``ray start`` keeps trying to reach the GCS (Ray's default: ~20 tries a second apart), so
a node may start together with its head: ``RAY_gcs_server_port_wait_time_s`` and ``RAY_NUM_REDIS_GET_RETRIES``."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Node:
    """One ``ray start --block`` process (a Ray node) in its own session."""

    def __init__(self, name: str, argv: list[str], port: int, log: Path, env: dict[str, str]) -> None:
        self.name, self.port, self.log = name, port, log
        with log.open("w") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.node_id: str | None = None

    def processes(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def running_trial(self) -> bool:
        """Whether a Ray worker of this node is executing a trial task (Ray titles it ``ray::suite_trial``)."""
        for p in self.processes():
            with contextlib.suppress(psutil.Error):
                if "suite_trial" in " ".join(p.cmdline()):
                    return True
        return False

    def kill(self) -> None:
        """SIGKILL the node and everything it started, as a machine that loses power."""
        for p in self.processes():
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """End the node: SIGTERM (``ray start --block`` then stops its own services), and whatever is left killed."""
        left = self.processes()
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class Cluster:
    """A head on loopback (:data:`NODE_IP`) and nodes joining it, in a private temp dir; nothing else on the machine is
    touched."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # Ray's session paths end in Unix socket names: keep the prefix short (pytest's tmp paths can be long)
        self.temp_dir = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))
        self.port = free_port()
        self.address = f"{NODE_IP}:{self.port}"
        self.env = ENV
        self._watcher: subprocess.Popen[str] | None = None
        self.nodes: list[Node] = []

    def _spawn(self, name: str, extra: list[str], cpus: int, gpus: int) -> Node:
        """Start a node's ``ray start --block`` (without waiting for it to join: :meth:`_await`)."""
        port = free_port()
        argv = [
            RAY, "start", "--block", "--node-ip-address", NODE_IP, "--temp-dir", str(self.temp_dir),
            "--num-cpus", str(cpus), "--num-gpus", str(gpus), "--disable-usage-stats",
            "--node-manager-port", str(port), "--object-manager-port", str(free_port()),
            "--min-worker-port", "0", "--max-worker-port", "0", "--object-store-memory", str(100 * 2**20),
            "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
            "--runtime-env-agent-port", str(free_port()), "--metrics-export-port", str(free_port()), *extra,
        ]  # fmt: skip
        env = {**self.env, "RAY_gcs_server_port_wait_time_s": JOIN_WAIT_S, "RAY_NUM_REDIS_GET_RETRIES": JOIN_WAIT_S}
        node = Node(name, argv, port, self.root / f"{name}.log", env)
        self.nodes.append(node)
        return node

    def _await(self, *nodes: Node) -> None:
        """Wait until every one of ``nodes`` is alive in the GCS, and learn its id (by its node manager's port)."""

        def joined() -> bool:
            for node in nodes:
                if node.proc.poll() is not None:
                    raise AssertionError(f"node {node.name} exited: {node.log.read_text()[-2000:]}")
            return {n.port for n in nodes} <= set(self.alive().values())

        wait_until(joined, DEADLINE_S, f"nodes {', '.join(n.name for n in nodes)} to join ({self.root})")
        ids = {port: node_id for node_id, port in self.alive().items()}
        for node in nodes:
            node.node_id = ids[node.port]

    def _head_args(self) -> list[str]:
        return ["--head", "--port", str(self.port), "--include-dashboard", "false",
                "--ray-client-server-port", str(free_port()), "--system-config", SYSTEM_CONFIG]  # fmt: skip

    def start(self, head_cpus: int, nodes: list[tuple[str, int, int]]) -> None:
        """Start the head (``head_cpus``) and ``nodes`` ((name, CPUs, GPUs)) together: each joining node's ``ray
        start`` waits for the head's GCS (:data:`JOIN_WAIT_S`); return once all are alive."""
        started = [self._spawn("head", self._head_args(), head_cpus, 0)]
        started += [self._spawn(name, ["--address", self.address], cpus, gpus) for name, cpus, gpus in nodes]
        self._await(*started)

    def add_node(self, name: str, cpus: int = 1, gpus: int = 0) -> Node:
        node = self._spawn(name, ["--address", self.address], cpus, gpus)
        self._await(node)
        return node

    def alive_nodes(self) -> set[str]:
        """Ids of the nodes the GCS holds alive (none while there is no head)."""
        return set(self.alive())

    def alive(self) -> dict[str, int]:
        """The nodes the GCS holds alive: id -> node manager port (none while there is no head)."""
        if not self.nodes:
            return {}
        if self._watcher is None:
            self._watcher = subprocess.Popen(
                [sys.executable, "-c", WATCHER, self.address], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True, env=self.env,
            )  # fmt: skip
        assert self._watcher.stdin is not None and self._watcher.stdout is not None
        self._watcher.stdin.write("?\n")
        self._watcher.stdin.flush()
        return {str(k): int(v) for k, v in json.loads(self._watcher.stdout.readline()).items()}

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.kill()
            self._watcher.wait()
        for node in reversed(self.nodes):
            node.stop()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Head (1 CPU) and a second node (1 CPU, a declared GPU): both nodes run CPU trials; only the second GPU ones."""
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.start(head_cpus=1, nodes=[("gpu-node", 1, 1)])
        yield c
    finally:
        c.stop()


def suite(*args: str, cluster: Cluster, db: Path) -> list[str]:
    return [*SUITE, *args, "--executor", "ray", "--address", cluster.address, "--db", str(db), "--quiet"]


def run(argv: list[str], timeout: float = DEADLINE_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=ENV)


def start(argv: list[str]) -> subprocess.Popen[str]:
    """A command started and left running (:func:`finish` waits for it): independent work of one test at once."""
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)


def finish(proc: subprocess.Popen[str], timeout: float = DEADLINE_S) -> subprocess.CompletedProcess[str]:
    """Wait for a command of :func:`start`: what :func:`run` would have returned."""
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def records(db: Path) -> list[dict[str, Any]]:
    with ResultsStore(db) as store:
        return [assert_complete(store, k) for k in sorted(store.finished_keys())]


def rows(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])
    finally:
        conn.close()


def where(rec: dict[str, Any]) -> dict[str, Any]:
    return rec["provenance"]["ray"]


# ------------------------------------------------------------------------------------------------------ tests


def test_a_plugin_loads_on_the_other_node_and_records_say_where_they_ran(cluster: Cluster, tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    argv = suite("run", "--plugin", str(PLUGIN), "--algo", "ppo-logit-penalty", "--env", "CartPole-v1", "--seeds", "0-1",
                 "--steps", "1024", "--workers", "2", "--no-report", cluster=cluster, db=db)  # fmt: skip
    done = run(argv)
    assert done.returncode == 0, done.stderr
    recs = records(db)
    assert [(r["algo"], r["status"]) for r in recs] == [("ppo-logit-penalty", "ok")] * 2
    # one CPU a node and two trials at a time: one ran on each node, the head's and the other
    assert {where(r)["node_id"] for r in recs} == {n.node_id for n in cluster.nodes}
    for r in recs:
        assert where(r)["resources"] == {"CPU": 1.0} and where(r)["gpu_ids"] == [] and where(r)["node_ip"] == NODE_IP


def test_trial_gpus_run_on_the_node_with_a_gpu_and_a_cuda_trial_fails_there_in_one_line(
    cluster: Cluster, tmp_path: Path
) -> None:
    db, failing_db = tmp_path / "g.db", tmp_path / "cuda.db"
    gpu_node = cluster.nodes[1]
    common = ("--algo", "ppo", "--env", "TextMatch-v0", "--steps", "512", "--no-report", "--trial-gpus", "1")
    # the two studies at once, each its own driver: their trials queue for the one GPU
    cuda = start(suite("run", *common, "--seeds", "2", "--device", "cuda", "--max-retries", "0", cluster=cluster,
                       db=failing_db))  # fmt: skip
    try:
        done = run(suite("run", *common, "--seeds", "0-1", cluster=cluster, db=db))
    finally:
        failing = finish(cuda)
    assert done.returncode == 0, done.stderr
    recs = records(db)
    assert [r["status"] for r in recs] == ["ok", "ok"]
    for r in recs:
        assert where(r)["node_id"] == gpu_node.node_id
        assert where(r)["resources"] == {"CPU": 1.0, "GPU": 1.0} and where(r)["gpu_ids"] == ["0"]
        assert where(r)["visible_devices"]["CUDA_VISIBLE_DEVICES"] == "0"  # the trial process was told its GPU
        assert r["provenance"]["device"] == "cpu"
    # told cuda, on a node whose GPU is declared but absent: the trial fails where it ran, in one line, recorded
    assert failing.returncode == 0, failing.stderr  # a failed trial is data
    (rec,) = records(failing_db)
    assert (rec["status"], rec["failure_kind"]) == ("failed", "worker_died")
    assert "sees no CUDA GPU" in rec["error"] and f"on node {gpu_node.node_id[:12]}" in rec["error"]
    assert "\n" not in rec["error"] and where(rec)["node_id"] == gpu_node.node_id
    assert "Traceback" not in failing.stderr


def test_a_driver_killed_mid_study_resumes_with_the_same_command(cluster: Cluster, tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    # one trial at a time: each command starts a Ray worker (and its trial forkserver) on one node only
    argv = suite("run", "--algo", "ppo", "--env", "TextMatch-v0", "--seeds", "0-3", "--steps", "2048", "--workers", "1",
                 "--no-report", cluster=cluster, db=db)  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, cwd=ROOT, env=ENV
    )
    try:
        wait_until(lambda: len(recorded(db)) >= 1, DEADLINE_S, "a trial to be recorded")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    saved = {r["key"]: r for r in records(db)}
    assert 1 <= len(saved) < 4
    rerun = run(argv)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{4 - len(saved)} trials to run, {len(saved)} already done" in rerun.stderr  # resumed, not restarted
    recs = records(db)
    assert len(recs) == rows(db) == 4 and all((r["status"], r["attempts"]) == ("ok", 1) for r in recs)
    for r in recs:
        if r["key"] in saved:
            assert r["ended_at"] == saved[r["key"]]["ended_at"]
    assert_intact(db)


def test_a_node_killed_mid_study_has_its_trial_rerun_on_a_survivor(cluster: Cluster, tmp_path: Path) -> None:
    doomed = cluster.add_node("doomed", cpus=1)
    db = tmp_path / "n.db"
    argv = suite("run", "--algo", "ppo", "--env", "TextMatch-v0", "--seeds", "0-3", "--steps", "4096", "--workers", "3",
                 "--no-report", cluster=cluster, db=db)  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
    try:
        wait_until(doomed.running_trial, DEADLINE_S, "a trial to run on the doomed node")
        doomed.kill()
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "retry" in err
    recs = records(db)
    assert len(recs) == rows(db) == 4 and all(r["status"] == "ok" for r in recs)
    retried = [r for r in recs if r["attempts"] == 2]
    assert len(retried) >= 1
    survivors = {n.node_id for n in cluster.nodes if n is not doomed}
    assert all(where(r)["node_id"] in survivors for r in retried)
    assert cluster.alive_nodes() == survivors
    assert_intact(db)


CLAIMS = """
name = "tiny-paper"
title = "A paper-tier claim at a tiny budget"
source = "a test"
location = "table 1"
stand_in = "a test stand-in"
tier = "smoke"
seeds = "0-1"

[arms.ppo]
algo = "ppo"

[[rows]]
label = "hello"
env = "TextMatch-v0"
budget = 400
cells = [{ column = "PPO", arm = "ppo", claimed = 1.0 }]
"""


def test_a_paper_tier_reproduce_on_the_cluster_merges_like_any_other_run(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--tier paper is each claim's own budget: 400 steps here. The records made on the cluster merge into a local
    run's database: the same trials, the same outcomes (nothing added, nothing differing)."""
    (tmp_path / "tiny.toml").write_text(CLAIMS)
    db = tmp_path / "cluster.db"
    argv = suite("reproduce", str(tmp_path / "tiny.toml"), "--tier", "paper", "-o", str(tmp_path / "out"),
                 cluster=cluster, db=db)  # fmt: skip
    on_cluster = start(argv)
    local = tmp_path / "local.db"  # the same claims run here by the local executor (in this process: no Ray), meanwhile
    argv = ["reproduce", str(tmp_path / "tiny.toml"), "--tier", "paper", "-o", str(tmp_path / "local"), "--db", str(local)]
    try:
        assert main([*argv, "--quiet", "--workers", "2"]) == 0
    finally:
        done = finish(on_cluster)
    assert done.returncode == 0, done.stderr
    assert "plan: 2 trials to run, 0 already done; 800 env steps" in done.stderr
    verdicts = json.loads((tmp_path / "out" / "verdicts.json").read_text())
    assert verdicts["tier"] == "paper"
    recs = records(db)
    assert [(r["budget"], r["status"]) for r in recs] == [(400, "ok")] * 2 and all(where(r)["node_id"] for r in recs)
    capsys.readouterr()
    assert main(["merge", str(db), "--db", str(local)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{db}: 0 trials added, 2 already here with the same outcome"


def test_a_cluster_that_goes_away_ends_the_study_in_one_line_keeping_finished_trials(cluster: Cluster, tmp_path: Path) -> None:
    """Last in this file: it stops the module's cluster."""
    db = tmp_path / "gone.db"
    argv = suite("run", "--algo", "ppo", "--env", "TextMatch-v0", "--seeds", "0-7", "--steps", "2048", "--workers", "2",
                 "--no-report", cluster=cluster, db=db)  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
    try:
        wait_until(lambda: len(recorded(db)) >= 1, DEADLINE_S, "a trial to be recorded")
        for node in reversed(cluster.nodes):
            node.kill()
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [line for line in err.splitlines() if line.startswith("suite:")]
    assert proc.returncode != 0 and lines == [err.strip().splitlines()[-1]], err
    assert "went away" in lines[0] and "Traceback" not in err
    other = [line for line in err.splitlines() if line.strip() and not line.startswith(("plan:", "  ", "study ", "suite:"))]
    assert other == [], err  # nothing from Ray's own logging
    recs = records(db)
    assert 1 <= len(recs) < 8 and all(r["status"] == "ok" for r in recs)
    assert_intact(db)
