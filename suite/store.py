"""The results database: one embedded SQLite file that every worker appends finished trials to.

Why SQLite: trials run in many worker processes and take minutes each; the record of a finished trial must
survive the worker being killed, and the report must load hundreds of trials with full learning curves in
seconds. SQLite in WAL mode gives atomic, durable, multi-process appends with no server.

Guarantees:
    * **One transaction per trial.** :meth:`ResultsStore.save_trial` writes the trial row, its learning curve,
      its evaluations and its update metrics in a single ``BEGIN IMMEDIATE ... COMMIT``. A writer killed at any
      point (SIGKILL included) leaves either the whole trial or none of it; committed trials are never lost
      (WAL + ``synchronous=FULL``, so even a power cut after ``COMMIT`` keeps the trial).
    * **Several writer processes.** Writers queue on SQLite's lock (``busy_timeout``); each holds it for a few
      milliseconds, since every record is validated and encoded *before* the transaction starts. Readers never
      block writers (WAL). Open one :class:`ResultsStore` per process; a store must not cross a ``fork``.
    * **Ours or nothing.** The file carries ``PRAGMA application_id`` = :data:`APPLICATION_ID` and
      ``PRAGMA user_version`` = :data:`SCHEMA_VERSION`; any other file is refused with a :class:`UserError`, and
      is never modified.

Schema (version 2):
    ``meta(name, value)``
        ``format`` = ``rl-suite-results``, ``schema_version``, ``created_at``, ``created_by`` (suite version).
    ``trials``
        One row per trial, primary key ``key``: the scalar fields of the trial record as columns, and
        ``env_kwargs``, ``config``, ``provenance``, ``phases`` (time and memory per training phase) and ``metrics``
        (trial-level scalars an algorithm or env adds, e.g. sample diversity) as JSON text.
    ``curves(key, n, step_i8, return_f8, length_i8)``
        One row per trial. The learning curve (one entry per finished training episode) is stored *column-wise*
        as little-endian numpy blobs (``int64`` steps, ``float64`` returns, ``int64`` lengths). A trial has up to
        ~10k episodes and a study 500+ trials; one row per episode would mean millions of rows and tens of
        millions of Python objects to load, whereas blobs load with :func:`numpy.frombuffer` in milliseconds.
    ``evals(key, idx, step, final, episode, return, length, wall_time_s)``
        Long format, one row per evaluation episode (``idx`` = position of the evaluation in the trial's list).
        Small (~200 rows per trial) and convenient to query in SQL, so kept relational.
    ``updates(key, n, metrics, update_i8, step_i8, values_f8)``
        One row per trial: ``metrics`` is a JSON list of the metric names, ``values_f8`` an ``n x len(metrics)``
        row-major ``float64`` matrix. Column-wise for the same load-speed reason as curves, and because float64
        keeps NaN (SQLite turns a NaN REAL into NULL).

Run coordination (tables ``runs`` and ``claims``, added to older files when opened; no schema-version change, since
no trial data changes shape):
    ``runs(run_id, host, pid, proc_start, started_at, heartbeat_at, command)``
        One row per ``suite run`` executing right now (removed when it ends; a SIGKILLed run leaves its row, which
        the next run recognises as dead).
    ``claims(key, run_id, claimed_at)``
        A trial some run is executing. Several ``suite run`` on one database at the same time share the work:
        a run only starts a trial it could claim (not recorded, not claimed by a live run), so each trial runs once;
        :meth:`ResultsStore.save_trial` drops the claim in the trial's own transaction. A run is live while its
        process exists (same host: pid and process start time) or, seen from another host, while its heartbeat is
        younger than :data:`RUN_STALE_S`.

Every trial has exactly one ``curves`` and one ``updates`` row (empty for a trial that failed early). For SQL
access to curves and updates, use :meth:`ResultsStore.export` to CSV or Parquet.
"""

from __future__ import annotations

import copy
import json
import math
import os
import socket
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

import suite
from suite.errors import UserError
from suite.provenance import utc_now_iso

if TYPE_CHECKING:  # pandas is imported where a frame is built: a trial process imports this module and never needs it
    import pandas as pd

APPLICATION_ID = 0x524C5354
"""``PRAGMA application_id`` of a results database: ASCII ``RLST``; tells our files from other SQLite files."""

SCHEMA_VERSION = 2
"""``PRAGMA user_version`` of databases this module writes; a file with a larger one was written by a newer suite.
Version 2 added the trial columns ``attempts``, ``failure_kind``, ``phases`` and ``metrics``; a version-1 file is
upgraded in place when opened (columns are only ever added, so the upgrade is one ``ALTER TABLE`` per column)."""

FORMAT_NAME = "rl-suite-results"

DEFAULT_DB_PATH = Path("results") / "suite.db"
"""Where the database lives when neither an explicit path nor ``$SUITE_DB`` is given (relative to the CWD)."""

DB_ENV_VAR = "SUITE_DB"

TABLES: tuple[str, ...] = ("trials", "curves", "evals", "updates")
"""Tables :meth:`ResultsStore.export` can write."""

EXPORT_SUFFIXES: tuple[str, ...] = (".csv", ".parquet")

STATUSES: tuple[str, ...] = ("ok", "failed", "diverged")

RUN_STALE_S = 600.0
"""A run seen from another host is dead when its heartbeat is older than this (same host: its process is checked)."""

ENV_FAILURE_KINDS: tuple[str, ...] = ("worker_died", "timeout", "oom")
"""``failure_kind`` values whose cause is the machine, not the algorithm: ``suite run --retry-failed`` re-runs these."""

BUSY_TIMEOUT_S = 60.0
"""How long a writer waits for another process's transaction. Transactions take milliseconds; a minute only
runs out if a process is stuck holding the lock, and then failing loudly is right."""

# Column name -> kind, in table order. Kinds: "text", "int" (nullable), "real" (nullable, NaN stored as NULL),
# "json" (any JSON-able value, stored as text). Required fields are in _REQUIRED.
_TRIAL_COLUMNS: dict[str, str] = {
    "key": "text",
    "study": "text",
    "algo": "text",
    "algo_version": "text",
    "env_id": "text",
    "env_kwargs": "json",
    "env_label": "text",
    "seed": "int",
    "budget": "int",
    "threads": "int",
    "n_eval_episodes": "int",
    "eval_freq": "int",
    "config": "json",
    "config_hash": "text",
    "status": "text",
    "error": "text",
    "traceback": "text",
    "steps": "int",
    "wall_time_s": "real",
    "rollout_time_s": "real",
    "update_time_s": "real",
    "eval_time_s": "real",
    "steps_per_second": "real",
    "peak_rss_mb": "real",
    "baseline_rss_mb": "real",
    "final_eval_mean": "real",
    "final_eval_std": "real",
    "provenance": "json",
    "started_at": "text",
    "ended_at": "text",
    "model_path": "text",
    "suite_version": "text",
    "format": "int",
    # schema version 2
    "attempts": "int",
    "failure_kind": "text",
    "phases": "json",
    "metrics": "json",
}
_REQUIRED: frozenset[str] = frozenset({"key", "algo", "env_id", "seed", "status"})
_JSON_DEFAULTS: dict[str, Any] = {"env_kwargs": {}, "config": {}, "provenance": {}, "phases": {}, "metrics": {}}
_ADDED_IN_V2: frozenset[str] = frozenset({"attempts", "failure_kind", "phases", "metrics"})
"""Columns a version-1 file lacks; they are nullable there (read back as None, or the JSON default)."""
_SERIES_FIELDS: frozenset[str] = frozenset({"curve", "evals", "updates"})
RECORD_FIELDS: frozenset[str] = frozenset(_TRIAL_COLUMNS) | _SERIES_FIELDS
"""Every key a trial record may have; :meth:`ResultsStore.save_trial` rejects others."""

_SQL_TYPES = {"text": "TEXT", "int": "INTEGER", "real": "REAL", "json": "TEXT"}
_NOT_NULL = (_REQUIRED | frozenset(_JSON_DEFAULTS)) - _ADDED_IN_V2

_SCHEMA: tuple[str, ...] = (
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE trials ("
    + ", ".join(
        f"{name} {_SQL_TYPES[kind]}" + (" PRIMARY KEY" if name == "key" else " NOT NULL" if name in _NOT_NULL else "")
        for name, kind in _TRIAL_COLUMNS.items()
    )
    + f", CHECK (status IN ({', '.join(repr(s) for s in STATUSES)})))",
    "CREATE INDEX trials_by_group ON trials (study, algo, env_label)",
    "CREATE TABLE curves (key TEXT PRIMARY KEY, n INTEGER NOT NULL,"
    " step_i8 BLOB NOT NULL, return_f8 BLOB NOT NULL, length_i8 BLOB NOT NULL)",
    # WITHOUT ROWID clusters a trial's eval episodes together on disk, so loading by key is a range scan.
    "CREATE TABLE evals (key TEXT NOT NULL, idx INTEGER NOT NULL, step INTEGER NOT NULL, final INTEGER NOT NULL,"
    ' episode INTEGER NOT NULL, "return" REAL, length INTEGER, wall_time_s REAL,'
    " PRIMARY KEY (key, idx, episode)) WITHOUT ROWID",
    # Study membership: a trial already recorded (by another study or an ad-hoc run) is skipped when a study
    # needs it again, but it belongs to that study's results too.
    "CREATE TABLE study_trials (study TEXT NOT NULL, key TEXT NOT NULL, tier TEXT, PRIMARY KEY (study, key)) WITHOUT ROWID",
    "CREATE TABLE updates (key TEXT PRIMARY KEY, n INTEGER NOT NULL, metrics TEXT NOT NULL,"
    " update_i8 BLOB NOT NULL, step_i8 BLOB NOT NULL, values_f8 BLOB NOT NULL)",
)
_COORDINATION_SCHEMA: dict[str, str] = {
    "runs": "CREATE TABLE runs (run_id TEXT PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL, proc_start REAL,"
    " started_at TEXT NOT NULL, heartbeat_at REAL NOT NULL, command TEXT)",
    "claims": "CREATE TABLE claims (key TEXT PRIMARY KEY, run_id TEXT NOT NULL, claimed_at TEXT NOT NULL)",
}
_OUR_TABLES = frozenset({"meta", "trials", "curves", "evals", "updates", "study_trials"})
"""Tables a results file must have (the coordination tables are added when missing)."""

_I8 = np.dtype("<i8")
_F8 = np.dtype("<f8")


def default_db_path(path: str | os.PathLike[str] | None = None) -> Path:
    """Resolve which database file to use.

    Args:
        path: an explicit path (e.g. the CLI's ``--db``); wins when given.

    Returns:
        ``path`` if given, else ``$SUITE_DB`` if set and non-empty, else ``results/suite.db`` relative to the
        current directory.
    """
    if path is not None and str(path) != "":
        return Path(path).expanduser()
    env = os.environ.get(DB_ENV_VAR, "")
    if env:
        return Path(env).expanduser()
    return DEFAULT_DB_PATH


class ResultsStore:
    """A results database: open (creating it if needed), validate, save and load trials.

    Use as a context manager, or call :meth:`close`. Loaders return pandas DataFrames; their ``keys`` argument
    restricts the result to those trial keys (None means all trials).

    Attributes:
        path: the database file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        create: bool = True,
        timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        """Open the database at ``path`` (see :func:`default_db_path`), creating it and its directory if needed.

        Args:
            path: database file; None applies ``$SUITE_DB`` and then ``results/suite.db``.
            create: if False, a missing file is a :class:`UserError` instead of being created (for read-only
                commands such as reports, where a typo in the path should not produce an empty database).
            timeout_s: how long to wait for another process's write lock before raising.

        Raises:
            UserError: the file is missing (with ``create=False``), cannot be opened, is not a rl-suite results
                database, or was written by a newer schema version.
        """
        self.path = default_db_path(path)
        self._timeout_s = float(timeout_s)
        self._pid = os.getpid()
        self._db: sqlite3.Connection | None = self._open(create)

    # ------------------------------------------------------------------ opening

    def _open(self, create: bool) -> sqlite3.Connection:
        path = self.path
        if path.exists() and not path.is_file():
            raise UserError(f"{path} is not a rl-suite results database (it is not a file)")
        if not path.exists():
            if not create:
                raise UserError(f"no results database at {path} (run some trials first, or set --db / ${DB_ENV_VAR})")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UserError(f"cannot create the directory for results database {path}: {exc}") from exc
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, so a trial is exactly one transaction.
            conn = sqlite3.connect(path, timeout=self._timeout_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise UserError(f"cannot open results database {path}: {exc}") from exc
        try:
            self._validate_or_create(conn)
            # Only now, once the file is known to be ours: WAL is a persistent property of the file.
            conn.execute("PRAGMA journal_mode=WAL")
            # FULL fsyncs the WAL on every commit: a finished trial costs minutes, one fsync is nothing.
            conn.execute("PRAGMA synchronous=FULL")
        except BaseException:
            conn.close()
            raise
        return conn

    def _validate_or_create(self, conn: sqlite3.Connection) -> None:
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        except sqlite3.DatabaseError as exc:  # "file is not a database" for non-SQLite bytes
            raise UserError(f"{self.path} is not a rl-suite results database ({exc})") from exc
        if app_id == 0:
            if not self._table_names(conn):
                self._create_schema(conn)
            # Read again in any case: another process may have created the schema (tables and header in one
            # transaction) between the first read and the look at the tables, which then sees its tables.
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id != APPLICATION_ID:
            tables = sorted(self._table_names(conn))
            what = f"application_id {app_id:#x}" if app_id else "no rl-suite application_id"
            shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
            raise UserError(f"{self.path} is not a rl-suite results database ({what}; tables: {shown or 'none'})")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise UserError(
                f"{self.path} was written by a newer rl-suite (schema version {version}; this version reads up to "
                f"{SCHEMA_VERSION}); upgrade rl-suite to read it"
            )
        missing = _OUR_TABLES - self._table_names(conn)
        if version < 1 or missing:
            raise UserError(
                f"{self.path} is not a rl-suite results database (schema version {version}, "
                f"missing tables: {', '.join(sorted(missing)) or 'none'})"
            )
        if version < SCHEMA_VERSION:
            self._upgrade(conn)
        if not set(_COORDINATION_SCHEMA) <= self._table_names(conn):
            self._add_coordination_tables(conn)

    def _add_coordination_tables(self, conn: sqlite3.Connection) -> None:
        """Create ``runs``/``claims`` in a file written before they existed (one transaction; another process may
        be doing the same, so look again under the lock)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            have = self._table_names(conn)
            for name, statement in _COORDINATION_SCHEMA.items():
                if name not in have:
                    conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def _upgrade(self, conn: sqlite3.Connection) -> None:
        """Add the trial columns of later schema versions (nullable), in one transaction, then bump the version."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:  # another process may have won
                have = {row[1] for row in conn.execute("PRAGMA table_info(trials)")}
                for name, kind in _TRIAL_COLUMNS.items():
                    if name not in have:
                        conn.execute(f"ALTER TABLE trials ADD COLUMN {name} {_SQL_TYPES[kind]}")
                conn.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (str(SCHEMA_VERSION),))
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        # Several workers may open a fresh path at the same moment: take the write lock, then look again.
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA application_id").fetchone()[0] == 0 and not self._table_names(conn):
                for statement in (*_SCHEMA, *_COORDINATION_SCHEMA.values()):
                    conn.execute(statement)
                conn.executemany(
                    "INSERT INTO meta (name, value) VALUES (?, ?)",
                    [
                        ("format", FORMAT_NAME),
                        ("schema_version", str(SCHEMA_VERSION)),
                        ("created_at", utc_now_iso()),
                        ("created_by", f"rl-suite {suite.__version__}"),
                    ],
                )
                # Header fields are written in the same transaction, so a half-created file cannot exist.
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    @staticmethod
    def _table_names(conn: sqlite3.Connection) -> set[str]:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError(f"results database {self.path} is closed")
        if os.getpid() != self._pid:
            # SQLite connections must not cross fork(): the child would share file locks with the parent.
            raise RuntimeError("a ResultsStore was inherited across fork(); open a new one in each worker process")
        return self._db

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._db is not None and os.getpid() == self._pid:
            self._db.close()
        self._db = None

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.path)!r})"

    # ------------------------------------------------------------------ writing

    def save_trial(self, record: Mapping[str, Any]) -> None:
        """Record one finished trial (any status), replacing an existing trial with the same key.

        The trial row, curve, evaluations and update metrics are written in one transaction (see the module
        docstring). numpy scalars and arrays are accepted anywhere and stored as plain numbers. NaN in a
        scalar field (e.g. ``final_eval_mean`` of a diverged run) and in eval returns reads back as NaN/None
        (SQLite stores it as NULL); NaN in curves and update metrics is kept exactly.

        Args:
            record: a trial record as produced by the trial runner; keys are :data:`RECORD_FIELDS`, of which
                ``key``, ``algo``, ``env_id``, ``seed`` and ``status`` are required. ``curve`` is
                ``{"step": [...], "return": [...], "length": [...]}`` (equal lengths), ``evals`` a list of
                ``{"step", "final", "returns", "lengths"}``, ``updates`` a list of dicts with ``update``,
                ``step`` and float metrics (metrics may differ between updates; absent ones read back as NaN).
                An evaluation with no episodes leaves no rows, so it does not read back.

        Raises:
            ValueError: the record has unknown or missing fields, a bad status, or malformed series. This is
                a programming error in the caller, so it is not a :class:`UserError`.
        """
        trial_row = _trial_row(record)
        key = trial_row[0]
        # Encode everything before taking the lock, so the transaction only does I/O.
        curve_row = (key, *_encode_curve(record.get("curve")))
        eval_rows = _eval_rows(key, record.get("evals"))
        update_row = (key, *_encode_updates(record.get("updates")))

        with self._transaction() as conn:
            for table in ("curves", "evals", "updates", "trials", "claims"):
                conn.execute(f"DELETE FROM {table} WHERE key = ?", (key,))
            conn.execute(_INSERT_TRIAL, trial_row)
            self._write_series(conn, curve_row, eval_rows, update_row)

    def _write_series(
        self,
        conn: sqlite3.Connection,
        curve_row: tuple[Any, ...],
        eval_rows: list[tuple[Any, ...]],
        update_row: tuple[Any, ...],
    ) -> None:
        # A separate method so the crash-safety tests can kill the process between the trial row and its series.
        conn.execute("INSERT INTO curves VALUES (?, ?, ?, ?, ?)", curve_row)
        conn.executemany("INSERT INTO evals VALUES (?, ?, ?, ?, ?, ?, ?, ?)", eval_rows)
        conn.execute("INSERT INTO updates VALUES (?, ?, ?, ?, ?, ?)", update_row)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        # IMMEDIATE takes the write lock up front; a deferred transaction that upgrades later can fail with
        # SQLITE_BUSY without waiting for busy_timeout.
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    # ------------------------------------------------------------------ reading

    def finished_keys(self) -> set[str]:
        """Keys of all recorded trials, whatever their status (a resumed study skips these)."""
        return {row[0] for row in self._conn.execute("SELECT key FROM trials")}

    def studies(self) -> list[str]:
        """Names of the studies with trials in this database (recorded by them or needed by them), sorted."""
        rows = self._conn.execute(
            "SELECT study FROM study_trials UNION SELECT study FROM trials WHERE study IS NOT NULL ORDER BY 1"
        ).fetchall()
        return [row[0] for row in rows]

    def failed_trials(self, keys: Iterable[str], which: str = "env") -> dict[str, str]:
        """The recorded failures among ``keys`` that ``suite run --retry-failed`` would run again.

        Args:
            keys: trial keys to look at (e.g. a study's).
            which: ``"env"``: failed trials whose cause is the machine (``failure_kind`` in
                :data:`ENV_FAILURE_KINDS`, or a schema-1 record whose error says ``WorkerDied``); ``"all"``: every
                trial whose status is not ``ok`` (also the algorithm's own exceptions and divergences).

        Returns:
            ``{key: ended_at}`` of those records (``ended_at`` identifies the record, see :meth:`claim`).
        """
        if which not in ("env", "all"):
            raise ValueError(f"which must be 'env' or 'all', got {which!r}")
        if which == "all":
            condition = "status != 'ok'"
            params: list[Any] = []
        else:
            condition = (
                "status = 'failed' AND (failure_kind IN (SELECT value FROM json_each(?))"
                " OR (failure_kind IS NULL AND error LIKE 'WorkerDied%'))"
            )
            params = [json.dumps(list(ENV_FAILURE_KINDS))]
        rows = self._conn.execute(
            f"SELECT key, ended_at FROM trials WHERE {condition} AND key IN (SELECT value FROM json_each(?))",
            [*params, json.dumps(_as_list(keys))],
        ).fetchall()
        return {key: ended_at or "" for key, ended_at in rows}

    def attempts(self, key: str) -> int:
        """How many times the recorded trial ``key`` was started (0 if not recorded; 1 for a schema-1 record)."""
        row = self._conn.execute("SELECT attempts FROM trials WHERE key = ?", (key,)).fetchone()
        if row is None:
            return 0
        return int(row[0]) if row[0] is not None else 1

    def speed_rows(self) -> pd.DataFrame:
        """The ok trials' timing, for :func:`suite.throughput.trial_times`: columns ``key``, ``algo``, ``env_id``,
        ``steps`` (int64), ``steps_per_second`` (over the training clock), ``wall_time_s`` (the whole trial's, start-up
        and evaluations included), ``warmup`` (int64: the config's ``learning_starts``, 0 without one)."""
        import pandas as pd

        rows = self._conn.execute(
            "SELECT key, algo, env_id, steps, steps_per_second, wall_time_s,"
            " COALESCE(CAST(json_extract(config, '$.learning_starts') AS INTEGER), 0) FROM trials"
            " WHERE status = 'ok' AND steps > 0 AND steps_per_second > 0 AND wall_time_s IS NOT NULL"
        ).fetchall()
        columns = ["key", "algo", "env_id", "steps", "steps_per_second", "wall_time_s", "warmup"]
        frame = pd.DataFrame.from_records(rows, columns=columns)
        return frame.astype({"key": object, "algo": object, "env_id": object, "steps": "int64",
                             "steps_per_second": "float64", "wall_time_s": "float64", "warmup": "int64"})  # fmt: skip

    def failure_summary(self) -> pd.DataFrame:
        """Trials that are not ``ok``, counted per (study, status, failure_kind), for ``suite status``.

        Returns:
            Columns ``study``, ``status``, ``failure_kind`` (None for schema-1 records), ``n`` (int64),
            ``retried`` (int64: how many of them took more than one attempt).
        """
        import pandas as pd

        rows = self._conn.execute(
            "SELECT study, status, failure_kind, COUNT(*), SUM(COALESCE(attempts, 1) > 1) FROM trials"
            " WHERE status != 'ok' GROUP BY study, status, failure_kind ORDER BY study, status, failure_kind"
        ).fetchall()
        frame = pd.DataFrame.from_records(rows, columns=["study", "status", "failure_kind", "n", "retried"])
        return frame.astype({"n": "int64", "retried": "int64"})

    # ------------------------------------------------------------------ run coordination

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

    def add_to_study(self, study: str, keys: Iterable[str], tier: str | None = None) -> None:
        """Record that ``study`` includes these trial keys (whoever ran them) at budget ``tier`` (``custom``
        for a ``--steps`` budget), in one transaction; a later call for the same key replaces its tier."""
        rows = [(study, k, tier) for k in keys]
        with self._transaction() as conn:
            conn.executemany("INSERT OR REPLACE INTO study_trials (study, key, tier) VALUES (?, ?, ?)", rows)

    def study_tiers(self, study: str) -> dict[str, str]:
        """``{trial key: tier}`` as recorded by :meth:`add_to_study` (keys without a recorded tier left out)."""
        rows = self._conn.execute(
            "SELECT key, tier FROM study_trials WHERE study = ? AND tier IS NOT NULL", (study,)
        ).fetchall()
        return dict(rows)

    def has_trial(self, key: str) -> bool:
        """Whether a trial with this key is recorded."""
        return self._conn.execute("SELECT 1 FROM trials WHERE key = ?", (key,)).fetchone() is not None

    def trials(
        self,
        *,
        study: str | None = None,
        algos: str | Iterable[str] | None = None,
        envs: str | Iterable[str] | None = None,
        status: str | Iterable[str] | None = None,
        keys: Iterable[str] | None = None,
    ) -> pd.DataFrame:
        """One row per trial, sorted by algo, env_label, seed, key. Filters combine with AND.

        Args:
            study: only trials of this study: run by it, or needed by it and found already recorded.
            algos: only these algorithm ids.
            envs: only these environments, matched against ``env_label`` or ``env_id``.
            status: only these statuses (``ok``, ``failed``, ``diverged``).
            keys: only these trial keys.

        Returns:
            Columns as in the trial record minus the series (``curve``, ``evals``, ``updates``).
            ``env_kwargs``, ``config`` and ``provenance`` hold parsed dicts; ``seed`` is int64; ``budget``,
            ``threads``, ``steps`` are nullable ``Int64``; timing, memory and eval columns are float64.
        """
        where: list[str] = []
        params: list[Any] = []
        if study is not None:
            where.append("(study = ? OR key IN (SELECT key FROM study_trials WHERE study = ?))")
            params.extend([study, study])
        for column, values in (("algo", algos), ("status", status), ("key", keys)):
            if values is not None:
                where.append(f"{column} IN (SELECT value FROM json_each(?))")
                params.append(json.dumps(_as_list(values)))
        if envs is not None:
            where.append("(env_label IN (SELECT value FROM json_each(?)) OR env_id IN (SELECT value FROM json_each(?)))")
            params.extend([json.dumps(_as_list(envs))] * 2)
        sql = f"SELECT {', '.join(_TRIAL_COLUMNS)} FROM trials"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY algo, env_label, seed, key"
        rows = self._conn.execute(sql, params).fetchall()
        return _trials_frame(rows)

    def curves(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Learning curves in long format: one row per finished training episode.

        Args:
            keys: trial keys to load; None loads all.

        Returns:
            Columns ``key`` (str), ``step`` (int64, global env step at the episode's end), ``return`` (float64),
            ``length`` (int64); trials in key order, episodes in recorded order.
        """
        import pandas as pd

        where, params = _key_filter(keys)
        rows = self._conn.execute(
            f"SELECT key, n, step_i8, return_f8, length_i8 FROM curves{where} ORDER BY key", params
        ).fetchall()
        counts = [row[1] for row in rows]
        return pd.DataFrame(
            {
                "key": _repeat_keys([row[0] for row in rows], counts),
                "step": _concat([row[2] for row in rows], _I8),
                "return": _concat([row[3] for row in rows], _F8),
                "length": _concat([row[4] for row in rows], _I8),
            }
        )

    def evals(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Evaluation episodes in long format.

        Args:
            keys: trial keys to load; None loads all.

        Returns:
            Columns ``key`` (str), ``step`` (int64), ``final`` (bool, the end-of-training evaluation),
            ``episode`` (int64, 0-based within its evaluation), ``return`` (float64), ``length`` (float64, NaN
            where unknown), ``wall_time_s`` (float64: training time, rollout + update, elapsed when the evaluation
            ran; NaN where unknown); trials in key order, evaluations in recorded order.
        """
        import pandas as pd

        where, params = _key_filter(keys)
        rows = self._conn.execute(
            f'SELECT key, step, final, episode, "return", length, wall_time_s FROM evals{where} ORDER BY key, idx, episode',
            params,
        ).fetchall()
        frame = pd.DataFrame.from_records(rows, columns=["key", "step", "final", "episode", "return", "length", "wall_time_s"])
        return frame.astype(
            {
                "key": object,
                "step": "int64",
                "final": bool,
                "episode": "int64",
                "return": "float64",
                "length": "float64",
                "wall_time_s": "float64",
            }
        )

    def updates(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Per-update training metrics, one row per gradient update phase.

        Args:
            keys: trial keys to load; None loads all.

        Returns:
            Columns ``key`` (str), ``update`` (int64), ``step`` (int64), then one float64 column per metric
            name seen in any loaded trial (first-seen order), NaN where a trial did not log that metric.
        """
        import pandas as pd

        where, params = _key_filter(keys)
        rows = self._conn.execute(
            f"SELECT key, n, metrics, update_i8, step_i8, values_f8 FROM updates{where} ORDER BY key", params
        ).fetchall()
        counts = [row[1] for row in rows]
        total = sum(counts)
        columns: dict[str, np.ndarray] = {}
        offset = 0
        for _, n, metrics_json, _, _, values_blob in rows:
            metrics = json.loads(metrics_json)
            values = np.frombuffer(values_blob, dtype=_F8).reshape(n, len(metrics))
            for j, name in enumerate(metrics):
                if name not in columns:
                    columns[name] = np.full(total, np.nan)
                columns[name][offset : offset + n] = values[:, j]
            offset += n
        return pd.DataFrame(
            {
                "key": _repeat_keys([row[0] for row in rows], counts),
                "update": _concat([row[3] for row in rows], _I8),
                "step": _concat([row[4] for row in rows], _I8),
                **columns,
            }
        )

    def get_trial(self, key: str) -> dict[str, Any] | None:
        """The full record of one trial, in the shape :meth:`save_trial` accepted, or None if absent.

        Scalars come back as Python ``int``/``float``/``str``/``None``; series as lists.
        """
        import pandas as pd

        frame = self.trials(keys=[key])
        if frame.empty:
            return None
        record: dict[str, Any] = {}
        for name, kind in _TRIAL_COLUMNS.items():
            value = frame.iloc[0][name]
            if kind in ("int", "real"):
                value = None if pd.isna(value) else (int(value) if kind == "int" else float(value))
            record[name] = value
        curve = self.curves([key])
        record["curve"] = {name: curve[name].tolist() for name in ("step", "return", "length")}
        record["evals"] = _evals_to_records(self._conn, key)
        updates = self.updates([key])
        metric_names = [c for c in updates.columns if c not in ("key", "update", "step")]
        record["updates"] = [
            {"update": int(u), "step": int(s), **{m: float(v) for m, v in zip(metric_names, vals, strict=True)}}
            for u, s, *vals in updates[["update", "step", *metric_names]].itertuples(index=False, name=None)
        ]
        return record

    def summary(self) -> pd.DataFrame:
        """Trial counts per (study, algo, env_label, status), for ``suite status``.

        Returns:
            Columns ``study`` (None for ad-hoc trials), ``algo``, ``env_label``, ``status``, ``n`` (int64).
        """
        import pandas as pd

        rows = self._conn.execute(
            "SELECT study, algo, env_label, status, COUNT(*) FROM trials"
            " GROUP BY study, algo, env_label, status ORDER BY study, algo, env_label, status"
        ).fetchall()
        frame = pd.DataFrame.from_records(rows, columns=["study", "algo", "env_label", "status", "n"])
        return frame.astype({"n": "int64"})

    def export(self, table: str, path: str | os.PathLike[str]) -> int:
        """Write one table (all trials) to CSV or Parquet, chosen by the file suffix.

        ``trials`` is written with ``env_kwargs``, ``config`` and ``provenance`` as JSON text (sorted keys).
        Read a CSV back with ``pandas.read_csv(path, dtype={"key": str})``: a hex key of digits only would
        otherwise be parsed as a number.

        Args:
            table: one of :data:`TABLES`.
            path: output file ending in ``.csv`` or ``.parquet``; parent directories are created.

        Returns:
            The number of rows written.

        Raises:
            UserError: unknown table or suffix, or the file cannot be written.
        """
        if table not in TABLES:
            raise UserError(f"unknown results table {table!r}; choose one of {', '.join(TABLES)}")
        out = Path(path)
        suffix = out.suffix.lower()
        if suffix not in EXPORT_SUFFIXES:
            raise UserError(f"cannot export to {out}: unknown file type {suffix or '(no suffix)'!r}; use .csv or .parquet")
        frame: pd.DataFrame = getattr(self, table)()
        if table == "trials":
            for name, kind in _TRIAL_COLUMNS.items():
                if kind == "json":
                    frame[name] = [_dump_json(v) for v in frame[name]]
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            if suffix == ".csv":
                frame.to_csv(out, index=False)
            else:
                frame.to_parquet(out, index=False)
        except OSError as exc:
            raise UserError(f"cannot write {out}: {exc}") from exc
        return len(frame)

    def compact(self) -> None:
        """Make the file small (for a file that is shipped, e.g. a claim table's records): no free pages inside,
        the WAL folded in. Only for a database no other process is using."""
        self._conn.execute("VACUUM")
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def merge_from(
        self, source: str | os.PathLike[str], studies: Sequence[str] = (), keys: Iterable[str] | None = None
    ) -> MergeResult:
        """Copy the trials of another results database into this one: the records of several machines (array
        jobs, sessions, claim rows run apart) become one database that reports and ``suite reproduce --no-run``
        read as if one run had made them.

        Every trial of ``source`` (of ``studies`` only, and of ``keys`` only, when given) that this database lacks is
        copied whole: its row, curve, evaluations and update metrics, and its study memberships. A key already here is never
        overwritten: both records are kept apart and compared on what the key determines (status, steps trained,
        final evaluation; trials are pure functions of their key), and those that differ are listed. One
        transaction: an interrupted merge adds nothing.

        Raises:
            UserError: ``source`` is missing, is not a results database, is this database, or names no such study.
        """
        src_path = Path(source)
        if src_path.exists() and self.path.exists() and src_path.resolve() == self.path.resolve():
            raise UserError(f"cannot merge {src_path} into itself")
        with ResultsStore(src_path, create=False) as src:  # validates it (format, schema; upgrades an older one)
            known = set(src.studies())
        missing = [s for s in studies if s not in known]
        if missing:
            raise UserError(f"{src_path} has no study {missing[0]!r}; its studies: {', '.join(sorted(known)) or 'none'}")
        conn = self._conn
        cols = ", ".join(f'"{c}"' for c in _TRIAL_COLUMNS)
        conn.execute("ATTACH DATABASE ? AS src", (str(src_path.resolve()),))  # validated above; only read
        try:
            in_studies = f"study IN ({', '.join('?' * len(studies))})" if studies else "1"
            where = f" WHERE key IN (SELECT key FROM src.study_trials WHERE {in_studies}) OR {in_studies}" if studies else ""
            params = [*studies, *studies]
            chosen = f"SELECT key FROM src.trials{where}"
            with self._transaction():
                conn.execute(f"CREATE TEMP TABLE merge_keys AS {chosen}", params)
                if keys is not None:
                    conn.execute("CREATE TEMP TABLE merge_only (key TEXT PRIMARY KEY)")
                    conn.executemany("INSERT OR IGNORE INTO temp.merge_only VALUES (?)", [(k,) for k in keys])
                    conn.execute("DELETE FROM temp.merge_keys WHERE key NOT IN (SELECT key FROM temp.merge_only)")
                    conn.execute("DROP TABLE temp.merge_only")
                conn.execute("CREATE TEMP TABLE merge_new AS SELECT key FROM temp.merge_keys WHERE key NOT IN "
                             "(SELECT key FROM main.trials)")  # fmt: skip
                compare = ("status", "steps", "final_eval_mean")
                same_sql = " AND ".join(f"a.{c} IS b.{c}" for c in compare)
                both = conn.execute(
                    f"SELECT a.key, {same_sql} FROM main.trials a JOIN src.trials b ON a.key = b.key"
                    " WHERE a.key IN (SELECT key FROM temp.merge_keys)"
                ).fetchall()
                new = "key IN (SELECT key FROM temp.merge_new)"
                added = conn.execute(f"INSERT INTO main.trials ({cols}) SELECT {cols} FROM src.trials WHERE {new}").rowcount
                for table in ("curves", "evals", "updates"):
                    conn.execute(f"INSERT INTO main.{table} SELECT * FROM src.{table} WHERE {new}")
                conn.execute(
                    "INSERT OR IGNORE INTO main.study_trials (study, key, tier) SELECT study, key, tier"
                    f" FROM src.study_trials WHERE ({in_studies}) AND key IN (SELECT key FROM temp.merge_keys)"
                    " AND key IN (SELECT key FROM main.trials)",
                    list(studies),
                )
                conn.execute("DROP TABLE temp.merge_keys")
                conn.execute("DROP TABLE temp.merge_new")
        finally:
            conn.execute("DETACH DATABASE src")
        return MergeResult(
            source=str(src_path), added=added, identical=sum(1 for _, same in both if same),
            differing=sorted(k for k, same in both if not same),
        )  # fmt: skip


# ---------------------------------------------------------------------- run coordination helpers

_HOST = socket.gethostname()


@dataclass(frozen=True)
class MergeResult:
    """What :meth:`ResultsStore.merge_from` did."""

    source: str
    added: int
    """Trials copied (absent here before)."""
    identical: int
    """Trials already here with the same outcome (status, steps, final evaluation): this database's kept."""
    differing: list[str]
    """Keys already here whose outcome differs in the source: this database's record kept, listed for the user."""


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


# ---------------------------------------------------------------------- encoding helpers

_INSERT_TRIAL = f"INSERT INTO trials ({', '.join(_TRIAL_COLUMNS)}) VALUES ({', '.join('?' for _ in _TRIAL_COLUMNS)})"


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass  # no transaction was open (BEGIN itself failed); nothing to undo


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _dump_json(value: Any) -> str:
    # sort_keys: the same config always gives the same text, so exports diff cleanly.
    return json.dumps(value, sort_keys=True, default=_json_default)


def _trial_row(record: Mapping[str, Any]) -> tuple[Any, ...]:
    unknown = set(record) - RECORD_FIELDS
    if unknown:
        raise ValueError(f"trial record has unknown fields {sorted(unknown)}; the store knows {sorted(RECORD_FIELDS)}")
    missing = [name for name in sorted(_REQUIRED) if record.get(name) is None]
    if missing:
        raise ValueError(f"trial record lacks required fields {missing}")
    if record["status"] not in STATUSES:
        raise ValueError(f"trial status {record['status']!r} is not one of {STATUSES}")
    row: list[Any] = []
    for name, kind in _TRIAL_COLUMNS.items():
        value = record.get(name)
        if isinstance(value, np.generic):
            value = value.item()
        if kind == "json":
            value = _dump_json(_JSON_DEFAULTS[name] if value is None else value)
        elif value is not None and kind == "int":
            value = int(value)
        elif value is not None and kind == "real":
            value = float(value)
        elif value is not None and kind == "text" and not isinstance(value, str):
            value = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
        row.append(value)
    return tuple(row)


def _as_array(values: Any, dtype: np.dtype, what: str) -> np.ndarray:
    try:
        return np.asarray([] if values is None else values, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be a sequence of numbers: {exc}") from exc


def _encode_curve(curve: Mapping[str, Sequence[Any]] | None) -> tuple[int, bytes, bytes, bytes]:
    curve = curve or {}
    step = _as_array(curve.get("step"), _I8, "curve['step']")
    ret = _as_array(curve.get("return"), _F8, "curve['return']")
    length = _as_array(curve.get("length"), _I8, "curve['length']")
    if not (step.ndim == ret.ndim == length.ndim == 1 and len(step) == len(ret) == len(length)):
        raise ValueError(
            f"curve step/return/length must be 1-D and equally long, got {step.shape}, {ret.shape}, {length.shape}"
        )
    return len(step), step.tobytes(), ret.tobytes(), length.tobytes()


def _eval_rows(key: str, evals: Sequence[Mapping[str, Any]] | None) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for idx, ev in enumerate(evals or ()):
        returns = list(ev.get("returns") or ())
        lengths = list(ev.get("lengths") or ())
        if lengths and len(lengths) != len(returns):
            raise ValueError(f"evals[{idx}] has {len(returns)} returns but {len(lengths)} lengths")
        step, final = int(ev["step"]), bool(ev.get("final", False))
        wall = ev.get("wall_time_s")
        wall = None if wall is None else float(wall)
        for episode, ret in enumerate(returns):
            length = lengths[episode] if lengths else None
            rows.append((key, idx, step, final, episode, float(ret), None if length is None else int(length), wall))
    return rows


def _encode_updates(updates: Sequence[Mapping[str, Any]] | None) -> tuple[int, str, bytes, bytes, bytes]:
    updates = list(updates or ())
    names: dict[str, None] = {}  # an ordered set: metric columns keep the order the algorithm logs them in
    for entry in updates:
        for name in entry:
            if name not in ("update", "step"):
                names.setdefault(name)
    column = {name: j for j, name in enumerate(names)}
    n = len(updates)
    update_no = np.empty(n, dtype=_I8)
    step = np.empty(n, dtype=_I8)
    values = np.full((n, len(column)), np.nan, dtype=_F8)
    for i, entry in enumerate(updates):
        try:
            update_no[i] = int(entry["update"])
            step[i] = int(entry["step"])
        except KeyError as exc:
            raise ValueError(f"updates[{i}] lacks {exc.args[0]!r}") from exc
        for name, value in entry.items():
            j = column.get(name)
            if j is not None and value is not None:
                try:
                    values[i, j] = float(value)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"updates[{i}][{name!r}] = {value!r} is not a number") from exc
    return n, json.dumps(list(column)), update_no.tobytes(), step.tobytes(), values.tobytes()


# ---------------------------------------------------------------------- decoding helpers


def _as_list(values: str | Iterable[str]) -> list[str]:
    return [values] if isinstance(values, str) else list(values)


def _key_filter(keys: Iterable[str] | None) -> tuple[str, list[Any]]:
    # One JSON parameter instead of one "?" per key: no SQLite variable limit, however many keys a report asks for.
    if keys is None:
        return "", []
    return " WHERE key IN (SELECT value FROM json_each(?))", [json.dumps(_as_list(keys))]


def _repeat_keys(keys: list[str], counts: list[int]) -> np.ndarray:
    return np.repeat(np.array(keys, dtype=object), counts) if keys else np.array([], dtype=object)


def _concat(blobs: list[bytes], dtype: np.dtype) -> np.ndarray:
    # Native byte order for the DataFrame; the stored blobs are little-endian whatever the machine.
    native = dtype.newbyteorder("=")
    if not blobs:
        return np.array([], dtype=native)
    return np.concatenate([np.frombuffer(blob, dtype=dtype) for blob in blobs]).astype(native, copy=False)


def _trials_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame.from_records(rows, columns=list(_TRIAL_COLUMNS))
    dtypes: dict[str, Any] = {}
    for name, kind in _TRIAL_COLUMNS.items():
        if kind == "json":
            default = _JSON_DEFAULTS.get(name)
            frame[name] = [json.loads(text) if text is not None else copy.deepcopy(default) for text in frame[name]]
        elif kind == "real":
            dtypes[name] = "float64"
        elif kind == "int":
            dtypes[name] = "int64" if name in _REQUIRED else "Int64"
        else:
            dtypes[name] = object
    return frame.astype(dtypes)


def _evals_to_records(conn: sqlite3.Connection, key: str) -> list[dict[str, Any]]:
    evals: list[dict[str, Any]] = []
    last_idx = None
    for idx, step, final, ret, length, wall in conn.execute(
        'SELECT idx, step, final, "return", length, wall_time_s FROM evals WHERE key = ? ORDER BY idx, episode', (key,)
    ):
        if idx != last_idx:
            evals.append({"step": step, "final": bool(final), "returns": [], "lengths": []})
            if wall is not None:
                evals[-1]["wall_time_s"] = wall
            last_idx = idx
        evals[-1]["returns"].append(math.nan if ret is None else ret)
        evals[-1]["lengths"].append(length)
    return evals
