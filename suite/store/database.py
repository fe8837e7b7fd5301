"""The results database as one object: :class:`ResultsStore`, assembled from the parts of :mod:`suite.store`."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

from suite.store.coordination import RunCoordination
from suite.store.export import StoreExport
from suite.store.merge import StoreMerge
from suite.store.records import (
    INSERT_TRIAL,
    bin_update_rows,
    decode_updates_row,
    encode_curve,
    encode_evals,
    encode_trial,
    encode_updates,
    updates_row,
)
from suite.store.schema import UPDATE_BINS


class ResultsStore(StoreExport, StoreMerge, RunCoordination):
    """A results database: open (creating it if needed), validate, save and load trials.

    Use as a context manager, or call :meth:`close`. Loaders return pandas DataFrames; their ``keys`` argument
    restricts the result to those trial keys (None means all trials).

    Attributes:
        path: the database file.
    """

    # ------------------------------------------------------------------ writing

    def save_trial(self, record: Mapping[str, Any], *, full_updates: bool = False) -> None:
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
            full_updates: keep every update's row; by default a trial with more than
                :data:`~suite.store.schema.UPDATE_BINS` updates keeps that many bins (mean/min/max of each
                diagnostic, first and last update and step exact; see :meth:`update_bins`).

        Raises:
            ValueError: the record has unknown or missing fields, a bad status, or malformed series. This is
                a programming error in the caller, so it is not a :class:`UserError`.
        """
        trial_row = encode_trial(record)
        key = trial_row[0]
        # Encode everything before taking the lock, so the transaction only does I/O.
        curve_row = (key, *encode_curve(record.get("curve")))
        eval_row = (key, *encode_evals(record.get("evals")))
        update_row = (key, *encode_updates(record.get("updates"), full=full_updates))

        with self._transaction() as conn:
            for table in ("curves", "evals", "updates", "trials", "claims"):
                conn.execute(f"DELETE FROM {table} WHERE key = ?", (key,))
            conn.execute(INSERT_TRIAL, trial_row)
            self._write_series(conn, curve_row, eval_row, update_row)

    def _write_series(
        self,
        conn: sqlite3.Connection,
        curve_row: tuple[Any, ...],
        eval_row: tuple[Any, ...],
        update_row: tuple[Any, ...],
    ) -> None:
        # A separate method so the crash-safety tests can kill the process between the trial row and its series.
        conn.execute("INSERT INTO curves VALUES (?, ?, ?)", curve_row)
        conn.execute("INSERT INTO evals VALUES (?, ?, ?)", eval_row)
        conn.execute("INSERT INTO updates VALUES (?, ?, ?, ?, ?, ?)", update_row)

    def add_to_study(self, study: str, keys: Iterable[str], tier: str | None = None) -> None:
        """Record that ``study`` includes these trial keys (whoever ran them) at budget ``tier`` (``custom``
        for a ``--steps`` budget), in one transaction; a later call for the same key replaces its tier."""
        rows = [(study, k, tier) for k in keys]
        with self._transaction() as conn:
            conn.executemany("INSERT OR REPLACE INTO study_trials (study, key, tier) VALUES (?, ?, ?)", rows)

    # ------------------------------------------------------------------ migrating

    def bin_updates(self, bins: int = UPDATE_BINS) -> tuple[int, int, int]:
        """Bin the update rows of every trial that keeps more than ``bins`` of them one per update (resolution
        ``every``: recorded before binning existed); rows kept on request (``full``) are left as they are.

        The one lossy step of ``suite migrate``: each such trial keeps ``bins`` rows of consecutive updates with the
        mean, minimum and maximum of every diagnostic and the first and last update and step exact (see
        :func:`suite.store.records.bin_update_rows`); its trial row, curve and evaluations are not touched. One
        transaction per trial, so an interrupted call keeps what it did and a second call finishes the rest.

        Returns:
            ``(trials binned, update rows before, rows after)``.
        """
        keys = [k for (k,) in self._conn.execute(
            "SELECT key FROM updates WHERE resolution = 'every' AND n > ? ORDER BY key", (bins,)
        ).fetchall()]  # fmt: skip
        before = after = 0
        for key in keys:
            with self._transaction() as conn:
                row = conn.execute(
                    "SELECT n, resolution, metrics, data FROM updates WHERE key = ? AND resolution = 'every' AND n > ?",
                    (key, bins),
                ).fetchone()
                if row is None:  # another process binned it meanwhile
                    continue
                binned = bin_update_rows(decode_updates_row(*row), bins)
                conn.execute(
                    "UPDATE updates SET n = ?, n_updates = ?, resolution = ?, metrics = ?, data = ? WHERE key = ?",
                    (*updates_row(binned), key),
                )
                before += row[0]
                after += binned.n
        return len(keys), before, after
