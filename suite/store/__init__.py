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

Schema (version 3):
    ``meta(name, value)``
        ``format`` = ``rl-suite-results``, ``schema_version``, ``created_at``, ``created_by`` (suite version).
    ``trials``
        One row per trial, primary key ``key``: the scalar fields of the trial record as columns, and
        ``env_kwargs``, ``config``, ``provenance``, ``phases`` (time and memory per training phase) and ``metrics``
        (trial-level scalars an algorithm or env adds, e.g. sample diversity) as JSON text, so SQL can query them.
    ``curves(key, n, data)``
        One row per trial: the learning curve (one entry per finished training episode: ``int64`` steps,
        ``float64`` returns, ``int64`` lengths) as one compressed blob (:func:`~suite.store.records.pack_arrays`:
        byte-shuffled, steps delta-coded, zlib; lossless). A trial has up to ~10k episodes and a study 500+ trials;
        one row per episode would mean millions of rows to load, whereas a blob decodes in milliseconds.
    ``evals(key, n, data)``
        One row per trial: its ``n`` evaluation episodes (evaluation index, step, final flag, episode, return,
        length, wall time) as one compressed blob; NaN stands for a missing return, length or wall time.
    ``updates(key, n, n_updates, resolution, metrics, data)``
        One row per trial: the per-update diagnostics (``metrics``: a JSON list of their names). ``resolution``
        ``every`` or ``full``: one row per update (``float64``, exact; ``full`` was asked for with ``--full-updates``);
        ``binned``: a trial with more than :data:`~suite.store.schema.UPDATE_BINS` updates keeps that many rows of
        consecutive updates, each with its size, first and last update number and env step (exact) and the
        ``float32`` mean, minimum and maximum of every diagnostic. So a record's size grows with trials, not with
        the steps trained: a 1M-step A2C trial logs 200,000 updates. ``docs/records.md`` has the details.

A file of schema version 1 or 2 is upgraded in place when opened, losslessly (every update row kept, as
``every``); ``suite migrate`` bins its rows and compacts the file.

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
