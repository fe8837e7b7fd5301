"""Run coordination: several ``suite run`` on one database share the work through claims on trials, and a run
that died (SIGKILL, a lost host) is recognised so its claims can be taken again (see :mod:`suite.store`)."""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from suite.provenance import utc_now_iso
from suite.store.connection import StoreConnection

if TYPE_CHECKING:
    import pandas as pd

RUN_STALE_S = 600.0
"""A run seen from another host is dead when its heartbeat is older than this (same host: its process is checked)."""

_HOST = socket.gethostname()


@dataclass(frozen=True)
class Claim:
    """The answer of :meth:`ResultsStore.claim`."""

    state: str
    """``claimed``, ``recorded`` or ``busy``."""
    owner: str | None = None
    """For ``busy``: the run executing the trial (pid, host, command)."""


def _run_alive(host: str, pid: int, proc_start: float | None, heartbeat_at: float, now: float) -> bool:
    """Whether a registered run is still executing: on this host, its process exists and started when the run
    registered (a reused pid is another process); on another host, its heartbeat is recent."""
    if host != _HOST:
        return now - heartbeat_at < RUN_STALE_S
    import psutil

    try:
        started = psutil.Process(pid).create_time()
    except psutil.AccessDenied:
        return True  # it exists; we may not look at it
    except (psutil.NoSuchProcess, ValueError):  # ZombieProcess is a NoSuchProcess: it has exited
        return False
    return proc_start is None or abs(started - proc_start) < 1.0


class RunCoordination(StoreConnection):
    """The run-coordination side of :class:`suite.store.ResultsStore`: runs, heartbeats and claims."""

    def begin_run(self, command: str = "") -> str:
        """Register this process as a run that claims trials (see the module doc); returns its ``run_id``.

        Also forgets dead runs (and their claims), so their trials can be claimed again.
        """
        import psutil

        run_id = os.urandom(8).hex()
        now = time.time()
        with self._transaction() as conn:
            self._forget_dead_runs(conn, now)
            conn.execute(
                "INSERT INTO runs (run_id, host, pid, proc_start, started_at, heartbeat_at, command)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id, _HOST, os.getpid(), psutil.Process().create_time(), utc_now_iso(), now, command),
            )
        return run_id

    def heartbeat(self, run_id: str) -> None:
        """Tell other hosts that run ``run_id`` is alive (the driver calls it every few seconds)."""
        with self._transaction() as conn:
            conn.execute("UPDATE runs SET heartbeat_at = ? WHERE run_id = ?", (time.time(), run_id))

    def end_run(self, run_id: str) -> None:
        """Release every claim of ``run_id`` and unregister it (its unfinished trials become claimable)."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM claims WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))

    def release(self, run_id: str, key: str) -> None:
        """Drop ``run_id``'s claim on ``key`` (a trial it will not finish now, e.g. to be retried later)."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM claims WHERE key = ? AND run_id = ?", (key, run_id))

    def claim(self, key: str, run_id: str, *, rerun: str | None = None) -> Claim:
        """Try to take trial ``key`` for run ``run_id``, in one transaction.

        Args:
            key: the trial.
            run_id: from :meth:`begin_run`.
            rerun: for a recorded failure being run again, the ``ended_at`` of the record that was planned to be
                replaced (from :meth:`failed_trials`); if the record changed since (another run re-ran it), the
                trial counts as recorded.

        Returns:
            A :class:`Claim`: ``claimed`` (run it), ``recorded`` (already in the store: skip it), or ``busy``
            (a live run is executing it: ``owner`` says which; look again later).
        """
        with self._transaction() as conn:
            row = conn.execute("SELECT ended_at FROM trials WHERE key = ?", (key,)).fetchone()
            if row is not None and (rerun is None or (row[0] or "") != rerun):
                return Claim("recorded")
            owner = conn.execute(
                "SELECT runs.run_id, runs.host, runs.pid, runs.proc_start, runs.heartbeat_at, runs.command FROM claims"
                " LEFT JOIN runs ON runs.run_id = claims.run_id WHERE claims.key = ?",
                (key,),
            ).fetchone()
            if owner is not None and owner[0] is not None and owner[0] != run_id:
                if _run_alive(owner[1], owner[2], owner[3], owner[4], time.time()):
                    return Claim("busy", owner=f"pid {owner[2]} on {owner[1]}: {owner[5] or 'suite run'}")
                self._forget_dead_runs(conn, time.time())
            conn.execute(
                "INSERT OR REPLACE INTO claims (key, run_id, claimed_at) VALUES (?, ?, ?)", (key, run_id, utc_now_iso())
            )
        return Claim("claimed")

    def active_runs(self) -> pd.DataFrame:
        """Live runs and how many trials each has claimed: columns ``run_id, host, pid, started_at, command,
        claimed`` (dead runs are left out)."""
        import pandas as pd

        rows = self._conn.execute(
            "SELECT runs.run_id, host, pid, proc_start, heartbeat_at, started_at, command, COUNT(claims.key) FROM runs"
            " LEFT JOIN claims ON claims.run_id = runs.run_id GROUP BY runs.run_id ORDER BY started_at"
        ).fetchall()
        now = time.time()
        live = [(r[0], r[1], r[2], r[5], r[6], r[7]) for r in rows if _run_alive(r[1], r[2], r[3], r[4], now)]
        return pd.DataFrame.from_records(live, columns=["run_id", "host", "pid", "started_at", "command", "claimed"])

    @staticmethod
    def _forget_dead_runs(conn: sqlite3.Connection, now: float) -> None:
        rows = conn.execute("SELECT run_id, host, pid, proc_start, heartbeat_at FROM runs").fetchall()
        for run_id in [r[0] for r in rows if not _run_alive(r[1], r[2], r[3], r[4], now)]:
            conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
        conn.execute("DELETE FROM claims WHERE run_id NOT IN (SELECT run_id FROM runs)")
