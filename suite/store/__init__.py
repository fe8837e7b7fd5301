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

Modules: :mod:`~suite.store.schema` (tables, columns, header, default path), :mod:`~suite.store.connection`
(opening, validating, upgrading; transactions), :mod:`~suite.store.records` (encoding records into rows and blobs,
decoding them back), :mod:`~suite.store.queries` (reading), :mod:`~suite.store.coordination` (runs and claims),
:mod:`~suite.store.export` (CSV/Parquet, compaction), :mod:`~suite.store.merge` (merging databases) and
:mod:`~suite.store.database` (:class:`ResultsStore`, which puts them together). The names below are re-exported
here, the import path for everything outside the package.
"""

from suite.store.coordination import RUN_STALE_S, Claim
from suite.store.database import ResultsStore
from suite.store.merge import MergeResult
from suite.store.schema import (
    APPLICATION_ID,
    BUSY_TIMEOUT_S,
    DB_ENV_VAR,
    DEFAULT_DB_PATH,
    ENV_FAILURE_KINDS,
    EXPORT_SUFFIXES,
    FORMAT_NAME,
    RECORD_FIELDS,
    SCHEMA_VERSION,
    STATUSES,
    TABLES,
    default_db_path,
)

__all__ = [
    "APPLICATION_ID", "BUSY_TIMEOUT_S", "DB_ENV_VAR", "DEFAULT_DB_PATH", "ENV_FAILURE_KINDS", "EXPORT_SUFFIXES",
    "FORMAT_NAME", "RECORD_FIELDS", "RUN_STALE_S", "SCHEMA_VERSION", "STATUSES", "TABLES", "Claim", "MergeResult",
    "ResultsStore", "default_db_path",
]  # fmt: skip
