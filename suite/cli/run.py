"""``suite run``: run a study or an ad-hoc selection of trials, then write its report."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from pathlib import Path
from typing import Any

from suite.cli.options import (
    add_db,
    add_device,
    add_exec,
    add_full_updates,
    add_kernels,
    add_memory_profile,
    add_plan,
    add_plugin,
    env_kwargs,
    exec_options,
    parse_overrides,
    print_plan,
    signal_name,
)
from suite.errors import UserError


def add_parser(sub: Any) -> None:
    """``suite run``."""
    p = sub.add_parser("run", help="run a study (default: the 'default' study) or an ad-hoc selection")
    p.add_argument("study", nargs="?", help="study name (see 'suite list') or path to a study TOML")
    p.add_argument("--algo", action="append", help="algorithm id (repeatable); filters the study")
    p.add_argument("--env", action="append", help="env id (repeatable); filters the study")
    p.add_argument("--env-arg", action="append", metavar="KEY=VALUE", help="env option, e.g. target=12345")
    p.add_argument("--seeds", help="seed spec: 0-4, 0,3 or 0-2,7")
    p.add_argument("--steps", type=int, help="step budget per trial (overrides the tier)")
    p.add_argument("--tier", help="budget tier: smoke, quick, standard, paper")
    p.add_argument("--set", action="append", metavar="[ALGO:]KEY=VALUE", help="hyperparameter override (TOML value)")
    p.add_argument("--workers", type=int, help="trials at the same time (default: one per core; ray: the cluster's CPUs)")
    p.add_argument("--threads", type=int, help="torch threads per trial (default 1; recorded)")
    add_device(p)
    add_kernels(p)
    p.add_argument("--no-save-models", action="store_true", help="do not save trained policies")
    p.add_argument("--no-report", action="store_true", help="do not write the study report at the end")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--tensorboard", metavar="DIR", help="also write TensorBoard event files per trial under DIR")
    add_plugin(p)
    add_exec(p)
    add_full_updates(p)
    add_memory_profile(p)
    add_plan(p)
    add_db(p)


def cmd_run(args: argparse.Namespace) -> int:
    from suite.executors import LARGE_RUN_TRIALS, confirm_plan, execute, plan_workers
    from suite.plan import make_run_plan
    from suite.store.schema import default_db_path
    from suite.study import load_study, parse_seeds, parse_study

    if args.steps is not None and args.steps < 1:
        raise UserError(f"--steps must be >= 1, got {args.steps}")
    db_path = default_db_path(args.db)
    options = exec_options(args, on_finish=lambda rec: _print_finished(rec, args.tensorboard))
    if not args.no_report:
        from suite.report.render import prepare

        # the report's imports and helper use the CPU the last trials leave free
        options = dataclasses.replace(options, on_spare_worker=prepare)
    options.check()
    if options.executor == "local" and not args.plan:
        from suite.executors.local import start_forkserver

        start_forkserver()  # it imports torch while this process resolves the trials
    if args.study is None and args.env:
        study = parse_study({"name": "adhoc", "envs": args.env, "algos": args.algo or ["*"]}, plugins=args.plugin or ())
    else:
        study = load_study(args.study or "default", plugins=args.plugin or ())
    seeds = parse_seeds(args.seeds) if args.seeds else None
    overrides = parse_overrides(args.set)
    specs = study.trials(
        tier=args.tier, algos=args.algo, envs=args.env, seeds=seeds, steps=args.steps,
        overrides=overrides, threads=args.threads,
    )  # fmt: skip
    if args.env_arg:
        env_args = env_kwargs(args.env_arg)
        specs = [dataclasses.replace(s, env_kwargs={**s.env_kwargs, **env_args}) for s in specs]
    specs = [dataclasses.replace(s, memory_profile=args.memory_profile, device=args.device) for s in specs]
    if args.kernels:
        specs = [dataclasses.replace(s, kernels=args.kernels) for s in specs]
    if not specs:
        raise UserError("the selection matches no trial (check --algo/--env against the study and 'suite list')")
    if len(specs) > LARGE_RUN_TRIALS and not args.yes and not args.plan:
        # Before resolving (which takes time per trial): a mistyped --seeds 0-100000 is questioned at once.
        confirm_plan(make_run_plan(specs, done=None, db_path=db_path), workers=plan_workers(options), assume_yes=False)
        options = dataclasses.replace(options, assume_yes=True)
    from suite.trial import gpus_checked_where_trials_run

    with gpus_checked_where_trials_run() if options.executor == "ray" else contextlib.nullcontext():
        resolved = [s.resolve() for s in specs]  # every mistake surfaces here, before anything runs
    todo, done, rerun = trials_to_run(resolved, db_path, options.retry_failed)
    print_plan(args, [r.spec for r in todo], done=done, rerun=rerun, db_path=db_path)
    if args.plan:
        return 0
    tier = "custom" if args.steps else args.tier or study.tier
    try:
        summary = execute(resolved, db_path=db_path, study=study.name, tier=tier, options=options)
        if summary.interrupted:
            print(
                f"suite: interrupted by {signal_name(summary.signum)}; {len(summary.finished)} finished trials saved "
                f"to {db_path}, {summary.not_run} not run (run the same command again to run them)",
                file=sys.stderr,
            )
            return summary.exit_code
        if not args.no_report:
            _maybe_report(study.name, db_path)
        return 0
    finally:
        if options.on_spare_worker is not None:
            from suite.report.render import discard_prepared

            discard_prepared()  # a helper no report took (interrupted, or the report failed before its figures)


def trials_to_run(resolved: list[Any], db_path: Path, retry_failed: str | None) -> tuple[list[Any], int, int]:
    """The resolved trials a run would run (not recorded, or recorded failures run again with ``--retry-failed``),
    one per key, how many of the others are recorded, and how many of those to run are failures run again: what
    :func:`suite.executors.execute` will find (:func:`suite.executors.pending`)."""
    from suite.executors import pending

    keys, todo, rerun = pending(resolved, db_path, retry_failed)
    return todo, len(keys) - len(todo), len(rerun)


def _print_finished(rec: dict[str, Any], tensorboard: str | None) -> None:
    """The line printed for each saved trial (and its TensorBoard files when asked)."""
    from tqdm import tqdm

    if tensorboard:
        from suite.report import write_tensorboard

        write_tensorboard(rec, Path(tensorboard))
    score = "-" if rec["final_eval_mean"] is None else f"{rec['final_eval_mean']:.2f}"
    attempts = f", attempt {rec['attempts']}" if (rec.get("attempts") or 1) > 1 else ""
    tqdm.write(
        f"  {rec['status']:<8} {rec['algo']}/{rec['env_label']}/seed{rec['seed']}: eval {score}, "
        f"{rec['steps_per_second']:.0f} steps/s, {rec['wall_time_s']:.1f} s{attempts}"
        + (f"  [{rec['error']}]" if rec["error"] else ""),
        file=sys.stderr,
    )


def _maybe_report(study: str, db_path: Path) -> None:
    from suite.report import write_report

    try:
        out = write_report(study=study, db=db_path)
    except UserError as exc:
        print(f"suite: no report written: {exc}", file=sys.stderr)
        return
    print(f"report written to {out}", file=sys.stderr)
