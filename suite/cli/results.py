"""The results database's commands: ``suite status``, ``suite export`` and ``suite merge``."""

from __future__ import annotations

import argparse
from typing import Any

from suite.cli.options import add_db
from suite.errors import UserError


def add_parsers(sub: Any) -> None:
    """``suite status``, ``suite export`` and ``suite merge``."""
    p = sub.add_parser("status", help="what the results database holds")
    add_db(p)

    p = sub.add_parser("export", help="export a table of the results database to CSV or Parquet")
    p.add_argument(
        "--table",
        required=True,
        help="trials, curves, evals, updates or update_bins (the binned update rows: docs/records.md)",
    )
    p.add_argument("-o", "--output", required=True, help="FILE.csv or FILE.parquet")
    add_db(p)

    p = sub.add_parser("merge", help="copy the trials of other results databases into this one (missing keys only)")
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="results database(s) to copy from")
    p.add_argument("--study", action="append", help="only this study's trials (repeatable)")
    p.add_argument(
        "--kernels",
        choices=("native", "portable"),
        help="only the trials that ran in this kernel mode (a record made before the modes existed is native)",
    )
    add_db(p)


def cmd_status(args: argparse.Namespace) -> int:
    from suite.store.database import ResultsStore
    from suite.store.schema import default_db_path

    path = default_db_path(args.db)
    if not path.exists():
        raise UserError(f"no results database at {path} (run 'suite run' first, or pass --db)")
    with ResultsStore(path) as store:
        summary = store.summary()
        if summary.empty:
            print(f"{path}: no trials yet")
            return 0
        print(f"{path}:")
        print(summary.to_string(index=False))
        failures = store.failure_summary()
        if not failures.empty:
            print("\nnot ok, by cause (retried: took more than one attempt):")
            print(failures.fillna("-").to_string(index=False))
        runs = store.active_runs()
        for run in runs.itertuples(index=False):
            since = f"pid {run.pid} on {run.host} since {run.started_at}"
            print(f"\nrunning now: {since}, {run.claimed} trials in progress: {run.command}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from suite.store.database import ResultsStore
    from suite.store.schema import default_db_path

    path = default_db_path(args.db)
    if not path.exists():
        raise UserError(f"no results database at {path} (run 'suite run' first, or pass --db)")
    with ResultsStore(path) as store:
        n = store.export(args.table, args.output)
    print(f"wrote {n} rows of {args.table} to {args.output}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from suite.store.database import ResultsStore
    from suite.store.schema import default_db_path

    path = default_db_path(args.db)
    for source in args.sources:  # every source checked before this database is opened (or created)
        ResultsStore(source, create=False).close()
    with ResultsStore(path) as store:
        for source in args.sources:
            r = store.merge_from(source, studies=args.study or (), kernels=args.kernels)
            line = f"{r.source}: {r.added} trials added, {r.identical} already here with the same outcome"
            if r.differing:
                keys = "; ".join(c.describe() for c in r.conflicts[:5]) + (" ..." if len(r.differing) > 5 else "")
                line += f", {len(r.differing)} already here with another outcome (this database's kept: {keys})"
            print(line)
    print(f"merged into {path}")
    return 0
