"""``suite regress``: is HEAD worse than BASE (returns, speed, memory)?"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from suite.cli.options import add_kernels
from suite.errors import UserError


def add_parser(sub: Any) -> None:
    """``suite regress``."""
    p = sub.add_parser(
        "regress",
        help="is HEAD worse than BASE? returns, speed and memory per (algorithm, env); exit 1 if so",
        description="Build BASE and HEAD (default: the working tree), run the regression study with both, interleaved, "
        "and compare returns (identical, or a one-sided Welch test with a margin), training steps/s and peak memory "
        "(paired ratios with confidence intervals) per (algorithm, env). Exit 1 when HEAD is worse, 0 otherwise.",
    )
    p.add_argument("base", nargs="?", help="revision to compare with (branch, tag, commit)")
    p.add_argument("head", nargs="?", help="revision under test (default: the working tree, uncommitted changes included)")
    p.add_argument(
        "--study",
        action="append",
        help="study name or TOML path, repeatable (default: regression, regression-returns, regression-memory; "
        "pre-release: regression-full and regression-memory)",
    )
    p.add_argument("--tier", help="budget tier (default: the study's)")
    p.add_argument("--seeds", help="seed spec (default: the study's)")
    p.add_argument("--repeats", type=int, help="runs per revision, interleaved (default 2; a reference: its own)")
    p.add_argument(
        "--max-repeats", type=int,
        help="runs per revision an undecided comparison (estimate beyond a speed or memory threshold, interval not) "
        "may reach, running only its algorithm and env again (default 6; = --repeats: never)",
    )  # fmt: skip
    p.add_argument("--threads", type=int, help="torch threads per trial (default: the study's)")
    p.add_argument("--workers", type=int, default=1, help="parallel trials inside each run (default 1)")
    p.add_argument(
        "--schedule",
        choices=("interleaved", "concurrent"),
        help="concurrent (the revisions' twin runs side by side, one CPU each; the default where the machine has a CPU "
        "per revision and worker) or interleaved (one run at a time, alternating; the default otherwise)",
    )
    p.add_argument("--speed-threshold", type=float, default=1.1, help="slower needs HEAD/BASE steps/s < 1/F (default 1.1)")
    p.add_argument(
        "--memory-threshold", type=float, default=1.1, help="hungrier needs HEAD/BASE peak memory > F (default 1.1)"
    )
    p.add_argument(
        "--return-margin", type=float, default=0.1, help="worse needs a drop of the normalised score beyond this (default 0.1)"
    )
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of every test (default 0.05)")
    p.add_argument("--against-reference", action="store_true", help="compare HEAD with results/reference/ (no BASE build)")
    p.add_argument(
        "--write-reference", action="store_true", help="run the study with HEAD's commit and write results/reference/"
    )
    p.add_argument("--reference", help="reference folder (default: results/reference/ in the repository)")
    p.add_argument("--cache", help="build cache (default: $SUITE_CACHE or ~/.cache/rl-suite)")
    p.add_argument("--deps-env", help="use this virtual environment's packages as every revision's dependencies")
    p.add_argument("-o", "--output", help="run folder (default: results/regress/<base>-<head>-<study>/)")
    p.add_argument("--no-report", action="store_true", help="skip the side-by-side study report")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_kernels(p)


def cmd_regress(args: argparse.Namespace) -> int:
    from suite.regress import RegressOptions, RevisionFailed, Thresholds, regress

    opts = RegressOptions(
        base=args.base, head=args.head, studies=args.study or [], tier=args.tier, seeds=args.seeds, repeats=args.repeats,
        max_repeats=args.max_repeats, threads=args.threads, workers=args.workers, schedule=args.schedule,
        thresholds=Thresholds(speed=args.speed_threshold, memory=args.memory_threshold, return_margin=args.return_margin,
                              alpha=args.alpha),
        against_reference=args.against_reference, write_reference=args.write_reference,
        reference=Path(args.reference) if args.reference else None, cache=Path(args.cache) if args.cache else None,
        deps_env=Path(args.deps_env) if args.deps_env else None, output=Path(args.output) if args.output else None,
        report=not args.no_report, quiet=args.quiet, kernels=args.kernels,
    )  # fmt: skip
    try:
        return regress(opts)
    except RevisionFailed as exc:
        if exc.side == "base":
            raise UserError(str(exc)) from None
        print(f"suite: regress: FAIL: {exc}", file=sys.stderr)
        return 1
