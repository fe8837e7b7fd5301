"""Local executor: every trial in a fresh process on this machine, started by a forkserver.

Each trial runs in its own process, forked from a forkserver that has already imported torch and the suite, so a
start costs milliseconds (a trial whose algorithm lists ``imports``, e.g. SB3's, is forked from a second forkserver
that has imported those too: :func:`_server`): its peak RSS is its own, a crash or OOM kill takes down only that
trial, and torch's thread setting cannot leak between trials. The trial process sends ``started``, progress and finally
its record over a pipe; the driver (:func:`suite.executors.common.drive`) is the only writer of the results database.

Signals: the forkserver is started with SIGINT/SIGTERM blocked, so it and every process it forks are born with
them blocked; a trial process then ignores them before unblocking (:func:`shield_worker_from_interrupts`). The
terminal's Ctrl-C, which reaches the whole process group, therefore never kills a trial process, not even in the
instant between its fork and its first line of code (which is how a Ctrl-C used to become a recorded
``WorkerDied ... exited with code 0``). The driver ends trials with SIGKILL. A trial process exits by itself when
the driver dies (a thread waits on the driver's end of the pipe), so a SIGKILLed study leaves no orphan running.
"""

from __future__ import annotations

import io
import multiprocessing as mp
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import socket
import threading
import time
from multiprocessing import popen_forkserver, reduction, spawn, util
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from suite.executors.common import (
    Died,
    Event,
    Finished,
    Progress,
    Started,
    Task,
    describe_exit,
    oom_kill_count,
)
from suite.interrupts import shield_worker_from_interrupts, signals_blocked
from suite.kernels import check_process, started_with
from suite.trial import TrialSpec, run_trial

PROGRESS_INTERVAL_S = 0.5
"""Minimum seconds between two progress messages of a trial."""

FORKSERVER_PRELOAD = [
    "torch", "suite.trial", "suite.algorithms", "suite.executors.local", "suite.profile.memory", "suite.cli", "psutil",
    "suite.executors.preload",
]  # fmt: skip
"""Imported once by the forkserver, so trial processes start with them loaded: torch and the algorithms, and every
module a trial process runs besides (this module, the trial's target, with the results store under it; the memory
probe and psutil; ``suite.cli``, which a child of the ``suite`` console script re-imports as its main module).
``suite.executors.preload`` fills the provenance caches in the server. Not ``torch._dynamo``: torch imports it when
a ``torch.optim`` optimizer is built (``torch/_compile.py``), which the suite's own algorithms do not do, and a forked
child inherits the forkserver's pages as its own resident memory, so every trial's recorded peak would hold a
library it never used. The ``sb3-*`` trials import it before their clock and memory baseline (their registry
``imports``), as a standalone SB3 process would. Plugins are not preloaded: a trial process loads what its spec needs
in ``TrialSpec.resolve()``. docs/design.md has the measurements behind this list."""

_HOST = socket.gethostname()


def _exit_with_driver() -> None:
    """Exit this trial process as soon as the driver dies (its end of the multiprocessing pipe closes)."""
    parent = mp.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-driver", daemon=True).start()


def _worker(spec: TrialSpec, conn: Connection, models_dir: str | None, environ: dict[str, str]) -> None:
    """Body of a trial process: resolve, run, send ``started``, progress messages and finally the record."""
    shield_worker_from_interrupts()
    _exit_with_driver()
    os.environ.update(environ)  # e.g. the GPUs Ray gave this trial (CUDA reads it when first used, after the fork)
    conn.send(("started", os.getpid()))
    last = [0.0]

    def progress(steps: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_INTERVAL_S:
            last[0] = now
            conn.send(("progress", steps))

    try:
        try:
            check_process(spec.kernels)  # its forkserver was started for the mode: a mismatch is a bug, said in a line
            resolved = spec.resolve()
        except Exception as exc:  # noqa: BLE001  (resolved fine in the driver: this process lacks something)
            conn.send(("setup_failed", f"WorkerSetup: {type(exc).__name__}: {exc}"))
            return
        record = run_trial(resolved, models_dir=Path(models_dir) if models_dir else None, progress=progress)
        conn.send(("record", record))
    finally:
        conn.close()


def _context() -> Any:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
    return ctx


def start_forkserver() -> None:
    """Start the forkserver (if it is not running) with the terminal's signals blocked (see the module doc).

    Cheap when it runs already; a CLI calls it early so that the forkserver imports torch while the driver is
    still busy resolving the trials (the two imports overlap instead of adding up)."""
    _context()
    _shielded_start(multiprocessing.forkserver.ensure_running)


def _shielded_start(ensure_running: Any) -> None:
    """Call a forkserver's ``ensure_running`` with SIGINT/SIGTERM blocked, so the server and its children are born
    with them blocked. The resource tracker first: its own start unblocks them in this thread when it is done."""
    multiprocessing.resource_tracker.ensure_running()
    with signals_blocked():
        ensure_running()


class _ImportsPopen(popen_forkserver.Popen):
    """``popen_forkserver.Popen`` launching through the forkserver of the process's ``imports`` (the stdlib's
    ``_launch`` with its one module-level forkserver replaced by :func:`_server`; Python 3.11's code otherwise)."""

    def _launch(self, process_obj: Any) -> None:
        prep_data = spawn.get_preparation_data(process_obj._name)
        buf = io.BytesIO()
        mp.context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            mp.context.set_spawning_popen(None)
        server = _server(process_obj.imports, process_obj.kernels)
        self.sentinel, w = server.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
        _parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))  # type: ignore[attr-defined]
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = multiprocessing.forkserver.read_signed(self.sentinel)


class _ImportsProcess(mp.context.ForkServerProcess):
    """A trial process forked from a forkserver that has also imported its algorithm's ``imports``, or that was
    started for another kernel mode than native."""

    imports: tuple[str, ...] = ()
    kernels: str = "native"

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _ImportsPopen(process_obj)


_SERVERS: dict[tuple[tuple[str, ...], str], Any] = {}
_SERVERS_LOCK = threading.Lock()


def _server(imports: tuple[str, ...], kernels: str = "native") -> Any:
    """The running forkserver that preloads :data:`FORKSERVER_PRELOAD` plus ``imports`` and was started with the
    variables of kernel mode ``kernels`` (:func:`suite.kernels.environ`: they must be set before torch and numpy
    load, so a mode has its own servers); started, or restarted if it died, with the terminal's signals blocked, as
    :func:`start_forkserver`.

    Why: an algorithm's ``imports`` are what its trial imports before its clock starts (SB3 and ``torch._dynamo``
    for the ``sb3-*`` baselines: 2-4 s of every such trial's start, paid again by each trial). Kept out of the main
    forkserver because a forked child inherits its server's pages as resident memory (see
    :data:`FORKSERVER_PRELOAD`), so only the trials that import them anyway are forked from a server that has them,
    and the import is paid once per study instead of per trial. Their RSS at the start is the libraries' pages
    without the import's temporary allocations, as the suite's own trials have always started (docs/memory.md)."""
    with _SERVERS_LOCK:
        server = _SERVERS.get((imports, kernels))
        if server is None:
            server = _SERVERS[imports, kernels] = multiprocessing.forkserver.ForkServer()
            server.set_forkserver_preload([*FORKSERVER_PRELOAD, *imports])
        with started_with(kernels):  # the server inherits this process's environment when it starts
            _shielded_start(server.ensure_running)
        return server


class _Running:
    def __init__(self, task: Task, process: Any, conn: Connection, oom_before: int | None) -> None:
        self.task, self.process, self.conn, self.oom_before = task, process, conn, oom_before


class LocalBackend:
    """Trials as forkserver processes on this machine, ``workers`` at a time.

    Args:
        workers: trials at the same time.
        models_dir: where trial processes save trained policies (None: not saved).
        environ: environment variables set in every trial process (the forkserver's environment is the one it
            was started with).
    """

    name = "local"

    def __init__(self, workers: int, models_dir: Path | None = None, environ: dict[str, str] | None = None) -> None:
        self.slots = workers
        self._environ = dict(environ or {})
        self._models_dir = str(models_dir) if models_dir else None
        self._ctx = _context()
        self._running: dict[int, _Running] = {}
        self._reaping: list[Any] = []

    def start(self, task: Task) -> Any:
        start_forkserver()  # restarts it if it died: every trial process must come from a shielded forkserver
        parent, child = self._ctx.Pipe(duplex=False)
        args = (task.resolved.spec, child, self._models_dir, self._environ)
        imports = tuple(task.resolved.algo.imports)
        kernels = task.resolved.spec.kernels
        if imports or kernels != "native":
            process = _ImportsProcess(target=_worker, args=args, daemon=True)
            process.imports, process.kernels = imports, kernels
        else:
            process = self._ctx.Process(target=_worker, args=args, daemon=True)
        oom_before = oom_kill_count()
        process.start()
        child.close()
        self._running[id(task)] = _Running(task, process, parent, oom_before)
        return id(task)

    def poll(self, timeout: float) -> list[Event]:
        self._reap()
        if not self._running:
            time.sleep(timeout)
            return []
        runs = list(self._running.values())
        ready = set(wait([r.conn for r in runs] + [r.process.sentinel for r in runs], timeout=timeout))
        events: list[Event] = []
        for r in runs:
            if r.conn not in ready and r.process.sentinel not in ready:
                continue
            ended: Event | None = None
            try:
                while ended is None and r.conn.poll():
                    kind, payload = r.conn.recv()
                    if kind == "started":
                        events.append(Started(r.task, payload, _HOST))
                    elif kind == "progress":
                        events.append(Progress(r.task, payload))
                    elif kind == "record":
                        ended = Finished(r.task, payload)
                    elif kind == "setup_failed":
                        ended = Died(r.task, "worker_died", payload)
            except (EOFError, OSError):
                pass  # the process closed its end (exited, or was killed mid-message): handled just below
            if ended is None and not r.process.is_alive():
                r.process.join()
                ended = Died(r.task, *describe_exit(r.process.exitcode, r.oom_before, oom_kill_count()))
            if ended is not None:
                events.append(ended)
                self._drop(r)
        return events

    def kill(self, task: Task) -> None:
        r = self._running.get(task.handle)
        if r is not None:
            r.process.kill()
            self._drop(r)

    def close(self) -> None:
        for r in list(self._running.values()):
            r.process.kill()
            self._drop(r)
        for process in self._reaping:
            process.join(timeout=10)
        self._reaping.clear()

    def _drop(self, r: _Running) -> None:
        self._running.pop(id(r.task), None)
        r.conn.close()
        self._reaping.append(r.process)

    def _reap(self) -> None:
        """Join trial processes that have exited (a process that sent its record exits right after)."""
        alive = []
        for process in self._reaping:
            if process.is_alive():
                alive.append(process)
            else:
                process.join()
        self._reaping = alive
