"""The results database's schema: tables, columns, the file header that marks a file as ours, and where it lives.

The module docstring of :mod:`suite.store` describes the tables and why each is laid out as it is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

APPLICATION_ID = 0x524C5354
"""``PRAGMA application_id`` of a results database: ASCII ``RLST``; tells our files from other SQLite files."""

SCHEMA_VERSION = 3
"""``PRAGMA user_version`` of databases this module writes; a file with a larger one was written by a newer suite.
Version 2 added the trial columns ``attempts``, ``failure_kind``, ``phases`` and ``metrics`` (one ``ALTER TABLE`` per
column). Version 3 stores each trial's curve, evaluations and update diagnostics as one compressed blob per table,
and the update diagnostics at most :data:`UPDATE_BINS` binned rows by default. An older file is upgraded in place
when opened, losslessly (every update row kept; ``suite migrate`` bins them)."""

FORMAT_NAME = "rl-suite-results"

DEFAULT_DB_PATH = Path("results") / "suite.db"
"""Where the database lives when neither an explicit path nor ``$SUITE_DB`` is given (relative to the CWD)."""

DB_ENV_VAR = "SUITE_DB"

TABLES: tuple[str, ...] = ("trials", "curves", "evals", "updates", "update_bins")
"""Tables :meth:`ResultsStore.export` can write."""

EXPORT_SUFFIXES: tuple[str, ...] = (".csv", ".parquet")

STATUSES: tuple[str, ...] = ("ok", "failed", "diverged")

ENV_FAILURE_KINDS: tuple[str, ...] = ("worker_died", "timeout", "oom")
"""``failure_kind`` values whose cause is the machine, not the algorithm: ``suite run --retry-failed`` re-runs these."""

BUSY_TIMEOUT_S = 60.0
"""How long a writer waits for another process's transaction. Transactions take milliseconds; a minute only
runs out if a process is stuck holding the lock, and then failing loudly is right."""

# Column name -> kind, in table order. Kinds: "text", "int" (nullable), "real" (nullable, NaN stored as NULL),
# "json" (any JSON-able value, stored as text). Required fields are in REQUIRED.
TRIAL_COLUMNS: dict[str, str] = {
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
REQUIRED: frozenset[str] = frozenset({"key", "algo", "env_id", "seed", "status"})
JSON_DEFAULTS: dict[str, Any] = {"env_kwargs": {}, "config": {}, "provenance": {}, "phases": {}, "metrics": {}}
ADDED_IN_V2: frozenset[str] = frozenset({"attempts", "failure_kind", "phases", "metrics"})
"""Columns a version-1 file lacks; they are nullable there (read back as None, or the JSON default)."""
SERIES_FIELDS: frozenset[str] = frozenset({"curve", "evals", "updates"})
RECORD_FIELDS: frozenset[str] = frozenset(TRIAL_COLUMNS) | SERIES_FIELDS
"""Every key a trial record may have; :meth:`ResultsStore.save_trial` rejects others."""

SQL_TYPES = {"text": "TEXT", "int": "INTEGER", "real": "REAL", "json": "TEXT"}
NOT_NULL = (REQUIRED | frozenset(JSON_DEFAULTS)) - ADDED_IN_V2

UPDATE_BINS = 1000
"""Most update rows a trial keeps by default: a trial with more updates keeps this many bins of consecutive updates,
each with the mean, minimum and maximum of every diagnostic and its first and last update number and env step (as
TensorBoard and W&B downsample), so a record's size grows with trials, not with the steps trained."""

RESOLUTIONS: dict[str, str] = {
    "every": "one row per update, exact (at most UPDATE_BINS updates, or kept from an older schema until `suite migrate`)",
    "full": "one row per update, exact, kept on request (--full-updates); `suite migrate` leaves it",
    "binned": "at most UPDATE_BINS rows of consecutive updates: float32 mean/min/max, first/last update and step exact",
}
"""The ``resolution`` of a trial's ``updates`` row, and what each keeps."""

SERIES_STATEMENTS: dict[str, str] = {
    # One row per trial, its series in one compressed blob (see suite.store.records.pack_arrays): a trial's row is
    # read in one go, and one blob a row wastes at most one overflow page's slack per trial.
    "curves": "CREATE TABLE curves (key TEXT PRIMARY KEY, n INTEGER NOT NULL, data BLOB NOT NULL)",
    "evals": "CREATE TABLE evals (key TEXT PRIMARY KEY, n INTEGER NOT NULL, data BLOB NOT NULL)",
    # n: rows kept; n_updates: updates done; resolution: see RESOLUTIONS. metrics: JSON list of the diagnostic names.
    "updates": "CREATE TABLE updates (key TEXT PRIMARY KEY, n INTEGER NOT NULL, n_updates INTEGER NOT NULL,"
    " resolution TEXT NOT NULL, metrics TEXT NOT NULL, data BLOB NOT NULL)",
}
"""The series tables of schema version 3."""

SCHEMA_STATEMENTS: tuple[str, ...] = (
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE trials ("
    + ", ".join(
        f"{name} {SQL_TYPES[kind]}" + (" PRIMARY KEY" if name == "key" else " NOT NULL" if name in NOT_NULL else "")
        for name, kind in TRIAL_COLUMNS.items()
    )
    + f", CHECK (status IN ({', '.join(repr(s) for s in STATUSES)})))",
    "CREATE INDEX trials_by_group ON trials (study, algo, env_label)",
    SERIES_STATEMENTS["curves"],
    SERIES_STATEMENTS["evals"],
    # Study membership: a trial already recorded (by another study or an ad-hoc run) is skipped when a study
    # needs it again, but it belongs to that study's results too.
    "CREATE TABLE study_trials (study TEXT NOT NULL, key TEXT NOT NULL, tier TEXT, PRIMARY KEY (study, key)) WITHOUT ROWID",
    SERIES_STATEMENTS["updates"],
)
COORDINATION_SCHEMA: dict[str, str] = {
    "runs": "CREATE TABLE runs (run_id TEXT PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL, proc_start REAL,"
    " started_at TEXT NOT NULL, heartbeat_at REAL NOT NULL, command TEXT)",
    "claims": "CREATE TABLE claims (key TEXT PRIMARY KEY, run_id TEXT NOT NULL, claimed_at TEXT NOT NULL)",
}
OUR_TABLES = frozenset({"meta", "trials", "curves", "evals", "updates", "study_trials"})
"""Tables a results file must have (the coordination tables are added when missing)."""

I8 = np.dtype("<i8")
F8 = np.dtype("<f8")
F4 = np.dtype("<f4")


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
