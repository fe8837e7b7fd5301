"""What the ``suite`` commands share: the argument parser that fails in one line, the option groups several
commands take, and the parsing of those options into the suite's types."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from suite.errors import UserError

EXIT_USAGE = 2
"""Exit code of a user's mistake."""
EXIT_INTERRUPTED = 130
"""Exit code of a command interrupted by SIGINT (128 + 2)."""


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage mistake in one line (no usage dump) and exits 2."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (see '{self.prog} --help')")


def add_db(p: argparse.ArgumentParser) -> None:
    """``--db``: the results database."""
    p.add_argument("--db", help="results database (default: $SUITE_DB or results/suite.db)")


def add_memory_profile(p: argparse.ArgumentParser) -> None:
    """``--memory-profile``: how each trial measures memory."""
    p.add_argument(
        "--memory-profile", choices=("off", "rss", "full"), default="rss",
        help="memory per phase in every trial record: off, rss (resident peak and growth; default) or full "
        "(plus tracked allocations, memray; slower)",
    )  # fmt: skip


def add_exec(p: argparse.ArgumentParser) -> None:
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


def add_full_updates(p: argparse.ArgumentParser) -> None:
    """``--full-updates``: keep every update's diagnostics (``run``, ``reproduce``)."""
    p.add_argument(
        "--full-updates", action="store_true",
        help="keep one row of diagnostics per update; default: a trial with more than 1,000 updates keeps 1,000 bins "
        "(mean/min/max, first and last update and step); recorded per trial, and 'suite migrate' leaves such rows",
    )  # fmt: skip


def add_device(p: argparse.ArgumentParser) -> None:
    """``--device``: where the algorithms' networks run (``run``, ``reproduce``, ``evaluate``)."""
    p.add_argument(
        "--device", default="cpu",
        help="torch device of the algorithms' networks: cpu (default) or cuda[:N]; accelerators run on the cpu only; "
        "recorded, and part of the trial key when not cpu",
    )  # fmt: skip


def add_plan(p: argparse.ArgumentParser) -> None:
    """``--plan``: print what a run would cost (:mod:`suite.plan`) and exit without running."""
    p.add_argument(
        "--plan", action="store_true",
        help="print the plan (trials to run and done, env steps, core-hours and wall time from recorded speeds) and "
        "exit without running anything; the plan is printed before every run too",
    )  # fmt: skip


def print_plan(args: argparse.Namespace, specs: Any, *, done: int, db_path: Any, rerun: int = 0) -> None:
    """Print the plan of running ``specs`` (trial specs not recorded yet, ``rerun`` of them recorded failures again;
    ``done`` more are recorded) on stderr: wall time on the workers at hand (this machine's cores; a Ray cluster's
    when ``--workers`` does not say) and on ``--workers``. The run's start line says the same figures
    (:func:`suite.executors.execute`, :meth:`suite.plan.RunPlan.summary`)."""
    import sys

    from suite.executors.common import worker_count
    from suite.plan import make_run_plan

    plan = make_run_plan(specs, done=done, rerun=rerun, db_path=db_path)
    ray_cluster = args.executor == "ray" and args.address is not None
    at_hand = None if ray_cluster else worker_count(None)
    label = "" if ray_cluster else " (this machine's cores)"
    lines = plan.lines(at_hand, args.workers, at_hand_label=label)
    if ray_cluster and plan.to_run and args.workers is None:
        lines.append("  wall time on the cluster: the core-hours over its free CPUs (add --workers N for an estimate)")
    print("\n".join(lines), file=sys.stderr)


def add_kernels(p: argparse.ArgumentParser) -> None:
    """``--kernels``: the vector kernels of the trial processes (``run``, ``reproduce``, ``regress``, ``profile speed``
    and ``memory``, ``evaluate``; :mod:`suite.kernels`)."""
    p.add_argument(
        "--kernels", choices=("portable", "native"), default=None,
        help="vector kernels of torch, MKL, oneDNN, numpy and OpenBLAS: portable (held to AVX2: the same bits on every "
        "x86-64 machine; part of the trial key) or native (each picks by the CPU; the default unless a study or claim "
        "set says otherwise); recorded in every trial's provenance (docs/kernels.md)",
    )  # fmt: skip


def enter_kernels(mode: str | None) -> None:
    """Make this process run in kernel mode ``mode`` when it computes trials itself (``profile speed``, ``evaluate``):
    a portable mode in a process started otherwise starts the same command again with the mode's variables set
    (they must be set before torch and numpy load). None or native: nothing to do."""
    import os
    import sys

    from suite.kernels import check_process, environ, process_mode

    if mode != "portable" or process_mode() == "portable":
        return
    if os.environ.get("SUITE_KERNELS_REEXEC"):  # started again already, and still not held: say what is off
        check_process(mode)
    env = {**os.environ, **environ(mode), "SUITE_KERNELS_REEXEC": "1"}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "suite.cli", *sys.argv[1:]], env)


def add_plugin(p: argparse.ArgumentParser) -> None:
    """``--plugin``: plugins to load before anything resolves an algorithm."""
    p.add_argument(
        "--plugin", action="append", metavar="FILE.py|MODULE",
        help="load an algorithm/env plugin first (repeatable); installed plugin packages load by themselves",
    )  # fmt: skip


def parse_overrides(items: list[str] | None) -> dict[str, dict[str, Any]]:
    """``--set [ALGO:]KEY=VALUE`` items as ``{algorithm id or "*": {key: value}}``."""
    from suite.config import parse_assignments
    from suite.registry import get_algorithm

    out: dict[str, dict[str, Any]] = {}
    for key, value in parse_assignments(items).items():
        algo, sep, name = key.rpartition(":")
        scope = get_algorithm(algo).id if sep else "*"
        out.setdefault(scope, {})[name] = value
    return out


def exec_options(args: argparse.Namespace, on_finish: Any) -> Any:
    """The :class:`suite.executors.ExecOptions` of ``run``/``reproduce``'s executor options."""
    from suite.executors import ExecOptions

    return ExecOptions(
        executor=args.executor, workers=args.workers, address=args.address, trial_gpus=args.trial_gpus,
        max_retries=args.max_retries, trial_timeout=args.trial_timeout, retry_failed=args.retry_failed,
        save_models=not getattr(args, "no_save_models", False), show_progress=not args.quiet, assume_yes=args.yes,
        on_finish=on_finish, full_updates=getattr(args, "full_updates", False),
    )  # fmt: skip


def signal_name(signum: int | None) -> str:
    """``SIGINT``, ``SIGTERM``... for a signal number."""
    import signal

    return signal.Signals(signum).name if signum else "a signal"


def env_kwargs(items: list[str] | None) -> dict[str, Any]:
    """``--env-arg KEY=VALUE`` items as env kwargs. Env options are text (a TextMatch target "12345" must stay a
    string): values are kept as given, not parsed as TOML."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--env-arg expects key=value, got {item!r}")
        out[key.strip()] = value.strip().strip('"')
    return out
