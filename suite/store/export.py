"""Exporting a results table to CSV or Parquet, and compacting a database file for shipping."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from suite.errors import UserError
from suite.store.queries import StoreQueries
from suite.store.records import dump_json
from suite.store.schema import EXPORT_SUFFIXES, TABLES, TRIAL_COLUMNS

if TYPE_CHECKING:
    import pandas as pd


class StoreExport(StoreQueries):
    """Export and compaction for :class:`suite.store.ResultsStore`."""

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
            for name, kind in TRIAL_COLUMNS.items():
                if kind == "json":
                    frame[name] = [dump_json(v) for v in frame[name]]
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
