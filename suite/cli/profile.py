"""``suite profile speed`` and ``suite profile memory``: where a training slice's time and memory go."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from suite.cli.options import EXIT_INTERRUPTED, Parser, add_kernels, add_plugin, enter_kernels, env_kwargs
from suite.errors import UserError


def add_parser(sub: Any) -> None:
    """``suite profile`` and its profilers."""
    p = sub.add_parser("profile", help="profile a training slice: speed per part of the loop, memory per phase")
    profilers = p.add_subparsers(dest="profiler", parser_class=Parser, metavar="PROFILER")
    _add_profile_speed(profilers)
    _add_profile_memory(profilers)


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
    add_kernels(p)
    add_plugin(p)


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
    add_kernels(p)


def cmd_profile(args: argparse.Namespace) -> int:
    if args.profiler is None:
        raise UserError(f"suite profile needs a profiler: {', '.join(PROFILERS)} (see 'suite profile --help')")
    return PROFILERS[args.profiler](args)


def cmd_profile_speed(args: argparse.Namespace) -> int:
    from suite.config import parse_assignments
    from suite.profile import speed
    from suite.trial import trial_kernels

    enter_kernels(args.kernels)  # the slice runs in this process: its libraries must load in the mode

    if args.top < 0:
        raise UserError(f"--top must be >= 0, got {args.top}")
    if args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    with trial_kernels(args.kernels):
        prof = speed.profile_speed(
            args.algo, args.env, steps=args.steps, overrides=parse_assignments(args.set),
            env_kwargs=env_kwargs(args.env_arg), seed=args.seed, threads=args.threads, top=args.top,
            with_cprofile=args.top > 0, clock=args.clock,
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
    from suite.trial import trial_kernels

    enter_kernels(args.kernels)  # its runs are processes started from this one: they inherit its variables
    with trial_kernels(args.kernels):
        plan = pm.plan_profile(
            args.algo, args.env, toggles=args.toggle, overrides=parse_assignments(args.set),
            env_kwargs=env_kwargs(args.env_arg), steps=args.steps, repeats=args.repeats, seed=args.seed,
            mode="full" if args.flamegraph else args.mode, n_eval_episodes=args.eval_episodes, threads=args.threads,
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
