"""``suite migrate``: re-encode results databases in the current format, with the update rows binned."""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path
from typing import Any

from suite.errors import UserError


def add_parser(sub: Any) -> None:
    """``suite migrate``."""
    p = sub.add_parser(
        "migrate",
        help="re-encode results databases in the current format: update rows binned, blobs compressed, file compacted",
        description="Upgrade each database to the current schema (lossless), bin the per-update diagnostics of trials "
        "that keep more rows than the default resolution (the one lossy step: trial rows, curves and evaluations are "
        "untouched; rows recorded with --full-updates are left as they are), then compact the file. Safe to run again: "
        "a database already migrated is only compacted. Run it while no other command uses the database.",
    )  # fmt: skip
    p.add_argument("databases", nargs="+", metavar="DB", help="results database file(s)")


def _size(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def _schema_version(path: Path) -> int | None:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.Error:
        return None  # not SQLite: the store says so in its own words


def cmd_migrate(args: argparse.Namespace) -> int:
    from suite.store.database import ResultsStore
    from suite.store.schema import SCHEMA_VERSION, UPDATE_BINS

    paths = [Path(p).expanduser() for p in args.databases]
    for path in paths:  # every path checked before any is changed
        if not path.is_file():
            raise UserError(f"no results database at {path}" + (" (it is a directory)" if path.is_dir() else ""))
    for path in paths:
        size_before, version = _size(path), _schema_version(path)
        with ResultsStore(path, create=False) as store:
            trials, rows_before, rows_after = store.bin_updates()
            store.compact()
        schema = f"schema {version} -> {SCHEMA_VERSION}" if version != SCHEMA_VERSION else f"schema {SCHEMA_VERSION}"
        binned = (
            f"{trials} trials' update rows binned to at most {UPDATE_BINS:,} ({rows_before:,} -> {rows_after:,} rows)"
            if trials
            else "no update rows to bin"
        )
        print(f"{path}: {schema}, {binned}, {size_before / 1e6:.2f} MB -> {_size(path) / 1e6:.2f} MB")
    return 0
