"""``suite reproduce``: check a published claim set, cell by cell, with a verdict per cell."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from suite.cli.options import (
    add_db,
    add_device,
    add_exec,
    add_full_updates,
    add_kernels,
    add_plan,
    add_plugin,
    exec_options,
    print_plan,
    signal_name,
)


def add_parser(sub: Any) -> None:
    """``suite reproduce``."""
    p = sub.add_parser("reproduce", help="check a published claim set: run its missing trials, a verdict per cell")
    p.add_argument("claimset", help="claim set name (see 'suite list') or path to a claim-set TOML")
    p.add_argument(
        "--tier",
        help="budget tier: smoke, quick, standard, paper (paper = every claim's own budget); with --no-run, best = every "
        "cell's best-settled measurement from the records of the output folder and its detailed runs",
    )
    p.add_argument("--seeds", help="seed spec: 0-4, 0,3 or 0-2,7 (default: the set's; fewer seeds stay inconclusive)")
    p.add_argument("--row", action="append", help="only this row (its label or env id; repeatable): run and judge it alone")
    p.add_argument(
        "--column", action="append",
        help="only this column (its label, or an arm's label or algorithm id, e.g. ppo; repeatable)",
    )  # fmt: skip
    p.add_argument("-o", "--output", help="output folder (default: reports/claims/<set>/)")
    p.add_argument("--workers", type=int, help="trials at the same time (default: one per core; ray: the cluster's CPUs)")
    p.add_argument("--no-run", action="store_true", help="run nothing: judge what the database already holds")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_device(p)
    add_kernels(p)
    add_exec(p)
    add_full_updates(p)
    add_plugin(p)
    add_plan(p)
    add_db(p)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def cmd_reproduce(args: argparse.Namespace) -> int:
    from suite.claims import load_claim_set
    from suite.claims.reproduce import reproduce
    from suite.store.schema import default_db_path
    from suite.study import parse_seeds

    options = exec_options(args, on_finish=None)
    options.check()
    claims = load_claim_set(args.claimset).select_rows(args.row or ()).select_columns(args.column or ())
    if args.kernels:
        claims = dataclasses.replace(claims, kernels=args.kernels)
    seeds = parse_seeds(args.seeds) if args.seeds else None
    out = Path(args.output) if args.output else Path("reports") / "claims" / claims.name
    if (args.row or args.column) and not args.output:  # a part of the table never overwrites the whole one
        parts = [("rows", claims.rows)] if args.row else []
        parts += [("columns", args.column)] if args.column else []
        out = out / "-".join(f"{kind}-{'-'.join(_slug(x) for x in names)}" for kind, names in parts)
    words = ["suite", "reproduce", args.claimset]
    for row in args.row or ():
        words += ["--row", row]
    for column in args.column or ():
        words += ["--column", column]
    for flag, value in (("--tier", args.tier), ("--seeds", args.seeds), ("--db", args.db), ("-o", args.output)):
        if value is not None:
            words += [flag, str(value)]
    words += ["--no-run"] if args.no_run else []
    words += ["--kernels", args.kernels] if args.kernels else []
    from suite.trial import check_device, gpus_checked_where_trials_run, trial_device

    elsewhere = gpus_checked_where_trials_run() if args.executor == "ray" else contextlib.nullcontext()
    with elsewhere, trial_device(check_device(args.device)):  # the claim set's trial specs run on it
        if not args.no_run and args.tier != "best":
            from suite.cli.run import trials_to_run

            db_path = default_db_path(args.db)
            trials = list(claims.expand(args.tier, seeds).trials.values())
            todo, done, rerun = trials_to_run(trials, db_path, args.retry_failed)
            print_plan(args, [r.spec for r in todo], done=done, rerun=rerun, db_path=db_path)
        if args.plan:
            return 0
        _, summary = reproduce(
            claims, db_path=default_db_path(args.db), out_dir=out, tier=args.tier, seeds=seeds, options=options,
            run=not args.no_run, command=shlex.join(words),
        )  # fmt: skip
    if summary is not None and summary.interrupted:
        print(
            f"suite: interrupted by {signal_name(summary.signum)}; {len(summary.finished)} finished trials were saved. "
            "Run the same command again to complete the rest.",
            file=sys.stderr,
        )
        return summary.exit_code
    return 0
