"""Upgrading the series tables of schema versions 1 and 2 (``curves``, ``evals`` and ``updates`` stored as raw
blobs and one row per evaluation episode) to version 3's compressed rows, losslessly: every update row is kept (marked
``every``, so ``suite migrate`` may bin it later) and every value reads back bit for bit."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import numpy as np

from suite.store.records import U1, curve_row, evals_row, full_update_rows, updates_row
from suite.store.schema import F8, I8, SERIES_STATEMENTS


def upgrade_series_tables(conn: sqlite3.Connection) -> None:
    """Rewrite ``curves``, ``evals`` and ``updates`` in version 3's layout, inside the caller's transaction."""
    for table, rows in (("curves", _curves(conn)), ("evals", _evals(conn)), ("updates", _updates(conn))):
        conn.execute(SERIES_STATEMENTS[table].replace(f"CREATE TABLE {table} ", f"CREATE TABLE {table}_v3 ", 1))
        places = ", ".join("?" * (1 + {"curves": 2, "evals": 2, "updates": 5}[table]))
        conn.executemany(f"INSERT INTO {table}_v3 VALUES ({places})", rows)
    for table in ("curves", "evals", "updates"):
        conn.execute(f"DROP TABLE {table}")
        conn.execute(f"ALTER TABLE {table}_v3 RENAME TO {table}")


def _curves(conn: sqlite3.Connection) -> Iterator[tuple[object, ...]]:
    for key, _, step, ret, length in conn.execute("SELECT key, n, step_i8, return_f8, length_i8 FROM curves").fetchall():
        yield (key, *curve_row(np.frombuffer(step, I8), np.frombuffer(ret, F8), np.frombuffer(length, I8)))


def _evals(conn: sqlite3.Connection) -> Iterator[tuple[object, ...]]:
    rows = conn.execute(
        'SELECT key, idx, step, final, episode, "return", length, wall_time_s FROM evals ORDER BY key, idx, episode'
    ).fetchall()
    by_key: dict[str, list[tuple[object, ...]]] = {}
    for row in rows:
        by_key.setdefault(row[0], []).append(row[1:])
    keys = [k for (k,) in conn.execute("SELECT key FROM trials").fetchall()]
    dtypes: tuple[np.dtype, ...] = (I8, I8, U1, I8, F8, F8, F8)
    for key in sorted(set(keys) | set(by_key)):
        columns = list(zip(*by_key.get(key, []), strict=True)) or [()] * 7
        # NULL (a NaN return, an unknown length or wall time) becomes NaN, which reads back as before
        arrays = [np.array([np.nan if v is None else v for v in c], dtype=d) for c, d in zip(columns, dtypes, strict=True)]
        yield (key, *evals_row(arrays))


def _updates(conn: sqlite3.Connection) -> Iterator[tuple[object, ...]]:
    import json

    for key, n, metrics, update_no, step, values in conn.execute(
        "SELECT key, n, metrics, update_i8, step_i8, values_f8 FROM updates"
    ).fetchall():
        names = json.loads(metrics)
        matrix = np.frombuffer(values, F8).reshape(n, len(names)).astype(np.float64)
        update_ints, step_ints = (np.frombuffer(b, I8).astype(np.int64) for b in (update_no, step))
        rows = full_update_rows(names, update_ints, step_ints, matrix)
        yield (key, *updates_row(rows))
