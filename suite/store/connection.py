"""Opening a results database: creating, validating and upgrading the file, and the one-transaction-per-write rule."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Self

import suite
from suite.errors import UserError
from suite.provenance import utc_now_iso
from suite.store.legacy import upgrade_series_tables
from suite.store.schema import (
    APPLICATION_ID,
    BUSY_TIMEOUT_S,
    COORDINATION_SCHEMA,
    DB_ENV_VAR,
    FORMAT_NAME,
    OUR_TABLES,
    SCHEMA_STATEMENTS,
    SCHEMA_VERSION,
    SQL_TYPES,
    TRIAL_COLUMNS,
    default_db_path,
)


class StoreConnection:
    """One process's connection to a results database: opened (created if needed) and validated on construction.

    The base of :class:`suite.store.ResultsStore`; the other parts of the store (queries, run coordination,
    export, merge) read through :attr:`_conn` and write through :meth:`_transaction`.

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
            self._ensure_wal(conn)
            # FULL fsyncs the WAL on every commit: a finished trial costs minutes, one fsync is nothing.
            conn.execute("PRAGMA synchronous=FULL")
        except BaseException:
            conn.close()
            raise
        return conn

    def _ensure_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL unless it already is (a file in WAL needs no switch and so takes no lock).

        The switch needs every other connection's locks gone, and SQLite answers "database is locked" to it
        without waiting in the busy handler when another process holds one (two processes opening a fresh file
        together): wait for the lock here, within the connection's own busy timeout.
        """
        deadline = time.monotonic() + self._timeout_s
        while conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            try:
                conn.execute("PRAGMA journal_mode=WAL")
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise UserError(f"cannot open results database {self.path}: {exc}") from exc
                time.sleep(0.01)

    def _validate_or_create(self, conn: sqlite3.Connection) -> None:
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        except sqlite3.DatabaseError as exc:  # "file is not a database" for non-SQLite bytes
            raise UserError(f"{self.path} is not a rl-suite results database ({exc})") from exc
        if app_id == 0:
            if not self._table_names(conn):
                # An empty file becomes ours: in WAL before its schema exists, so that any process that sees
                # the schema finds the file in WAL already and never switches it under a writer.
                self._ensure_wal(conn)
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
        missing = OUR_TABLES - self._table_names(conn)
        if version < 1 or missing:
            raise UserError(
                f"{self.path} is not a rl-suite results database (schema version {version}, "
                f"missing tables: {', '.join(sorted(missing)) or 'none'})"
            )
        if version < SCHEMA_VERSION:
            self._upgrade(conn)
        if not set(COORDINATION_SCHEMA) <= self._table_names(conn):
            self._add_coordination_tables(conn)

    def _add_coordination_tables(self, conn: sqlite3.Connection) -> None:
        """Create ``runs``/``claims`` in a file written before they existed (one transaction; another process may
        be doing the same, so look again under the lock)."""
        with immediate(conn):
            have = self._table_names(conn)
            for name, statement in COORDINATION_SCHEMA.items():
                if name not in have:
                    conn.execute(statement)

    def _upgrade(self, conn: sqlite3.Connection) -> None:
        """Bring an older file to :data:`SCHEMA_VERSION` in one transaction: add the trial columns of later versions
        (nullable), rewrite the series tables of a version-1/2 file in version 3's compressed layout (losslessly:
        every update row is kept), then bump the version."""
        with immediate(conn):
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version < SCHEMA_VERSION:  # another process may have won
                have = {row[1] for row in conn.execute("PRAGMA table_info(trials)")}
                for name, kind in TRIAL_COLUMNS.items():
                    if name not in have:
                        conn.execute(f"ALTER TABLE trials ADD COLUMN {name} {SQL_TYPES[kind]}")
                if version < 3:
                    upgrade_series_tables(conn)
                conn.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (str(SCHEMA_VERSION),))
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        # Several workers may open a fresh path at the same moment: take the write lock, then look again.
        with immediate(conn):
            if conn.execute("PRAGMA application_id").fetchone()[0] == 0 and not self._table_names(conn):
                for statement in (*SCHEMA_STATEMENTS, *COORDINATION_SCHEMA.values()):
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with immediate(self._conn) as conn:
            yield conn


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction: ``BEGIN IMMEDIATE``, then ``COMMIT``, or a rollback on any exception. IMMEDIATE takes
    the write lock up front; a deferred transaction that upgrades later can fail with SQLITE_BUSY without waiting for
    busy_timeout."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


def rollback(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass  # no transaction was open (BEGIN itself failed); nothing to undo
