"""Exporting a results table to CSV or Parquet, and compacting a database file for shipping.

The trials export is flat where the data are flat, so pandas reads it without parsing anything: each trial's
per-phase timing and memory (``record["phases"]``, :mod:`suite.memory_probe`) becomes one column per phase and
field, ``<phase>_<field>`` (``rollout_rss_peak_mb``, ``update_rss_growth_mb``, ``setup_alloc_peak_mb``...), with the
phase's seconds as ``<phase>_seconds``, ``<phase>_cpu_seconds`` and ``<phase>_wait_seconds`` (run-queue wait,
:mod:`suite.schedstat`; not ``_time_s``: the trial's own ``update_time_s`` is advantages + update, while
``update_seconds`` is the update phase alone) and its call count
as ``<phase>_calls``; the trial-level scalars of ``record["metrics"]`` become ``metric_<name>``. Only what is
nested by nature stays JSON text: ``env_kwargs``, ``config`` and ``provenance``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.context import PHASES
from suite.errors import UserError
from suite.memory_probe import SETUP
from suite.store.queries import StoreQueries
from suite.store.records import dump_json
from suite.store.schema import EXPORT_SUFFIXES, TABLES, TRIAL_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

PHASE_ORDER: tuple[str, ...] = (SETUP, *PHASES)
"""Order of the per-phase column groups (a phase not listed here follows, sorted by name)."""

PHASE_FIELD_NAMES: dict[str, str] = {"time_s": "seconds", "cpu_s": "cpu_seconds", "wait_s": "wait_seconds", "calls": "calls"}
"""The first fields of each phase's columns, in this order, with their column names (``time_s`` renamed so that
``update_seconds`` cannot be read as the trial's ``update_time_s``); the other fields follow sorted by name."""


def phase_columns(phases: Sequence[Mapping[str, Mapping[str, Any]] | None]) -> dict[str, list[Any]]:
    """Per-phase timing and memory as flat columns.

    Args:
        phases: each trial's ``record["phases"]`` (``{phase: {field: value}}``; None or {} for a trial without).

    Returns:
        ``{"<phase>_<field>": values}``, one value per trial (None where that trial lacks the field), for every
        (phase, field) any trial has; phases in :data:`PHASE_ORDER`, fields as :data:`PHASE_FIELD_NAMES` says.
    """
    seen: dict[str, dict[str, None]] = {}
    for record in phases:
        for phase, fields in (record or {}).items():
            seen.setdefault(phase, {}).update(dict.fromkeys(fields))
    order = [p for p in PHASE_ORDER if p in seen] + sorted(p for p in seen if p not in PHASE_ORDER)
    columns: dict[str, list[Any]] = {}
    for phase in order:
        first = [name for name in PHASE_FIELD_NAMES if name in seen[phase]]
        for name in [*first, *sorted(n for n in seen[phase] if n not in first)]:
            column = f"{phase}_{PHASE_FIELD_NAMES.get(name, name)}"
            columns[column] = [((record or {}).get(phase) or {}).get(name) for record in phases]
    return columns


def metric_columns(metrics: Sequence[Mapping[str, Any] | None]) -> dict[str, list[Any]] | None:
    """Trial-level scalars as ``metric_<name>`` columns (names sorted), or None when a value is not a scalar (then
    the column stays JSON)."""
    names = sorted({name for m in metrics for name in (m or {})})
    if any(isinstance(v, (dict, list, tuple)) for m in metrics for v in (m or {}).values()):
        return None
    return {f"metric_{name}": [(m or {}).get(name) for m in metrics] for name in names}


class StoreExport(StoreQueries):
    """Export and compaction for :class:`suite.store.ResultsStore`."""

    def export(self, table: str, path: str | os.PathLike[str]) -> int:
        """Write one table (all trials) to CSV or Parquet, chosen by the file suffix.

        ``trials`` is written flat (:func:`flat_trials`): per-phase timing and memory and the trial's metrics as
        columns of their own, ``env_kwargs``, ``config`` and ``provenance`` as JSON text (sorted keys). Read a CSV
        back with ``pandas.read_csv(path, dtype={"key": str})``: a hex key of digits only would
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
            frame = flat_trials(frame)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            if suffix == ".csv":
                frame.to_csv(out, index=False)
            else:
                frame.to_parquet(out, index=False)
        except OSError as exc:
            raise UserError(f"cannot write {out}: {exc}") from exc
        return len(frame)

    def compact(self, page_size: int | None = None) -> None:
        """Make the file small (for a file that is shipped, e.g. a claim table's records): no free pages inside,
        the WAL folded in, and with ``page_size`` (a power of two, 512-65536) its pages that size. Small pages suit
        the claim records, whose curve and update blobs each leave part of an overflow page empty (docs/kernels.md
        has the sizes). Rows are unchanged. Only for a database no other process is using."""
        conn = self._conn
        if page_size is None:
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            return
        # SQLite changes the page size only on a VACUUM outside WAL mode: the WAL folded in, then back to WAL (empty)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        conn.execute("PRAGMA journal_mode=DELETE").fetchall()
        conn.execute(f"PRAGMA page_size={int(page_size)}").fetchall()
        conn.execute("VACUUM")
        conn.execute("PRAGMA journal_mode=WAL").fetchall()


def flat_trials(frame: pd.DataFrame) -> pd.DataFrame:
    """The trials table as exported: ``phases`` and ``metrics`` replaced, where they stand, by their flat columns
    (:func:`phase_columns`, :func:`metric_columns`), and the other JSON columns as JSON text."""
    import pandas as pd

    parts: list[pd.DataFrame] = []
    for name in frame.columns:
        values = frame[name].tolist()
        flat: dict[str, list[Any]] | None = None
        if name == "phases":
            flat = phase_columns(values)
        elif name == "metrics":
            flat = metric_columns(values)
        if flat is not None:
            parts.append(pd.DataFrame(flat, index=frame.index, columns=list(flat)))
        elif TRIAL_COLUMNS.get(name) == "json":
            parts.append(pd.DataFrame({name: [dump_json(v) for v in values]}, index=frame.index))
        else:
            parts.append(frame[[name]])
    return pd.concat(parts, axis=1)
