"""The ``suite`` entry point: the parser of every command, and :func:`main`, which runs one with the suite's rules
for mistakes (one line, exit 2) and interrupts (one line, exit 128 + the signal)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from suite.cli import catalog, evaluate, migrate, profile, regress, report, reproduce, results, run
from suite.cli.options import EXIT_INTERRUPTED, EXIT_USAGE, Parser
from suite.errors import UserError
from suite.interrupts import Interrupted, interrupts_after, raising_interrupts
from suite.plugins import load_plugins  # importing it installs the loader of installed plugins (suite.loading)


def build_parser() -> argparse.ArgumentParser:
    """The ``suite`` parser: one sub-command per entry of :data:`COMMANDS`, in this order."""
    parser = Parser(prog="suite", description="Seeded, recorded, resumable RL benchmark trials and their reports.")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    catalog.add_parser(sub)
    run.add_parser(sub)
    results.add_parsers(sub)
    migrate.add_parser(sub)
    report.add_parser(sub)
    reproduce.add_parser(sub)
    evaluate.add_parser(sub)
    profile.add_parser(sub)
    regress.add_parser(sub)
    return parser


TRAINING_COMMANDS = frozenset({"run", "reproduce", "evaluate", "profile"})
"""Commands that load torch and the envs: their native imports run with interrupts held until they finish."""

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "list": catalog.cmd_list,
    "run": run.cmd_run,
    "status": results.cmd_status,
    "export": results.cmd_export,
    "merge": results.cmd_merge,
    "migrate": migrate.cmd_migrate,
    "report": report.cmd_report,
    "reproduce": reproduce.cmd_reproduce,
    "evaluate": evaluate.cmd_evaluate,
    "profile": profile.cmd_profile,
    "regress": regress.cmd_regress,
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
