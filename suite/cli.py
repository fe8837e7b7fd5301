"""The ``suite`` command line.

Every user mistake ends in one ``suite: error: ...`` line on stderr and exit code 2 (never a traceback).
SIGINT (Ctrl-C) and SIGTERM end any command with one ``suite: interrupted ...`` line and exit code 130 / 143
(128 + the signal number); an interrupted run says how many trials were saved and loses none of them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from suite.errors import UserError
from suite.interrupts import Interrupted, interrupts_after, raising_interrupts

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage mistake in one line (no usage dump) and exits 2."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (see '{self.prog} --help')")


def _add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="results database (default: $SUITE_DB or results/suite.db)")


def _add_memory_profile(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--memory-profile", choices=("off", "rss", "full"), default="rss",
        help="memory per phase in every trial record: off, rss (resident peak and growth; default) or full "
        "(plus tracked allocations, memray; slower)",
    )  # fmt: skip


def _add_exec(p: argparse.ArgumentParser) -> None:
    """Executor options shared by ``run`` and ``reproduce``."""
    p.add_argument("--executor", default="local", help="local (processes on this machine, default) or ray")
    p.add_argument("--address", help="Ray cluster to use (e.g. ray://head:10001 or auto); default: start Ray here")
    p.add_argument("--trial-gpus", type=float, default=0.0, metavar="N", help="GPUs Ray reserves per trial (default 0)")
    p.add_argument(
        "--max-retries", type=int, default=1, metavar="N",
        help="start a trial again up to N times when the machine made it fail: worker died, OOM kill, timeout (default 1)",
    )  # fmt: skip
    p.add_argument(
        "--trial-timeout", type=float, metavar="SECONDS",
        help="end a trial that runs longer in all (failed, reason timeout); 0: no limit; default: a trial that shows no "
        "progress for 300 s + budget / 5 steps/s",
    )  # fmt: skip
    p.add_argument(
        "--retry-failed", nargs="?", const="env", choices=["env", "all"],
        help="run the study's recorded failures again: env (machine causes, the default) or all",
    )  # fmt: skip
    p.add_argument("--yes", action="store_true", help=f"start a run of more than {1000:,} trials without asking")


def _add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu",
                   help="torch device of the algorithms' networks: cpu (default) or cuda[:N]; accelerators run on "
                        "the cpu only; recorded, and part of the trial key when not cpu")  # fmt: skip


def _add_plugin(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--plugin", action="append", metavar="FILE.py|MODULE",
        help="load an algorithm/env plugin first (repeatable); installed plugin packages load by themselves",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="suite", description="Seeded, recorded, resumable RL benchmark trials and their reports.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    p = sub.add_parser("list", help="algorithms, environments and studies")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_plugin(p)

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
    _add_device(p)
    p.add_argument("--no-save-models", action="store_true", help="do not save trained policies")
    p.add_argument("--no-report", action="store_true", help="do not write the study report at the end")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--tensorboard", metavar="DIR", help="also write TensorBoard event files per trial under DIR")
    _add_plugin(p)
    _add_exec(p)
    _add_memory_profile(p)
    _add_db(p)

    p = sub.add_parser("status", help="what the results database holds")
    _add_db(p)

    p = sub.add_parser("export", help="export a table of the results database to CSV or Parquet")
    p.add_argument("--table", required=True, help="trials, curves, evals or updates")
    p.add_argument("-o", "--output", required=True, help="FILE.csv or FILE.parquet")
    _add_db(p)

    p = sub.add_parser("merge", help="copy the trials of other results databases into this one (missing keys only)")
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="results database(s) to copy from")
    p.add_argument("--study", action="append", help="only this study's trials (repeatable)")
    _add_db(p)

    p = sub.add_parser("report", help="tables, plots and LaTeX for a study (default: the database's only study, or 'default')")
    p.add_argument("study", nargs="?", help="study name as recorded in the database (default: its only study, or default)")
    p.add_argument("-o", "--output", help="output folder (default: reports/<study>/)")
    p.add_argument("--reps", type=int, help="bootstrap resamples for confidence intervals")
    _add_plugin(p)
    _add_db(p)

    p = sub.add_parser("reproduce", help="check a published claim set: run its missing trials, a verdict per cell")
    p.add_argument("claimset", help="claim set name (see 'suite list') or path to a claim-set TOML")
    p.add_argument("--tier", help="budget tier: smoke, quick, standard, paper (paper = every claim's own budget)")
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
    _add_device(p)
    _add_exec(p)
    _add_plugin(p)
    _add_db(p)

    p = sub.add_parser("evaluate", help="re-evaluate a saved policy without retraining")
    p.add_argument("model", help="path of a saved policy (.pt)")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0, help="trial seed whose evaluation seeds are used")
    _add_device(p)
    _add_plugin(p)

    p = sub.add_parser("profile", help="profile a training slice: speed per part of the loop, memory per phase")
    profilers = p.add_subparsers(dest="profiler", parser_class=_Parser, metavar="PROFILER")
    _add_profile_speed(profilers)
    _add_profile_memory(profilers)
    _add_regress_parser(sub)
    return parser


def _add_profile_speed(profilers: Any) -> None:
    p = profilers.add_parser(
        "speed", help="time per part of the loop (env step, inference, storage, forward, backward, optimiser...), "
        "the env and network limit for the same work, the top functions"
    )  # fmt: skip
    p.add_argument("--algo", required=True, help="algorithm id")
    p.add_argument("--env", required=True, help="env id")
    p.add_argument("--steps", type=int, help="training slice (default: 20,480; 3,072 on Atari)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="hyperparameter override (TOML value)")
    p.add_argument("--env-arg", action="append", metavar="KEY=VALUE", help="env option, e.g. target=12345")
    p.add_argument("--seed", type=int, default=0, help="trial seed (default 0)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--top", type=int, default=15, help="functions to list from cProfile (default 15; 0 = skip it)")
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                   help="cpu (default): this process's CPU time, robust on a shared machine; wall: elapsed time")  # fmt: skip
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    _add_plugin(p)


def _add_profile_memory(profilers: Any) -> None:
    p = profilers.add_parser(
        "memory", help="peak RSS and tracked allocations per phase, each --toggle on and off, side by side"
    )
    p.add_argument("--algo", required=True, help="algorithm id")
    p.add_argument("--env", required=True, help="env id")
    p.add_argument("--toggle", action="append", metavar="NAME=VALUE", help="a config field to compare against the "
                   "baseline (repeatable; each alone, then all together)")  # fmt: skip
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="baseline hyperparameter override (TOML value)")
    p.add_argument("--env-arg", action="append", metavar="KEY=VALUE", help="env option, e.g. target=12345")
    p.add_argument("--steps", type=int, help="training slice per run (default: 3,072, or 2 rollouts if more)")
    p.add_argument("--repeats", type=int, default=3, help="runs per variant, each in a fresh process (default 3)")
    p.add_argument("--seed", type=int, default=0, help="trial seed (default 0)")
    p.add_argument("--mode", choices=("rss", "full"), default="full",
                   help="full (default): RSS and memray's tracked allocations; rss: RSS only, faster")  # fmt: skip
    p.add_argument("--eval-episodes", type=int, default=2, help="episodes of the one evaluation at the end (default 2)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--flamegraph", metavar="DIR", help="also write memray's flame graph (HTML) of every run to DIR")
    p.add_argument("-o", "--output", help="report folder (default: reports/profile-memory/<algo>_<env>/)")
    p.add_argument("--fresh", action="store_true", help="discard runs saved by an earlier call instead of resuming")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_regress_parser(sub: Any) -> None:
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


# -- commands ----------------------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    from suite.envs import list_envs
    from suite.plugins import loaded_plugins
    from suite.registry import list_algorithms
    from suite.study import list_studies

    algos: list[dict[str, Any]] = [
        {
            "id": a.id,
            "version": a.version,
            "action_spaces": sorted(a.action_spaces),
            "observations": sorted(a.observations),
            "summary": a.summary,
            "reference": a.reference,
            "aliases": list(a.aliases),
            "plugin": a.plugin,
            "plugin_version": a.plugin_version,
        }
        for a in list_algorithms()
    ]
    envs = [
        {"id": e.id, "family": e.family, "action_space": e.action_space, "observation": e.observation} for e in list_envs()
    ]
    studies = list_studies()
    claim_sets = _claim_sets()
    plugins: list[dict[str, Any]] = [
        {**p.as_dict(), "algorithms": list(p.algorithms), "envs": list(p.envs)} for p in loaded_plugins()
    ]
    if args.json:
        out = {"algorithms": algos, "envs": envs, "studies": studies, "claim_sets": claim_sets, "plugins": plugins}
        print(json.dumps(out, indent=2))
        return 0
    print("Algorithms:")
    for a in algos:
        alias = f" (aliases: {', '.join(a['aliases'])})" if a["aliases"] else ""
        origin = f" [plugin {a['plugin']} {a['plugin_version'] or ''}]".replace(" ]", "]") if a["plugin"] else ""
        print(f"  {a['id']:<20} v{a['version']:<7} {'/'.join(a['action_spaces']):<14} {a['summary']}{alias}{origin}")
        print(f"  {'':<20} {'':<8} {'':<14} ref: {a['reference']}")
    print("Environments:")
    for e in envs:
        print(f"  {e['id']:<16} {e['family']:<8} {e['action_space']:<9} {e['observation']}")
    print("  and any registered gymnasium id (e.g. Acrobot-v1): spaces, episode limit and family inferred")
    print("Studies:")
    for s in studies:
        print(f"  {s}")
    print("Claim sets (suite reproduce NAME):")
    for c in claim_sets:
        stand_in = " [stand-in]" if c["stand_in"] else ""
        print(f"  {c['name']:<24} {c['cells']:>3} cells  {c['title']}{stand_in}")
    if plugins:
        print("Plugins:")
        for p in plugins:
            provides = ", ".join(p["algorithms"] + p["envs"]) or "nothing"
            print(f"  {p['name']} {p['version'] or ''} ({p['kind']}: {p['source']}): {provides}")
    return 0


def _claim_sets() -> list[dict[str, Any]]:
    from suite.claims import list_claim_sets, load_claim_set

    out = []
    for name in list_claim_sets():
        claims = load_claim_set(name)
        out.append({"name": name, "title": claims.title, "source": claims.source, "cells": len(claims.cells),
                    "stand_in": bool(claims.stand_in)})  # fmt: skip
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def cmd_reproduce(args: argparse.Namespace) -> int:
    from suite.claims import load_claim_set
    from suite.claims.reproduce import reproduce
    from suite.store import default_db_path
    from suite.study import parse_seeds

    options = _exec_options(args, on_finish=None)
    options.check()
    claims = load_claim_set(args.claimset).select_rows(args.row or ()).select_columns(args.column or ())
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
    from suite.trial import check_device, trial_device

    with trial_device(check_device(args.device)):  # the claim set's trial specs run on it
        _, summary = reproduce(
            claims, db_path=default_db_path(args.db), out_dir=out, tier=args.tier, seeds=seeds, options=options,
            run=not args.no_run, command=shlex.join(words),
        )  # fmt: skip
    if summary is not None and summary.interrupted:
        print(
            f"suite: interrupted by {_signal_name(summary.signum)}; {len(summary.finished)} finished trials were saved. "
            "Run the same command again to complete the rest.",
            file=sys.stderr,
        )
        return summary.exit_code
    return 0


def _parse_overrides(items: list[str] | None) -> dict[str, dict[str, Any]]:
    from suite.config import parse_assignments
    from suite.registry import get_algorithm

    out: dict[str, dict[str, Any]] = {}
    for key, value in parse_assignments(items).items():
        algo, sep, name = key.rpartition(":")
        scope = get_algorithm(algo).id if sep else "*"
        out.setdefault(scope, {})[name] = value
    return out


def _exec_options(args: argparse.Namespace, on_finish: Any) -> Any:
    from suite.executors import ExecOptions

    return ExecOptions(
        executor=args.executor, workers=args.workers, address=args.address, trial_gpus=args.trial_gpus,
        max_retries=args.max_retries, trial_timeout=args.trial_timeout, retry_failed=args.retry_failed,
        save_models=not getattr(args, "no_save_models", False), show_progress=not args.quiet, assume_yes=args.yes,
        on_finish=on_finish,
    )  # fmt: skip


def cmd_run(args: argparse.Namespace) -> int:
    from suite.executors import LARGE_RUN_TRIALS, confirm_plan, execute, make_plan
    from suite.executors.common import worker_count
    from suite.store import default_db_path
    from suite.study import load_study, parse_seeds, parse_study

    if args.steps is not None and args.steps < 1:
        raise UserError(f"--steps must be >= 1, got {args.steps}")
    db_path = default_db_path(args.db)
    options = _exec_options(args, on_finish=lambda rec: _print_finished(rec, args.tensorboard))
    if not args.no_report:
        from suite.report.render import prepare

        # the report's imports and helper use the CPU the last trials leave free
        options = dataclasses.replace(options, on_spare_worker=prepare)
    options.check()
    if options.executor == "local":
        from suite.executors.local import start_forkserver

        start_forkserver()  # it imports torch while this process resolves the trials
    if args.study is None and args.env:
        study = parse_study({"name": "adhoc", "envs": args.env, "algos": args.algo or ["*"]}, plugins=args.plugin or ())
    else:
        study = load_study(args.study or "default", plugins=args.plugin or ())
    seeds = parse_seeds(args.seeds) if args.seeds else None
    overrides = _parse_overrides(args.set)
    specs = study.trials(
        tier=args.tier, algos=args.algo, envs=args.env, seeds=seeds, steps=args.steps,
        overrides=overrides, threads=args.threads,
    )  # fmt: skip
    if args.env_arg:
        # Env options are text (a TextMatch target "12345" must stay a string): parse, then keep strings as given.
        env_kwargs: dict[str, Any] = {}
        for item in args.env_arg:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise UserError(f"--env-arg expects key=value, got {item!r}")
            env_kwargs[key.strip()] = value.strip().strip('"')
        specs = [dataclasses.replace(s, env_kwargs={**s.env_kwargs, **env_kwargs}) for s in specs]
    specs = [dataclasses.replace(s, memory_profile=args.memory_profile, device=args.device) for s in specs]
    if not specs:
        raise UserError("the selection matches no trial (check --algo/--env against the study and 'suite list')")
    if len(specs) > LARGE_RUN_TRIALS and not args.yes:
        # Before resolving (about 2 ms a trial): a mistyped --seeds 0-100000 is questioned at once.
        confirm_plan(make_plan(specs, recorded=None, db_path=db_path, workers=worker_count(options.workers)), assume_yes=False)
        options = dataclasses.replace(options, assume_yes=True)
    resolved = [s.resolve() for s in specs]  # every mistake surfaces here, before anything runs
    tier = "custom" if args.steps else args.tier or study.tier
    try:
        summary = execute(resolved, db_path=db_path, study=study.name, tier=tier, options=options)
        if summary.interrupted:
            print(
                f"suite: interrupted by {_signal_name(summary.signum)}; {len(summary.finished)} finished trials saved "
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


def _signal_name(signum: int | None) -> str:
    import signal

    return signal.Signals(signum).name if signum else "a signal"


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


def cmd_report(args: argparse.Namespace) -> int:
    from suite.report import write_report
    from suite.store import default_db_path

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
    from suite.store import ResultsStore

    with ResultsStore(path, create=False) as store:
        studies = store.studies()
    if len(studies) == 1 or "default" not in studies:
        if len(studies) > 1:
            raise UserError(f"{path} holds several studies ({', '.join(studies)}); name one: suite report STUDY")
        return studies[0] if studies else "default"
    return "default"


def cmd_status(args: argparse.Namespace) -> int:
    from suite.store import ResultsStore, default_db_path

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
    from suite.store import ResultsStore, default_db_path

    path = default_db_path(args.db)
    if not path.exists():
        raise UserError(f"no results database at {path} (run 'suite run' first, or pass --db)")
    with ResultsStore(path) as store:
        n = store.export(args.table, args.output)
    print(f"wrote {n} rows of {args.table} to {args.output}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from suite.store import ResultsStore, default_db_path

    path = default_db_path(args.db)
    for source in args.sources:  # every source checked before this database is opened (or created)
        ResultsStore(source, create=False).close()
    with ResultsStore(path) as store:
        for source in args.sources:
            r = store.merge_from(source, studies=args.study or ())
            line = f"{r.source}: {r.added} trials added, {r.identical} already here with the same outcome"
            if r.differing:
                keys = ", ".join(k[:12] for k in r.differing[:5]) + (" ..." if len(r.differing) > 5 else "")
                line += f", {len(r.differing)} already here with another outcome (this database's kept: {keys})"
            print(line)
    print(f"merged into {path}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from suite.trial import check_device, eval_seeds, evaluate_policy, load_policy

    device = torch.device(check_device(args.device))
    policy, payload = load_policy(args.model)
    if device.type != "cpu":
        policy.to_device(device)
    returns, lengths = evaluate_policy(
        lambda o: policy.predict(o, deterministic=True), payload["env_id"], payload["env_kwargs"],
        eval_seeds(args.seed, args.episodes),
    )  # fmt: skip
    print(
        f"{payload['algo']} on {payload['env_id']}: mean return {np.mean(returns):.2f} ± {np.std(returns):.2f} "
        f"over {len(returns)} episodes (mean length {np.mean(lengths):.0f})"
    )
    return 0


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
        report=not args.no_report, quiet=args.quiet,
    )  # fmt: skip
    try:
        return regress(opts)
    except RevisionFailed as exc:
        if exc.side == "base":
            raise UserError(str(exc)) from None
        print(f"suite: regress: FAIL: {exc}", file=sys.stderr)
        return 1


def cmd_profile(args: argparse.Namespace) -> int:
    if args.profiler is None:
        raise UserError(f"suite profile needs a profiler: {', '.join(PROFILERS)} (see 'suite profile --help')")
    return PROFILERS[args.profiler](args)


def _env_kwargs(items: list[str] | None) -> dict[str, Any]:
    # Env options are text (a TextMatch target "12345" must stay a string), as for `suite run --env-arg`.
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--env-arg expects key=value, got {item!r}")
        out[key.strip()] = value.strip().strip('"')
    return out


def cmd_profile_speed(args: argparse.Namespace) -> int:
    from suite.config import parse_assignments
    from suite.profile import speed

    if args.top < 0:
        raise UserError(f"--top must be >= 0, got {args.top}")
    if args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    prof = speed.profile_speed(
        args.algo, args.env, steps=args.steps, overrides=parse_assignments(args.set), env_kwargs=_env_kwargs(args.env_arg),
        seed=args.seed, threads=args.threads, top=args.top, with_cprofile=args.top > 0, clock=args.clock,
    )  # fmt: skip
    print(speed.format_speed_profile(prof))
    if args.json:
        speed.write_json(prof, Path(args.json))
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def cmd_profile_memory(args: argparse.Namespace) -> int:
    from suite.config import parse_assignments
    from suite.profile import memory as pm
    from suite.report.memory import write_profile_report

    plan = pm.plan_profile(
        args.algo, args.env, toggles=args.toggle, overrides=parse_assignments(args.set), env_kwargs=_env_kwargs(args.env_arg),
        steps=args.steps, repeats=args.repeats, seed=args.seed, mode="full" if args.flamegraph else args.mode,
        n_eval_episodes=args.eval_episodes, threads=args.threads,
    )  # fmt: skip
    out = Path(args.output) if args.output else pm.default_output_dir(plan.algo, plan.env_label)
    print(
        f"profiling {plan.algo} on {plan.env_label}: {len(plan.variants)} variant(s) x {plan.repeats} repeat(s) of "
        f"{plan.steps:,} steps, mode {plan.mode}",
        file=sys.stderr,
    )
    try:
        runs = pm.run_profile(
            plan, out, flamegraph_dir=Path(args.flamegraph) if args.flamegraph else None, fresh=args.fresh,
            show_progress=not args.quiet,
        )  # fmt: skip
    except KeyboardInterrupt:
        print(f"suite: interrupted; finished runs are saved in {out / pm.RUNS_FILE}. Run the same command again to "
              "complete the rest.", file=sys.stderr)  # fmt: skip
        return EXIT_INTERRUPTED
    summary = pm.summarise(runs, plan)
    print(pm.format_profile(summary, plan, runs))
    index = write_profile_report(plan, runs, summary, out)
    print(f"report written to {index}", file=sys.stderr)
    return 0


PROFILERS = {"speed": cmd_profile_speed, "memory": cmd_profile_memory}
"""``suite profile NAME``: one function per profiler."""

TRAINING_COMMANDS = frozenset({"run", "reproduce", "evaluate", "profile"})
"""Commands that load torch and the envs: their native imports run with interrupts held until they finish."""

COMMANDS = {
    "list": cmd_list,
    "run": cmd_run,
    "status": cmd_status,
    "export": cmd_export,
    "merge": cmd_merge,
    "report": cmd_report,
    "reproduce": cmd_reproduce,
    "evaluate": cmd_evaluate,
    "profile": cmd_profile,
    "regress": cmd_regress,
}


def main(argv: Sequence[str] | None = None, *, exiting: bool = False) -> int:
    """Run one command; returns the exit code (0, 2 for a user mistake, 128 + signal when interrupted).

    ``exiting``: the process ends right after (see :func:`console_main`): SIGINT/SIGTERM are ignored once the command
    has returned, instead of getting their previous handlers back.
    """
    with raising_interrupts(then_ignore=exiting):
        try:
            parser = build_parser()
            args = parser.parse_args(argv)
            if args.command is None:
                parser.print_help()
                return EXIT_USAGE
            if getattr(args, "plugin", None):
                from suite.plugins import load_plugins

                load_plugins(args.plugin)  # before anything resolves an algorithm; a broken plugin stops here
            if args.command in TRAINING_COMMANDS:
                with interrupts_after():  # a Ctrl-C inside ale_py's native import would abort the process
                    import suite.trial  # noqa: F401  (torch, gymnasium, ale_py)
            return COMMANDS[args.command](args)
        except UserError as exc:
            print(f"suite: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except Interrupted as exc:
            print(f"suite: interrupted by {exc}; nothing was lost", file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt:  # a SIGINT before the handlers were installed
            print("suite: interrupted by SIGINT; nothing was lost", file=sys.stderr)
            return EXIT_INTERRUPTED
        except BrokenPipeError:
            os._exit(0)


def console_main() -> None:
    """The ``suite`` command: run :func:`main` and exit with its code. A signal that arrives after the command is
    done (the process is exiting) is ignored, so the exit status is the command's, never a death by signal."""
    sys.exit(main(exiting=True))


if __name__ == "__main__":
    console_main()
