"""The ``suite`` command line.

Every user mistake ends in one ``suite: error: ...`` line on stderr and exit code 2 (never a traceback);
an interrupted run exits 130 after saying how many trials were saved.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from suite.errors import UserError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage mistake in one line (no usage dump) and exits 2."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (see '{self.prog} --help')")


def _add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="results database (default: $SUITE_DB or results/suite.db)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="suite", description="Seeded, recorded, resumable RL benchmark trials and their reports.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    p = sub.add_parser("list", help="algorithms, environments and studies")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("run", help="run a study (default: the 'default' study) or an ad-hoc selection")
    p.add_argument("study", nargs="?", help="study name (see 'suite list') or path to a study TOML")
    p.add_argument("--algo", action="append", help="algorithm id (repeatable); filters the study")
    p.add_argument("--env", action="append", help="env id (repeatable); filters the study")
    p.add_argument("--env-arg", action="append", metavar="KEY=VALUE", help="env option, e.g. target=12345")
    p.add_argument("--seeds", help="seed spec: 0-4, 0,3 or 0-2,7")
    p.add_argument("--steps", type=int, help="step budget per trial (overrides the tier)")
    p.add_argument("--tier", help="budget tier: smoke, quick, standard, paper")
    p.add_argument("--set", action="append", metavar="[ALGO:]KEY=VALUE", help="hyperparameter override (TOML value)")
    p.add_argument("--workers", type=int, help="parallel trial processes (default: one per core)")
    p.add_argument("--threads", type=int, help="torch threads per trial (default 1; recorded)")
    p.add_argument("--no-save-models", action="store_true", help="do not save trained policies")
    p.add_argument("--no-report", action="store_true", help="do not write the study report at the end")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--tensorboard", metavar="DIR", help="also write TensorBoard event files per trial under DIR")
    _add_db(p)

    p = sub.add_parser("status", help="what the results database holds")
    _add_db(p)

    p = sub.add_parser("export", help="export a table of the results database to CSV or Parquet")
    p.add_argument("--table", required=True, help="trials, curves, evals or updates")
    p.add_argument("-o", "--output", required=True, help="FILE.csv or FILE.parquet")
    _add_db(p)

    p = sub.add_parser("report", help="tables, plots and LaTeX for a study (default: the 'default' study)")
    p.add_argument("study", nargs="?", help="study name as recorded in the database (default: default)")
    p.add_argument("-o", "--output", help="output folder (default: reports/<study>/)")
    p.add_argument("--reps", type=int, help="bootstrap resamples for confidence intervals")
    _add_db(p)

    p = sub.add_parser("evaluate", help="re-evaluate a saved policy without retraining")
    p.add_argument("model", help="path of a saved policy (.pt)")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0, help="trial seed whose evaluation seeds are used")

    _add_regress_parser(sub)
    return parser


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
    p.add_argument("--threads", type=int, help="torch threads per trial (default: the study's)")
    p.add_argument("--workers", type=int, default=1, help="parallel trials inside each run (default 1)")
    p.add_argument(
        "--schedule",
        default="interleaved",
        help="interleaved (runs alternate, default) or concurrent (the revisions' runs side by side)",
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
    from suite.registry import list_algorithms
    from suite.study import list_studies

    algos = [
        {
            "id": a.id,
            "version": a.version,
            "action_spaces": sorted(a.action_spaces),
            "observations": sorted(a.observations),
            "summary": a.summary,
            "reference": a.reference,
            "aliases": list(a.aliases),
        }
        for a in list_algorithms()
    ]
    envs = [
        {"id": e.id, "family": e.family, "action_space": e.action_space, "observation": e.observation} for e in list_envs()
    ]
    studies = list_studies()
    if args.json:
        print(json.dumps({"algorithms": algos, "envs": envs, "studies": studies}, indent=2))
        return 0
    print("Algorithms:")
    for a in algos:
        alias = f" (aliases: {', '.join(a['aliases'])})" if a["aliases"] else ""
        print(f"  {a['id']:<20} v{a['version']:<7} {'/'.join(a['action_spaces']):<14} {a['summary']}{alias}")
        print(f"  {'':<20} {'':<8} {'':<14} ref: {a['reference']}")
    print("Environments:")
    for e in envs:
        print(f"  {e['id']:<16} {e['family']:<8} {e['action_space']:<9} {e['observation']}")
    print("Studies:")
    for s in studies:
        print(f"  {s}")
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


def cmd_run(args: argparse.Namespace) -> int:
    from suite.executor import run_trials
    from suite.store import ResultsStore, default_db_path
    from suite.study import load_study, parse_seeds, parse_study

    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers must be >= 1, got {args.workers}")
    if args.steps is not None and args.steps < 1:
        raise UserError(f"--steps must be >= 1, got {args.steps}")
    if args.study is None and args.env:
        study = parse_study({"name": "adhoc", "envs": args.env, "algos": args.algo or ["*"]})
    else:
        study = load_study(args.study or "default")
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
    if not specs:
        raise UserError("the selection matches no trial (check --algo/--env against the study and 'suite list')")
    resolved = [s.resolve() for s in specs]  # every mistake surfaces here, before anything runs
    db_path = default_db_path(args.db)
    with ResultsStore(db_path) as store:
        store.add_to_study(study.name, [r.key for r in resolved], tier="custom" if args.steps else args.tier or study.tier)
        done = store.finished_keys()
        todo = [r for r in resolved if r.key not in done]
        tier = args.tier or study.tier
        print(
            f"study {study.name!r} ({tier} tier): {len(resolved)} trials, {len(resolved) - len(todo)} already in "
            f"{db_path}, {len(todo)} to run",
            file=sys.stderr,
        )

        def on_finish(rec: dict[str, Any]) -> None:
            from tqdm import tqdm

            if args.tensorboard:
                from suite.report import write_tensorboard

                write_tensorboard(rec, Path(args.tensorboard))

            score = "-" if rec["final_eval_mean"] is None else f"{rec['final_eval_mean']:.2f}"
            tqdm.write(
                f"  {rec['status']:<8} {rec['algo']}/{rec['env_label']}/seed{rec['seed']}: eval {score}, "
                f"{rec['steps_per_second']:.0f} steps/s, {rec['wall_time_s']:.1f} s"
                + (f"  [{rec['error']}]" if rec["error"] else ""),
                file=sys.stderr,
            )

        models_dir = None if args.no_save_models else db_path.parent / "models"
        summary = run_trials(
            resolved, save=store.save_trial, workers=args.workers, models_dir=models_dir, done_keys=done,
            show_progress=not args.quiet, on_finish=on_finish,
        )  # fmt: skip
        keys = [r.key for r in resolved]
        print_summary(store, keys)
    if summary.interrupted:
        print(
            f"suite: interrupted; {len(summary.finished)} finished trials were saved to {db_path}. "
            "Run the same command again to complete the rest.",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    if not args.no_report:
        _maybe_report(study.name, db_path)
    return 0


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
    out = write_report(study=args.study or "default", db=path, out_dir=Path(args.output) if args.output else None, **kwargs)
    print(f"report written to {out}")
    return 0


def print_summary(store: Any, keys: Sequence[str]) -> None:
    """One line per (algo, env): trials by status, final evaluation mean and std over seeds, steps/s."""
    df = store.trials()
    df = df[df["key"].isin(set(keys))]
    if df.empty:
        return
    rows = []
    for (algo, env), g in df.groupby(["algo", "env_label"], sort=True):
        ok = g[g["status"] == "ok"]
        scores = ok["final_eval_mean"].dropna()
        rows.append(
            (
                algo, env, len(g), len(ok), int((g["status"] == "failed").sum()), int((g["status"] == "diverged").sum()),
                f"{scores.mean():.2f} ± {scores.std(ddof=0):.2f}" if len(scores) else "-",
                f"{ok['steps_per_second'].mean():.0f}" if len(ok) else "-",
            )
        )  # fmt: skip
    header = ("algo", "env", "trials", "ok", "failed", "diverged", "final eval (mean ± sd over seeds)", "steps/s")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))


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


def cmd_evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    from suite.trial import eval_seeds, evaluate_policy, load_policy

    policy, payload = load_policy(args.model)
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
        threads=args.threads, workers=args.workers, schedule=args.schedule,
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


COMMANDS = {
    "list": cmd_list,
    "run": cmd_run,
    "status": cmd_status,
    "export": cmd_export,
    "report": cmd_report,
    "evaluate": cmd_evaluate,
    "regress": cmd_regress,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        return COMMANDS[args.command](args)
    except UserError as exc:
        print(f"suite: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("suite: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
