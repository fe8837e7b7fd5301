"""SIGINT and SIGTERM: how the suite's commands end, and how a study's driver and its trial processes treat them.

Stdlib only, so the CLI can install its handlers before anything heavy is imported.

* A command (the CLI's ``main``) runs inside :func:`raising_interrupts`: either signal raises :class:`Interrupted`,
  which the CLI turns into one line and exit code ``128 + signum`` (130 for Ctrl-C, 143 for SIGTERM).
* A study's driver loop runs inside :func:`deferred_interrupts`: a signal only sets a flag, which the loop reads at
  safe points (never in the middle of saving a record).
* Trial processes never act on them (:func:`shield_worker_from_interrupts`): the terminal sends Ctrl-C to the whole
  process group, and only the driver decides what stops; processes that must be born shielded are started inside
  :func:`signals_blocked`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

INTERRUPT_SIGNALS: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived outside a driver loop (where they are deferred); the CLI exits ``128 + signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _SignalState:
    """Module-wide: whether interrupts raise (:class:`Interrupted`) or are remembered for the loop to notice."""

    def __init__(self) -> None:
        self.deferring = 0
        self.pending: int | None = None


_STATE = _SignalState()


def _on_interrupt(signum: int, frame: Any) -> None:
    if _STATE.deferring:
        if _STATE.pending is None:
            _STATE.pending = signum
        return
    raise Interrupted(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def raising_interrupts(*, then_ignore: bool = False) -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` inside the block (the CLI's ``main`` runs in one), so both end
    the command with one line and ``128 + signum`` wherever they arrive.

    Args:
        then_ignore: after the block, ignore both signals instead of restoring the previous handlers: for a process
            that exits right after (the ``suite`` command), where a signal arriving once the work is done and
            reported must not turn a finished command into a death by signal. The swap happens with both signals
            blocked, so no signal falls between the two handlers.
    """
    if not _in_main_thread():
        yield
        return
    previous = {s: signal.signal(s, _on_interrupt) for s in INTERRUPT_SIGNALS}
    try:
        yield
    finally:
        with signals_blocked():
            for s, handler in previous.items():
                signal.signal(s, signal.SIG_IGN if then_ignore else handler)


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[Callable[[], int | None]]:
    """Inside the block SIGINT/SIGTERM only set a flag; yields a function returning the signal number that arrived
    (None if none). Outside the main thread (where handlers cannot be installed) signals are left alone."""
    if not _in_main_thread():
        yield lambda: None
        return
    previous = {s: signal.signal(s, _on_interrupt) for s in INTERRUPT_SIGNALS}
    saved = _STATE.pending
    _STATE.deferring += 1
    _STATE.pending = None
    try:
        yield lambda: _STATE.pending
    finally:
        _STATE.deferring -= 1
        inner = _STATE.pending  # an enclosing deferred block must learn of a signal that arrived in this one
        _STATE.pending = saved if saved is not None else (inner if _STATE.deferring else None)
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def interrupts_after() -> Iterator[None]:
    """Inside the block SIGINT/SIGTERM are remembered and raised as :class:`Interrupted` when it ends: for work that
    must not be interrupted midway, such as importing native extensions whose initialisation calls back into Python
    (``ale_py``'s nanobind module aborts the whole process, ``terminate called``, when an exception is raised in it)."""
    signum = None
    with deferred_interrupts() as arrived:
        yield
        signum = arrived()
    if signum is not None:
        raise Interrupted(signum)


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Block SIGINT/SIGTERM in this thread for the block: processes started inside inherit the blocked mask (and
    so never see the terminal's signals until they choose to); signals that arrive meanwhile are delivered after."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPT_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def shield_worker_from_interrupts() -> None:
    """In a trial process: ignore SIGINT/SIGTERM (the driver decides when a trial stops, and kills it with SIGKILL),
    then unblock them (a signal pending since the process started is discarded by SIG_IGN, never delivered)."""
    for s in INTERRUPT_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPT_SIGNALS)
