"""A report's figures drawn in two processes, this one and a helper, when the machine has a CPU to spare.

Drawing and saving the figures as PNG and SVG is most of ``write_report``'s time, and matplotlib is single-threaded
Python (docs/design.md has the measurements). The figures are independent, so :class:`FigureRenderer` starts a helper
interpreter as soon as a report is under way (its imports, matplotlib, seaborn and pandas, overlap the statistics), and
the figures go into one queue that this process and a thread serving the helper both take from, costliest first, until
it is empty.

The helper is a plain ``python -c`` child talking over two pipes of its own, not a ``multiprocessing`` spawn: a spawned
child re-runs the caller's ``__main__`` script, so a user's script that calls ``write_report`` without an
``if __name__ == "__main__"`` guard would run itself again. A figure is a module-level drawing function and its
arguments (:class:`FigureJob`), drawn by the same code whichever process takes it: its files are byte for byte the
same (tested). Without a spare CPU, with ``SUITE_REPORT_HELPER=0``, or when the helper cannot start or dies, this
process draws what is left; a figure whose drawing raised in the helper is drawn again here, so that its exception
surfaces with its traceback. The helper's own output is discarded (a helper that cannot even import only makes the
report slower, never noisier). ``suite run`` starts the helper earlier still, when its last trials leave a worker idle
(:func:`prepare`): the next renderer of the process takes it over.
"""

from __future__ import annotations

import bisect
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

HELPER_ENV = "SUITE_REPORT_HELPER"
"""Set to ``0`` to draw every figure in the report's own process."""


@dataclass(frozen=True)
class FigureJob:
    """One figure: ``draw(*args)`` returns a matplotlib figure, saved as ``<directory>/<name>.{png,svg}``."""

    name: str
    draw: Callable[..., Any]
    args: tuple[Any, ...]
    directory: Path
    cost: float = 1.0
    """A rough relative cost (e.g. the figure's panels): the costliest figures are drawn first, by whichever process
    is free, so that the last ones, which one process may end up drawing while the other waits, are small."""


def render(job: FigureJob) -> bytes:
    """Draw and save ``job``'s figure in this process; return the PNG bytes."""
    from suite.report import figures as fg

    with fg.style():
        return fg.save_figure(job.draw(*job.args), job.directory, job.name)


def helper_main(read_fd: int, write_fd: int) -> None:
    """The helper process: import the plotting stack, then ask for figures and draw them until told to stop (or until
    the report's process is gone). It ignores Ctrl-C, which reaches the whole process group: the report's process
    decides, and stops it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from suite.report import figures  # noqa: F401  (the plotting stack's import, while the report's process computes)

    with os.fdopen(read_fd, "rb") as inbox, os.fdopen(write_fd, "wb") as outbox:
        message: tuple[Any, ...] = ("ready",)
        while True:
            try:
                pickle.dump(message, outbox)
                outbox.flush()
                job = pickle.load(inbox)
            except (EOFError, BrokenPipeError):
                return  # the report's process is gone
            if job is None:
                return
            try:
                message = ("ok", job.name, render(job))
            except Exception as exc:  # noqa: BLE001  (the report's process draws it again and raises there)
                message = ("error", job.name, repr(exc))


def spare_cpu() -> bool:
    """Whether this process may use at least two CPUs."""
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except AttributeError:  # not Linux
        return (os.cpu_count() or 1) >= 2


def _helper_wanted(helper: bool | None) -> bool:
    """``helper``, or for None: when :func:`spare_cpu` and ``SUITE_REPORT_HELPER`` is not ``0``."""
    if helper is None:
        return spare_cpu() and os.environ.get(HELPER_ENV, "1") != "0"
    return helper


_Spawned = tuple["subprocess.Popen[bytes]", IO[bytes], IO[bytes]]
"""A helper process with the pipe ends this process writes to and reads from."""


def _spawn_helper() -> _Spawned | None:
    """Start a helper interpreter (:func:`helper_main`); None when no process can be started (then this process
    draws)."""
    to_helper_r, to_helper_w = os.pipe()
    from_helper_r, from_helper_w = os.pipe()
    code = f"from suite.report.render import helper_main; helper_main({to_helper_r}, {from_helper_w})"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the same suite as here
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", code], pass_fds=(to_helper_r, from_helper_w), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )  # fmt: skip
    except OSError:  # no processes to spare (limits): draw here
        for fd in (to_helper_r, to_helper_w, from_helper_r, from_helper_w):
            os.close(fd)
        return None
    os.close(to_helper_r)
    os.close(from_helper_w)
    return proc, os.fdopen(to_helper_w, "wb"), os.fdopen(from_helper_r, "rb")


_prepared: _Spawned | None = None
"""A helper started by :func:`prepare` that no report has taken yet."""
_prepared_lock = threading.Lock()


def prepare(helper: bool | None = None) -> Callable[[], None]:
    """Get this process's next report under way while the machine has a CPU to spare, e.g. while the last trials of
    a study run and a worker idles: start its helper process (the next :class:`FigureRenderer` of this process takes
    it over, ready) and import the report's modules (matplotlib, seaborn, pandas) in a thread.

    Returns a function that waits for those imports; call it before this process does anything else (another import
    in the meantime could wait on the thread's). A helper no report takes is stopped by :func:`discard_prepared` (or
    exits with this process, its pipes closed). Nothing a report writes depends on it: the files are the same."""
    global _prepared
    if _helper_wanted(helper):
        with _prepared_lock:
            if _prepared is None:
                _prepared = _spawn_helper()
    thread = threading.Thread(target=_import_report, name="report-imports", daemon=True)
    thread.start()
    return thread.join


def _import_report() -> None:
    # What write_report's module imports, named one by one: that module imports this one, so naming it would close
    # an import loop.
    try:
        import suite.report.build  # noqa: F401
        import suite.report.figures  # noqa: F401
        import suite.report.html  # noqa: F401
        import suite.report.latex  # noqa: F401
        import suite.report.markdown  # noqa: F401
        import suite.report.memory  # noqa: F401
    except Exception:  # noqa: BLE001
        pass  # a no-op on purpose: the report's own import raises the same error again, where it is seen


def _take_prepared() -> _Spawned | None:
    """The helper :func:`prepare` started, if it is still alive (a dead one is cleaned up)."""
    global _prepared
    with _prepared_lock:
        spawned, _prepared = _prepared, None
    if spawned is not None and spawned[0].poll() is not None:
        _close_spawned(spawned)
        return None
    return spawned


def discard_prepared() -> None:
    """Stop a prepared helper no report will use (this process draws alone)."""
    spawned = _take_prepared()
    if spawned is not None:
        _close_spawned(spawned)


def _close_spawned(spawned: _Spawned) -> None:
    proc, outbox, inbox = spawned
    for pipe in (outbox, inbox):
        try:
            pipe.close()
        except OSError:
            pass  # already closed (the helper died first): nothing left to release
    proc.kill()  # it has drawn nothing anyone waits for (and may still be importing)
    proc.wait()


class FigureRenderer:
    """Collects a report's figures (:meth:`add`) and draws them (:meth:`finish`), sharing them with a helper process.

    Use it as a context manager (the helper is stopped on the way out, also after an error)::

        with FigureRenderer() as renderer:
            renderer.add(FigureJob(...))   # the helper may start on it at once
            ...                            # other work of this process
            pngs = renderer.finish()       # {name: PNG bytes}, in the order added
    """

    def __init__(self, helper: bool | None = None):
        """``helper``: None = when :func:`spare_cpu` and ``SUITE_REPORT_HELPER`` is not ``0``."""
        helper = _helper_wanted(helper)
        self._jobs: list[FigureJob] = []
        self._queue: list[tuple[float, int, FigureJob]] = []  # (cost, -order added, job): the last is taken first
        self._cond = threading.Condition()
        self._finishing = False
        self._results: dict[str, bytes] = {}
        self._taken = 0
        self._serving_done = False
        self.helper_exit_code: int | None = None
        """The helper's exit status once :meth:`close` has stopped it (0: it ran to the end)."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        if helper:
            spawned = _take_prepared() or _spawn_helper()
            if spawned is not None:
                self._proc, outbox, inbox = spawned
                self._thread = threading.Thread(target=self._serve, args=(inbox, outbox), name="report-figures", daemon=True)
                self._thread.start()
        else:
            discard_prepared()

    @property
    def helper_started(self) -> bool:
        """Whether a helper process was started (it may have died since)."""
        return self._thread is not None

    def _serve(self, inbox: IO[bytes], outbox: IO[bytes]) -> None:
        """Hand the helper figures, costliest first, until the queue is empty and :meth:`finish` has begun."""
        try:
            with inbox, outbox:
                while True:
                    message = pickle.load(inbox)  # "ready", or the last figure's result
                    if message[0] == "ok":
                        self._results[message[1]] = message[2]
                    with self._cond:
                        self._cond.wait_for(lambda: bool(self._queue) or self._finishing)
                        job = self._queue.pop()[2] if self._queue else None  # the costliest left
                        self._taken += job is not None
                        self._cond.notify_all()
                    pickle.dump(job, outbox)
                    outbox.flush()
                    if job is None:
                        return
        except (EOFError, OSError, pickle.UnpicklingError):
            return  # the helper died: what it had taken is drawn by finish()
        finally:
            with self._cond:
                self._serving_done = True
                self._cond.notify_all()

    def wait_for_helper(self, count: int, timeout: float) -> bool:
        """Block until the helper has taken ``count`` figures (True), or it has stopped or ``timeout`` seconds passed
        (False). For tests, which need to know who drew what."""
        with self._cond:
            return self._cond.wait_for(lambda: self._taken >= count or self._serving_done, timeout) and self._taken >= count

    def add(self, job: FigureJob) -> None:
        """Queue a figure (the helper may take it at once)."""
        if any(j.name == job.name for j in self._jobs):
            raise ValueError(f"figure {job.name!r} added twice")
        self._jobs.append(job)
        with self._cond:
            bisect.insort(self._queue, (job.cost, -len(self._jobs), job))  # of equal costs, the first added last
            self._cond.notify()

    def finish(self) -> dict[str, bytes]:
        """Draw every figure added (this process takes from the queue too) and return their PNG bytes by name."""
        with self._cond:
            self._finishing = True
            self._cond.notify()
        out: dict[str, bytes] = {}
        while True:
            with self._cond:
                job = self._queue.pop()[2] if self._queue else None
            if job is None:
                break
            out[job.name] = render(job)
        if self._thread is not None:
            self._thread.join()  # until the helper has sent its last figure (or died)
        for job in self._jobs:
            if job.name not in out:
                png = self._results.get(job.name)
                out[job.name] = png if png is not None else render(job)
        return {j.name: out[j.name] for j in self._jobs}

    def close(self) -> None:
        """Stop the helper: it exits when told there is nothing left; killed if it has not within seconds."""
        with self._cond:
            self._finishing = True
            self._queue.clear()
            self._cond.notify()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            self.helper_exit_code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            self.helper_exit_code = proc.wait()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> FigureRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
