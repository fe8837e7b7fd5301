"""How long the calling thread has waited for a CPU: Linux's run-queue wait, the part of wall time lost to other load.

``/proc/thread-self/schedstat`` holds three numbers for the thread that reads it (the kernel's
Documentation/scheduler/sched-stats.rst): nanoseconds on a CPU, nanoseconds spent **waiting on a run queue** (runnable,
but another task had the CPU) and the number of timeslices run. The second is the thread's *starvation*: it grows
only while the thread wanted to run and could not, never while it slept, waited for I/O or a lock, or blocked on
another thread or process (those are voluntary waits, which the wall clock sees and this does not). So for a thread
that does a phase's work itself, ``wall - run-queue wait`` is the wall time the phase would have taken with a CPU to
itself: other processes' load removed, the phase's own sleeps and waits kept (:class:`suite.trial.TrialContext`
records it per phase; the regression gate's *unstarved wall clock*, :mod:`suite.regress.compare`).

The wait is the reading thread's only. A trial computes in one thread by default (``threads = 1``: torch's intra-op
work runs in the calling thread, every shipped env steps in-process). With more torch threads, or env workers in
other processes (``vectorization="async"``), the time the reading thread spends blocked on them is a voluntary wait
here even when *they* were the ones starved, so ``wall - run-queue wait`` then removes only part of the load.

The run-queue wait of the thread that reads it is exact at the moment of the read: it is running, so its last wait
has ended and been counted. (The first number, time on a CPU, is only brought up to date at the kernel's next
accounting point, so it is not used.)

Where the file does not exist (not Linux, or a kernel built without ``CONFIG_SCHED_INFO``), :meth:`RunQueueClock.read`
returns None and nothing is recorded.
"""

from __future__ import annotations

import os
import threading

SCHEDSTAT = "/proc/thread-self/schedstat"
"""The calling thread's scheduler statistics (``on-CPU ns``, ``run-queue wait ns``, ``timeslices``)."""


class RunQueueClock:
    """Seconds the thread that reads it has spent waiting on a run queue, read with one ``pread`` of a file kept open.

    The file is opened for the thread that first reads it (``/proc/thread-self`` resolves to that thread when
    opened); a read from another thread reopens it for that thread. Readings are only comparable within one thread.
    """

    def __init__(self, path: str | None = None):
        self._path = path or SCHEDSTAT
        self._fd: int | None = None
        self._thread: int | None = None
        self.available = True
        """False once the file could not be opened or read: :meth:`read` then returns None without trying again."""

    def read(self) -> float | None:
        """The calling thread's total run-queue wait in seconds, or None where the kernel does not provide it."""
        if not self.available:
            return None
        thread = threading.get_native_id()
        try:
            fd = self._fd
            if fd is None or self._thread != thread:
                self.close()
                fd = self._fd = os.open(self._path, os.O_RDONLY)
                self._thread = thread
            return int(os.pread(fd, 128, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            self.close()
            self.available = False
            return None

    def close(self) -> None:
        """Close the file (a later read opens it again)."""
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._thread = None, None
