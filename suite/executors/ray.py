"""Ray executor: every trial a Ray task, on a cluster (``--address``) or on a Ray instance started in this process.

Each trial is a streaming-generator task (``num_returns="streaming"``) with the trial's CPU requirement (its torch
threads) and, where asked, GPUs. The task runs the trial in a fresh process forked on its node, exactly as the local
executor does (:func:`_trial_task`), and yields ``started``, progress and finally the record (and the trained
policy's bytes, written next to the driver's database, so models never depend on a node's disk). The driver
(:func:`suite.executors.common.drive`) stays the only writer of the store, so retries, timeouts, claims, resume and
the progress bar are the local executor's. Ray's own retries are off (``max_retries=0``): the suite's policy
decides, and counts the attempts.

Failures: a trial process that dies is classified on its node as locally (``worker_died``, or ``oom`` when the
node's cgroup counted an OOM kill); a Ray worker that dies under the task is ``worker_died``, one killed by Ray's
memory monitor (``OutOfMemoryError``) ``oom``; a trial past its timeout is cancelled with
``ray.cancel(force=True)``, which kills the Ray worker, and with it the trial process (it exits with its parent).
A node that dies takes its tasks with it: Ray reports them failed (``worker_died``) and the policy starts them again
on the nodes left. A cluster that goes away entirely (its GCS refuses connections, :data:`CLUSTER_CHECKS` times in a
row) ends the run in one line, every finished trial saved. Every record says where it ran (``provenance.ray``,
:func:`placement`), failures on a node too; a trial's device (``--device cuda``) is checked on its node, not by the
driver, whose machine need not have the GPU (``docs/scaling.md``).

Without an address Ray starts in this process (``ray.init(num_cpus=..., include_dashboard=False)``). Ray's
services (GCS, raylet, object manager, every worker's gRPC server) listen on all interfaces whatever
``--node-ip-address`` says (measured with ``ss -ltnp``: ``*:port``; only the dashboard honours a host), so binding
cannot confine them. Instead, on Linux, the driver thread first moves into a private network namespace with only
the loopback interface up (``unshare(CLONE_NEWNET)``, plus ``CLONE_NEWUSER`` when not root), so every Ray process
it starts listens on 127.0.0.1 of a network nobody else can reach; after ``ray.shutdown()`` it moves back. Where
that is not allowed, Ray starts anyway with ``--node-ip-address=127.0.0.1`` and a one-line warning; Ray's token
authentication (on by default) still guards it.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from suite.errors import UserError
from suite.executors.common import Died, Event, Finished, Progress, Started, Task, worker_count
from suite.store.models import model_filename
from suite.trial import TrialSpec

PROGRESS_INTERVAL_S = 0.5
"""Minimum seconds between two progress items of a trial."""

OBJECT_STORE_BYTES = 256 * 2**20
"""Object store of an in-process Ray instance: records and policies are kilobytes to a few megabytes, and the
machine is shared, so not Ray's default of 30% of the RAM."""

INSTALL_HINT = "pip install -e '.[ray]' (ray 2.60.0)"

CLUSTER_CHECK_S = 2.0
CLUSTER_CHECKS = 3
"""A cluster (``--address``) is gone when its GCS refuses connections this many checks in a row, this far apart: the
run then ends in one line, its finished trials kept, instead of waiting for nodes that will not come back (Ray's
driver itself gives up on a lost GCS only after a minute, by ending the process)."""


def import_ray() -> Any:
    """The ``ray`` module, or a UserError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError(f"--executor ray needs Ray, which is not installed here: {INSTALL_HINT}") from None
    return ray


# ---------------------------------------------------------------------------------------------- the task


GPU_ENVIRON = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
"""Variables Ray sets per task to give it its GPUs; passed on to the task's trial process."""


def _trial_task(spec: TrialSpec, ship_model: bool) -> Any:
    """A trial as a Ray streaming generator, run in a fresh trial process forked on the worker's node exactly as
    the local executor does (:class:`~suite.executors.local.LocalBackend`, one slot): its peak RSS is its own, a
    crash or OOM kill takes only it down (and is classified on the node, where the cgroup counter is), and the
    Ray worker, which is reused, keeps a forkserver that has torch loaded, so a trial starts in milliseconds.

    Yields ``("started", pid, host)``, ``("progress", steps)``, then ``("record", record, model bytes or None)``,
    or ``("died", failure_kind, error)`` when the trial process ended without a record or could not start.
    """
    from suite.executors.local import LocalBackend

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the driver's to handle
    where = placement()
    on = f"on node {where['node_id'][:12]} at {where['host']}"
    try:
        resolved = spec.resolve()
    except Exception as exc:  # noqa: BLE001  (resolved fine in the driver: this node lacks something, e.g. its GPU)
        yield ("died", "worker_died", f"WorkerSetup: {type(exc).__name__}: {exc} ({on})", where)
        return
    tmp = tempfile.mkdtemp(prefix="suite-model-") if ship_model else None
    environ = {name: os.environ[name] for name in GPU_ENVIRON if name in os.environ}
    backend = LocalBackend(1, Path(tmp) if tmp else None, environ=environ)
    task = Task(resolved)
    try:
        task.handle = backend.start(task)
        while True:
            for event in backend.poll(PROGRESS_INTERVAL_S):
                if isinstance(event, Started):
                    yield ("started", event.pid, event.host)
                elif isinstance(event, Progress):
                    yield ("progress", event.steps)
                elif isinstance(event, Died):
                    yield ("died", event.failure_kind, f"{event.error} ({on})", where)
                    return
                elif isinstance(event, Finished):
                    record = event.record
                    record["provenance"] = {**(record.get("provenance") or {}), "ray": where}
                    model = Path(record["model_path"]).read_bytes() if tmp and record.get("model_path") else None
                    yield ("record", record, model)
                    return
    finally:
        backend.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def placement() -> dict[str, Any]:
    """Where the calling Ray task runs, for its record's provenance (``provenance.ray``): the node (Ray's id, its
    address, the host's name), the resources Ray assigned to the task, and its GPU ids (the devices Ray made
    visible: ``CUDA_VISIBLE_DEVICES``, which the trial process inherits)."""
    import ray

    context = ray.get_runtime_context()
    return {
        "node_id": context.get_node_id(),
        "node_ip": ray.util.get_node_ip_address(),
        "host": socket.gethostname(),
        "resources": {name: float(amount) for name, amount in context.get_assigned_resources().items()},
        "gpu_ids": [str(gpu) for gpu in ray.get_gpu_ids()],
        "visible_devices": {name: os.environ[name] for name in GPU_ENVIRON if name in os.environ},
    }


# ------------------------------------------------------------------------------------- private network


_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def enter_private_network() -> tuple[Callable[[], None] | None, str | None]:
    """Move the calling thread into a new network namespace whose only interface, loopback, is up.

    Processes started from this thread afterwards (Ray's) inherit it, so whatever address they listen on is
    reachable only from inside. Returns ``(leave, None)`` on success, where ``leave()`` moves the thread back
    (None when it cannot: a non-root process had to create a user namespace, which cannot be left), or
    ``(None, reason)`` when the namespace cannot be created here.
    """
    if not sys.platform.startswith("linux"):
        return None, "network namespaces are Linux-only"
    libc = ctypes.CDLL(None, use_errno=True)
    root = os.geteuid() == 0
    original = os.open("/proc/thread-self/ns/net", os.O_RDONLY) if root else -1
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWNET if root else _CLONE_NEWNET | _CLONE_NEWUSER) != 0:
        reason = os.strerror(ctypes.get_errno())
        if original >= 0:
            os.close(original)
        return None, f"unshare: {reason}"
    if not root:  # keep our own uid/gid inside the user namespace
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))
    if original < 0:
        return None, None

    def leave() -> None:
        try:
            libc.setns(original, _CLONE_NEWNET)
        finally:
            os.close(original)

    return leave, None


def start_local_ray(num_cpus: int) -> Callable[[], None]:
    """Start Ray in this process, confined to a private network (see the module doc); returns the shutdown.

    Ray blocks SIGINT in the processes it starts, so a Ctrl-C reaches only the driver, which stops the trials."""
    ray = import_ray()
    leave, why_not = enter_private_network()
    if why_not is not None:
        print(
            f"suite: warning: Ray's services listen on all interfaces here ({why_not}); Ray's token authentication "
            "guards them",
            file=sys.stderr,
        )
    try:
        ray.init(
            num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
            object_store_memory=OBJECT_STORE_BYTES, logging_level=logging.ERROR, configure_logging=True,
        )  # fmt: skip
    except BaseException:
        if leave is not None:
            leave()
        raise

    def shutdown() -> None:
        try:
            ray.shutdown()
        finally:
            if leave is not None:
                leave()

    return shutdown


# ------------------------------------------------------------------------------------------------ backend


class RayBackend:
    """Trials as Ray tasks; ``workers`` at a time (default: the cluster's CPUs / CPUs per trial)."""

    name = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        workers: int | None = None,
        trial_cpus: float = 1,
        trial_gpus: float = 0,
        models_dir: Path | None = None,
    ) -> None:
        ray = import_ray()
        self._ray = ray
        self._shutdown: Callable[[], None] | None = None
        if ray.is_initialized():
            pass  # a caller (a test, a notebook) already connected this process: use that cluster
        elif address is None:
            self._shutdown = start_local_ray(worker_count(workers) * int(max(1, trial_cpus)))
        else:
            try:
                # log_to_driver off: the cluster's own processes (its GCS, other jobs' workers) would print here;
                # a trial's outcome and errors come back in its record
                ray.init(address=address, logging_level=logging.ERROR, configure_logging=True, log_to_driver=False)
            except Exception as exc:  # noqa: BLE001  (any failure to connect is the user's address or cluster)
                raise UserError(f"cannot connect to the Ray cluster at {address}: {str(exc).splitlines()[0]}") from None
            self._shutdown = ray.shutdown
        resources = ray.cluster_resources()
        cpus, gpus = float(resources.get("CPU", 0)), float(resources.get("GPU", 0))
        if trial_cpus > cpus or trial_gpus > gpus:
            self.close()
            raise UserError(
                f"a trial needs {trial_cpus:g} CPUs and {trial_gpus:g} GPUs; the Ray cluster has {cpus:g} CPUs and "
                f"{gpus:g} GPUs in all"
            )
        self.slots = workers or max(1, int(cpus // trial_cpus))
        self._models_dir = models_dir
        self._remote = ray.remote(num_returns="streaming", max_retries=0)(_trial_task).options(
            num_cpus=trial_cpus, num_gpus=trial_gpus, name="suite_trial"
        )
        self._tasks: dict[Any, Task] = {}
        self._address = address
        self._gcs = _gcs_endpoint(ray) if address is not None else None
        self._next_check, self._refused = time.monotonic() + CLUSTER_CHECK_S, 0

    def _check_cluster(self) -> None:
        """Raise UserError when the cluster has gone away (see :data:`CLUSTER_CHECKS`)."""
        if self._gcs is None or time.monotonic() < self._next_check:
            return
        self._next_check = time.monotonic() + CLUSTER_CHECK_S
        try:
            socket.create_connection(self._gcs, timeout=CLUSTER_CHECK_S).close()
            self._refused = 0
        except OSError:
            self._refused += 1
        if self._refused >= CLUSTER_CHECKS:
            self._gcs = None  # closing must not wait for it
            raise UserError(
                f"the Ray cluster at {self._address} went away (its GCS stopped answering); every finished trial is "
                "saved: start the cluster again and run the same command to run the rest"
            )

    def start(self, task: Task) -> Any:
        generator = self._remote.remote(task.resolved.spec, self._models_dir is not None)
        self._tasks[generator] = task
        return generator

    def poll(self, timeout: float) -> list[Event]:
        ray = self._ray
        self._check_cluster()
        if not self._tasks:
            time.sleep(timeout)
            return []
        waiting = list(self._tasks)
        ready, _ = ray.wait(waiting, num_returns=1, timeout=timeout)
        if ready:
            ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)
        events: list[Event] = []
        for generator in ready:
            task = self._tasks[generator]
            event = self._next(generator, task)
            if event is not None:
                events.append(event)
            if isinstance(event, Finished | Died):
                self._forget(generator)
        return events

    def _next(self, generator: Any, task: Task) -> Event | None:
        ray = self._ray
        try:
            item = ray.get(next(generator))
        except StopIteration:
            return Died(task, "worker_died", "WorkerDied: the Ray task ended without a record")
        except ray.exceptions.OutOfMemoryError as exc:
            return Died(task, "oom", f"OOMKilled: {_first_line(exc)}")
        except ray.exceptions.RayError as exc:
            return Died(task, "worker_died", f"WorkerDied: {type(exc).__name__}: {_first_line(exc)}")
        kind = item[0]
        if kind == "started":
            return Started(task, item[1], item[2])
        if kind == "progress":
            return Progress(task, item[1])
        if kind == "died":
            return Died(task, item[1], item[2], where=item[3] if len(item) > 3 else None)
        record, model = item[1], item[2]
        if model is not None and self._models_dir is not None:
            path = self._models_dir / model_filename(record["algo"], record["env_id"], record["seed"], record["key"])
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(model)
            os.replace(tmp, path)
            record["model_path"] = str(path)
        else:
            record["model_path"] = None
        return Finished(task, record)

    def kill(self, task: Task) -> None:
        for generator, t in list(self._tasks.items()):
            if t is task:
                with contextlib.suppress(Exception):
                    self._ray.cancel(generator, force=True)
                self._forget(generator)

    def close(self) -> None:
        for generator in list(self._tasks):
            with contextlib.suppress(Exception):
                self._ray.cancel(generator, force=True)
            self._forget(generator)
        if self._shutdown is not None:
            shutdown, self._shutdown = self._shutdown, None
            shutdown()

    def _forget(self, generator: Any) -> None:
        self._tasks.pop(generator, None)


def _gcs_endpoint(ray: Any) -> tuple[str, int] | None:
    """(host, port) of the connected cluster's GCS, or None when Ray does not say (a ``ray://`` client)."""
    try:
        host, _, port = str(ray.get_runtime_context().gcs_address).rpartition(":")
        return (host, int(port)) if host else None
    except Exception:  # noqa: BLE001  (no address to watch: the run waits as Ray does)
        return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
