"""``suite report``: a study's tables, figures and LaTeX from the results database."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from suite.cli.options import add_db, add_plugin
from suite.errors import UserError


def add_parser(sub: Any) -> None:
    """``suite report``."""
    p = sub.add_parser("report", help="tables, plots and LaTeX for a study (default: the database's only study, or 'default')")
    p.add_argument("study", nargs="?", help="study name as recorded in the database (default: its only study, or default)")
    p.add_argument("-o", "--output", help="output folder (default: reports/<study>/)")
    p.add_argument("--reps", type=int, help="bootstrap resamples for confidence intervals")
    add_plugin(p)
    add_db(p)


def cmd_report(args: argparse.Namespace) -> int:
    from suite.report import write_report
    from suite.store.schema import default_db_path

    path = default_db_path(args.db)
    if not path.exists():
        raise UserError(f"no results database at {path} (run 'suite run' first, or pass --db)")
    if args.reps is not None and args.reps < 10:
        raise UserError(f"--reps must be >= 10, got {args.reps}")
    kwargs = {"reps": args.reps} if args.reps else {}
    study = args.study or _only_study(path)
    out = write_report(study=study, db=path, out_dir=Path(args.output) if args.output else None, **kwargs)
    print(f"report written to {out}")
    return 0


def _only_study(path: Path) -> str:
    """The study a bare ``suite report`` means: the database's only study, else ``default`` if it has one."""
    from suite.store.database import ResultsStore

    with ResultsStore(path, create=False) as store:
        studies = store.studies()
    if len(studies) == 1 or "default" not in studies:
        if len(studies) > 1:
            raise UserError(f"{path} holds several studies ({', '.join(studies)}); name one: suite report STUDY")
        return studies[0] if studies else "default"
    return "default"
