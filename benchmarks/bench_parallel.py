"""Benchmark: parallel efficiency of the executors on independent CartPole trials (2 workers vs 1, side by side).

A study of ``--trials`` `ppo` trials on CartPole-v1 (seeds 0.., ``--steps`` each: the same work, other random
numbers) runs through ``suite.executors.execute`` into a fresh database, once on 1 worker and once on 2, for each
executor asked for:

``local``
    the local executor (a process per trial on this machine);
``ray``
    the Ray executor with Ray started in this process (``ray.init``, as ``suite run --executor ray`` does);
``ray-cluster``
    the Ray executor on a two-node cluster started apart from this process on loopback: a head node
    (``ray start --head --num-cpus 1``) and a second node joining it (``ray start --address``), one CPU each, in a
    private temporary directory, both stopped (only they) when the measurement ends. With 2 workers one trial runs
    on each node, so the ratio includes what crossing nodes costs (the record and model shipped back to the driver).

Throughput is trials per second of the trials' span: from the first trial's start to the last trial's end, read
from the records, so the fixed start-up (imports, forkserver, ``ray.init``) is not counted but every per-trial cost
(process start, scheduling, saving) is. The target is the ratio of the two throughputs (ideal: 2.0 on 2 free cores).
The dev machine is shared, so each row also records the load average before and after each run and the trials' CPU
time (the CPU seconds of their phases, summed, and per trial as a share of a core: ``CPU s / wall s``); when other
work takes a core, the 2-worker run's core share falls and with it the ratio, which is then a lower bound.

Each executor's ratio is appended as a row to ``--csv`` (``results/evidence/parallel.csv``: target, value, unit,
machine, commit, command, date, load, notes; :mod:`benchmarks.evidence_rows`).

    python benchmarks/bench_parallel.py --executor local --executor ray --executor ray-cluster --trials 4 --steps 50000
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import evidence_rows  # noqa: E402
from suite.executors import ExecOptions, execute  # noqa: E402
from suite.trial import TrialSpec  # noqa: E402

EXECUTORS = ("local", "ray", "ray-cluster")
CLUSTER_START_TIMEOUT_S = 120.0
"""How long the two nodes may take to register with the head (minutes on a loaded 2-core machine are possible)."""


def span_s(records: list[dict[str, Any]]) -> float:
    """Seconds from the first trial's start to the last trial's end."""
    start = min(datetime.fromisoformat(r["started_at"]) for r in records)
    end = max(datetime.fromisoformat(r["ended_at"]) for r in records)
    return (end - start).total_seconds()


def trial_cpu_s(record: dict[str, Any]) -> float:
    """CPU seconds of a trial's phases (rollout, advantages, update, evaluation): its own work, from the record."""
    return sum(p.get("cpu_s", 0.0) for p in record["phases"].values())


def trial_phase_wall_s(record: dict[str, Any]) -> float:
    """Wall seconds of the same phases, so that CPU / wall is the share of a core the trial got while working."""
    return sum(p.get("time_s", 0.0) for p in record["phases"].values())


def measure(executor: str, workers: int, trials: int, steps: int, address: str | None = None) -> dict[str, Any]:
    """Run the study on ``workers`` workers of ``executor`` into a throwaway database; its span, CPU and load."""
    resolved = [TrialSpec("ppo", "CartPole-v1", seed, steps).resolve() for seed in range(trials)]
    options = ExecOptions(
        executor="ray" if executor.startswith("ray") else "local", workers=workers, address=address,
        save_models=False, show_progress=False, print_table=False, max_retries=0,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-parallel-") as tmp:
        load_before = evidence_rows.load()
        summary = execute(resolved, db_path=Path(tmp) / "bench.db", study="bench", tier="custom", options=options)
        load_after = evidence_rows.load()
    records = summary.finished
    failed = [r["error"] for r in records if r["status"] != "ok"]
    if len(records) != trials or failed:
        raise SystemExit(f"{executor} on {workers} workers: {len(records)} of {trials} trials recorded, failures {failed}")
    span = span_s(records)
    cpu = sum(trial_cpu_s(r) for r in records)
    phase_wall = sum(trial_phase_wall_s(r) for r in records)
    return {
        "executor": executor, "workers": workers, "trials": trials, "steps": steps, "span_s": span,
        "trials_per_s": trials / span, "cpu_s": cpu, "core_share": cpu / phase_wall if phase_wall else 0.0,
        "load_before": load_before, "load_after": load_after,
    }  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray_cli() -> str:
    """The ``ray`` command of this interpreter's environment (its scripts folder), else the one on PATH."""
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.is_file() else shutil.which("ray")
    if found is None:
        raise SystemExit("ray-cluster needs Ray's command line: pip install -e '.[ray]'")
    return found


def _alive_nodes(address: str) -> int:
    """Nodes the cluster at ``address`` reports alive, asked from a fresh process so this one stays unconnected."""
    probe = "import ray; ray.init(address=%r, logging_level='ERROR'); print(sum(n['Alive'] for n in ray.nodes()))"
    done = subprocess.run([sys.executable, "-c", probe % address], capture_output=True, text=True, check=False, timeout=60)
    lines = done.stdout.strip().splitlines()
    return int(lines[-1]) if done.returncode == 0 and lines and lines[-1].isdigit() else 0


@contextlib.contextmanager
def loopback_cluster(nodes: int = 2, cpus_per_node: int = 1) -> Iterator[str]:
    """A Ray cluster of ``nodes`` nodes on 127.0.0.1, started apart from this process; yields its address.

    Every node is a ``ray start --block`` process of ours: stopping one (SIGTERM) makes Ray stop that node's own
    processes, so nothing else on the machine is touched (no ``ray stop``, which stops every Ray node of the user).
    The temporary directory is private, so a ``ray.init()`` elsewhere on the machine never finds this cluster as
    "the latest one started" and joins it.
    """
    ray = _ray_cli()
    port = _free_port()
    address = f"127.0.0.1:{port}"
    # Ray's socket paths must stay under 107 bytes: a short folder directly under /tmp
    temp_dir = Path(tempfile.mkdtemp(prefix="bpr-", dir="/tmp"))
    common = ["--block", "--num-cpus", str(cpus_per_node), "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    env = {**os.environ, "RAY_ADDRESS": ""}
    started: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for i in range(nodes):
            log = open(temp_dir / f"node{i}.log", "wb")  # noqa: SIM115  (closed in finally)
            logs.append(log)
            if i == 0:
                argv = [ray, "start", "--head", "--port", str(port), "--temp-dir", str(temp_dir),
                        "--include-dashboard", "false", *common]  # fmt: skip
            else:
                argv = [ray, "start", "--address", address, *common]
            started.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
            deadline = time.monotonic() + CLUSTER_START_TIMEOUT_S
            while _alive_nodes(address) < i + 1:
                if any(p.poll() is not None for p in started):
                    tail = (temp_dir / f"node{i}.log").read_text(errors="replace").strip().splitlines()[-5:]
                    raise SystemExit(f"ray start of node {i} exited: {' | '.join(tail)}")
                if time.monotonic() > deadline:
                    raise SystemExit(
                        f"the Ray cluster at {address} has not {i + 1} nodes after {CLUSTER_START_TIMEOUT_S:.0f} s"
                    )
                time.sleep(1.0)
        yield address
    finally:
        for proc in reversed(started):  # the joining node first, then the head
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)  # its own session: its node's processes only
                    proc.wait()
        for log in logs:
            log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


def compare(executor: str, trials: int, steps: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The study on 1 worker, then on 2; for ``ray-cluster`` both on the same two-node cluster."""
    if executor != "ray-cluster":
        return measure(executor, 1, trials, steps), measure(executor, 2, trials, steps)
    with loopback_cluster() as address:
        return measure(executor, 1, trials, steps, address), measure(executor, 2, trials, steps, address)


def evidence_row(one: dict[str, Any], two: dict[str, Any]) -> dict[str, Any]:
    """The 2-worker / 1-worker throughput ratio as an evidence row, with spans, CPU and load in its notes."""
    ratio = two["trials_per_s"] / one["trials_per_s"]
    where = {"local": "local executor", "ray": "Ray started in the command", "ray-cluster": "two-node Ray cluster"}
    notes = f"{one['trials']} ppo CartPole-v1 trials of {one['steps']} steps, {where[one['executor']]}; " + "; ".join(
        f"{m['workers']} worker{'s' * (m['workers'] > 1)}: span {m['span_s']:.1f} s, trials' CPU {m['cpu_s']:.1f} s, "
        f"{m['core_share']:.2f} of a core per trial"
        for m in (one, two)
    )
    load = f"1 worker {one['load_before']} -> {one['load_after']}; 2 workers {two['load_before']} -> {two['load_after']}"
    return evidence_rows.row(f"parallel-efficiency-{one['executor']}", round(ratio, 3), "x (2 workers / 1)",
                             load=load, notes=notes)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executor", action="append", choices=EXECUTORS, help="repeatable; default: local")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--csv", type=Path, default=evidence_rows.EVIDENCE_DIR / "parallel.csv",
                        help="evidence CSV the ratios are appended to")  # fmt: skip
    args = parser.parse_args()
    if args.trials < 2 or args.steps < 1:
        parser.error("--trials must be >= 2 (two workers need two trials) and --steps >= 1")
    for executor in args.executor or ["local"]:
        one, two = compare(executor, args.trials, args.steps)
        row = evidence_row(one, two)
        evidence_rows.append_rows(args.csv, [row])
        print(f"{executor:<11} {row['value']:.2f}x  ({row['notes']}; load {row['load']})", flush=True)
    print(f"appended to {args.csv}")


if __name__ == "__main__":
    main()
