"""Executors: run a study's trials on this machine (``local``) or on a Ray cluster (``ray``), and record them.

The entry point is :func:`execute`, the body of ``suite run`` (and of every command that runs trials): it plans
(what is recorded, what is to run, how long it should take), records the study's membership, runs what is missing
through the chosen backend under one policy (:mod:`suite.executors.common`: retries, timeouts, interruptions,
claims shared with concurrent runs), saves each record as it arrives, and prints the per-(algorithm, env) summary.
The same trial gives the same record (``suite.trial.deterministic_view``) whichever executor ran it.

    from suite.executors import ExecOptions, execute
    summary = execute(resolved, db_path=Path("results/suite.db"), study="default", tier="quick",
                      options=ExecOptions(workers=2))
    if summary.interrupted:
        sys.exit(summary.exit_code)   # 130 after Ctrl-C, 143 after SIGTERM
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.errors import UserError
from suite.executors.common import Backend, Policy, RunSummary, Task, default_trial_timeout, drive, worker_count
from suite.interrupts import Interrupted, deferred_interrupts, raising_interrupts
from suite.plan import RunPlan, longest_first, make_run_plan
from suite.store import ResultsStore
from suite.trial import ResolvedTrial

__all__ = [
    "EXECUTORS",
    "LARGE_RUN_TRIALS",
    "ExecOptions",
    "Interrupted",
    "RunSummary",
    "confirm_plan",
    "default_trial_timeout",
    "execute",
    "pending",
    "plan_workers",
    "print_summary",
    "raising_interrupts",
    "run_trials",
]

EXECUTORS: tuple[str, ...] = ("local", "ray")

LARGE_RUN_TRIALS = 1_000
"""A run of more trials than this starts only with ``--yes`` (``assume_yes``) or an interactive "y": 1,000 trials is
~14 times the default study, and a mistyped seed range (``--seeds 0-100000``) should cost a question, not days."""


@dataclass(frozen=True)
class ExecOptions:
    """How :func:`execute` runs trials. Every field has the CLI's default."""

    executor: str = "local"
    """``local`` (processes on this machine) or ``ray`` (Ray tasks; ``pip install -e '.[ray]'``)."""
    workers: int | None = None
    """Trials at the same time; None: one per usable CPU (local), or the cluster's CPUs / CPUs per trial (ray)."""
    address: str | None = None
    """Ray cluster address (``ray://host:10001``, ``host:6379`` or ``auto``); None starts Ray in this process."""
    trial_gpus: float = 0.0
    """GPUs Ray reserves for each trial (``--trial-gpus``); the CPU requirement is the trial's torch threads."""
    max_retries: int = 1
    """Further attempts of a trial whose failure is the machine's (worker died, OOM kill, timeout)."""
    trial_timeout: float | None = None
    """Seconds per trial; None: :func:`default_trial_timeout` of its budget; 0: none."""
    retry_failed: str | None = None
    """Run recorded failures of the study again: ``env`` (machine causes) or ``all`` (also the algorithm's)."""
    save_models: bool = True
    """Save trained policies next to the database (``models/<algo>_<env>_seed<k>_<short key>.pt``)."""
    show_progress: bool = True
    """Progress bar with ETA on stderr."""
    assume_yes: bool = False
    """Start a run above :data:`LARGE_RUN_TRIALS` without asking."""
    full_updates: bool = False
    """Keep every update's diagnostics instead of at most :data:`suite.store.schema.UPDATE_BINS` bins."""
    print_table: bool = True
    """Print the per-(algorithm, env) summary table on stdout at the end."""
    on_finish: Callable[[dict[str, Any]], None] | None = field(default=None, compare=False)
    """Called with each saved record (the CLI prints a line and writes TensorBoard files)."""
    on_spare_worker: Callable[[], Callable[[], None]] | None = field(default=None, compare=False)
    """Called once, when no trial is left to start and a worker is free (the last trials run, a CPU idles): what the
    caller does after the run can begin then (the CLI gets the report under way, :func:`suite.report.render.prepare`).
    It returns a function that waits for that work, called before the run's summary is printed."""

    def check(self) -> None:
        """Raise UserError for a value no run can use."""
        if self.executor not in EXECUTORS:
            raise UserError(f"unknown executor {self.executor!r}; choose one of {', '.join(EXECUTORS)}")
        if self.workers is not None and self.workers < 1:
            raise UserError(f"--workers must be >= 1, got {self.workers}")
        if self.max_retries < 0:
            raise UserError(f"--max-retries must be >= 0, got {self.max_retries}")
        if self.trial_timeout is not None and (self.trial_timeout < 0 or not math.isfinite(self.trial_timeout)):
            raise UserError(f"--trial-timeout must be a number of seconds >= 0 (0: none), got {self.trial_timeout}")
        if self.retry_failed not in (None, "env", "all"):
            raise UserError(f"--retry-failed takes 'env' (the default) or 'all', got {self.retry_failed!r}")
        if self.trial_gpus < 0:
            raise UserError(f"--trial-gpus must be >= 0, got {self.trial_gpus}")
        if self.address is not None and self.executor != "ray":
            raise UserError("--address is for --executor ray")
        if self.trial_gpus and self.executor != "ray":
            raise UserError("--trial-gpus is for --executor ray (the local executor does not reserve GPUs)")
        if self.executor == "ray":
            from suite.executors.ray import import_ray

            import_ray()  # not installed: one line now, before anything is planned or written


# ---------------------------------------------------------------------------------------------------- plan


def pending(
    resolved: Sequence[ResolvedTrial], db_path: Path, retry_failed: str | None
) -> tuple[list[str], list[ResolvedTrial], dict[str, str]]:
    """What a run of ``resolved`` finds in ``db_path``: the distinct keys (in order), the trials to run (not recorded,
    or recorded failures run again with ``retry_failed``) and, of those, the failures run again (key: the ended_at
    of the record each replaces). The plan printed with ``--plan`` is made from the same."""
    unique: dict[str, ResolvedTrial] = {}
    for r in resolved:
        unique.setdefault(r.key, r)
    recorded: set[str] = set()
    rerun: dict[str, str] = {}
    if db_path.is_file():
        with ResultsStore(db_path) as store:
            recorded = store.finished_keys() & unique.keys()
            if retry_failed:
                rerun = store.failed_trials(list(unique), retry_failed)
    return list(unique), [r for k, r in unique.items() if k not in recorded or k in rerun], rerun


def plan_workers(options: ExecOptions) -> int | None:
    """The workers a plan's wall time is for: ``--workers``, else this machine's usable CPUs for the local executor
    and an in-process Ray; None for a Ray cluster (its free CPUs are known once connected)."""
    if options.workers:
        return options.workers
    return worker_count(None) if options.executor == "local" or options.address is None else None


def confirm_plan(plan: RunPlan, *, workers: int | None, assume_yes: bool) -> None:
    """Ask before a run of more than :data:`LARGE_RUN_TRIALS` trials (interactive), or refuse (UserError); the
    question and the refusal say the plan (:meth:`~suite.plan.RunPlan.summary` on ``workers`` workers).

    Raises:
        UserError: the run is large, ``assume_yes`` is False, and either stdin is not a terminal or the answer
            was not yes.
    """
    if plan.to_run <= LARGE_RUN_TRIALS or assume_yes:
        return
    refusal = f"{plan.summary(workers)}: more than {LARGE_RUN_TRIALS:,} trials to run; add --yes to start them"
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UserError(refusal)
    print(f"plan: {plan.summary(workers)}", file=sys.stderr)
    print(f"Start {plan.to_run:,} trials? [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = input()
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise UserError(refusal)


# ------------------------------------------------------------------------------------------------- execute


def _backend(options: ExecOptions, models_dir: Path | None, resolved: Sequence[ResolvedTrial]) -> Backend:
    if options.executor == "ray":
        from suite.executors.ray import RayBackend

        cpus = max([r.spec.threads for r in resolved] or [1])
        return RayBackend(
            address=options.address, workers=options.workers, trial_cpus=cpus, trial_gpus=options.trial_gpus,
            models_dir=models_dir,
        )  # fmt: skip
    from suite.executors.local import LocalBackend

    return LocalBackend(worker_count(options.workers), models_dir)


def execute(
    resolved: Sequence[ResolvedTrial],
    *,
    db_path: Path,
    study: str,
    tier: str,
    options: ExecOptions | None = None,
) -> RunSummary:
    """Run the trials of a study that are not recorded yet and record them; the body of ``suite run``.

    Plans (:func:`suite.plan.make_run_plan`; for a large run asks first, see :func:`confirm_plan`) and prints the
    plan's figures in its start line, records that ``study`` includes every trial (at ``tier``), runs the missing
    ones (and with ``retry_failed`` the recorded failures; longest first by the plan, :func:`suite.plan.
    longest_first`, its ETA the plan's too) on the chosen executor with retries, timeouts and claims
    shared with concurrent runs on the same database, saves each record as it arrives, and prints the summary table.
    SIGINT/SIGTERM end the run cleanly: finished trials are kept, running ones recorded as nothing, and the returned
    summary says ``interrupted`` (exit with ``summary.exit_code``).

    Args:
        resolved: the trials (``TrialSpec.resolve()``; every user mistake has surfaced there).
        db_path: results database (created if missing).
        study: study name the trials are recorded under.
        tier: budget tier (``custom`` for an explicit ``--steps``), recorded per trial for reports.
        options: executor, workers, retries, timeouts... (:class:`ExecOptions`); None: the defaults.

    Returns:
        What was run and saved (:class:`RunSummary`).

    Raises:
        UserError: a bad option, a large run not confirmed, Ray asked for but not installed or unreachable.
    """
    options = options or ExecOptions()
    options.check()
    keys, todo, rerun = pending(resolved, db_path, options.retry_failed)
    workers = plan_workers(options)
    plan = make_run_plan([r.spec for r in todo], done=len(keys) - len(todo), rerun=len(rerun), db_path=db_path)
    confirm_plan(plan, workers=workers, assume_yes=options.assume_yes)
    print(
        f"study {study!r} ({tier} tier, {options.executor} executor): {plan.summary(workers)}; results in {db_path}",
        file=sys.stderr,
    )
    models_dir = db_path.parent / "models" if options.save_models else None
    with deferred_interrupts() as interrupted, ResultsStore(db_path) as store:
        store.add_to_study(study, keys, tier=tier)
        if not rerun and options.retry_failed is None:
            leftover = store.failed_trials(keys, "env")
            if leftover:
                print(
                    f"  note: {len(leftover)} recorded trials of this study failed because of the machine (worker died, "
                    "timeout, OOM); add --retry-failed to run them again",
                    file=sys.stderr,
                )
        order = longest_first(plan.seconds)
        tasks = [
            Task(todo[i], prior_attempts=store.attempts(todo[i].key) if todo[i].key in rerun else 0,
                 rerun=rerun.get(todo[i].key), planned_s=plan.seconds[i])
            for i in order
        ]  # fmt: skip
        todo = [todo[i] for i in order]
        summary = RunSummary(finished=[], skipped=len(keys) - len(todo))
        if tasks and interrupted() is None:
            backend = _backend(options, models_dir, todo)
            run_id = store.begin_run(" ".join(sys.argv)[:500])
            try:
                summary = drive(
                    tasks, backend, save=functools.partial(store.save_trial, full_updates=options.full_updates),
                    policy=Policy(max_retries=options.max_retries, trial_timeout=options.trial_timeout),
                    interrupted=interrupted, coordination=(store, run_id), show_progress=options.show_progress,
                    on_finish=options.on_finish, skipped=len(keys) - len(todo), on_spare_worker=options.on_spare_worker,
                )  # fmt: skip
            finally:
                store.end_run(run_id)
                if summary.wait_for_spare_work is not None:
                    summary.wait_for_spare_work()
        if options.print_table and interrupted() is None and not summary.interrupted:
            print_summary(store, keys)
        signum = interrupted()  # also one that arrived after the last trial: the caller stops (no report)
        if signum is not None and not summary.interrupted:
            summary.interrupted, summary.signum = True, signum
            summary.not_run = len(tasks) - len(summary.finished)
    return summary


def run_trials(
    trials: Sequence[ResolvedTrial],
    *,
    save: Callable[[dict[str, Any]], None],
    workers: int | None = None,
    models_dir: Path | None = None,
    done_keys: set[str] | None = None,
    show_progress: bool = True,
    on_finish: Callable[[dict[str, Any]], None] | None = None,
    max_retries: int = 1,
    trial_timeout: float | None = None,
    backend: Backend | None = None,
) -> RunSummary:
    """Run every trial whose key is not in ``done_keys`` on the local executor (or ``backend``), without a store.

    The policy (retries, timeouts, interrupts) is :func:`execute`'s; use :func:`execute` to run a study into a
    results database (it also claims trials against concurrent runs and records study membership).

    Args:
        trials: resolved trials (duplicates by key are run once).
        save: called in this process with each record to keep.
        workers: parallel trials; default one per usable CPU.
        models_dir: where trained policies are saved (None: not saved).
        done_keys: keys already recorded; those trials are skipped.
        show_progress: draw a progress bar (env steps, with ETA) on stderr.
        on_finish: called after ``save`` with each record.
        max_retries: further attempts after an environment failure.
        trial_timeout: seconds per trial (None: :func:`default_trial_timeout`; 0: none).
        backend: run on this backend instead of a new :class:`~suite.executors.local.LocalBackend`.
    """
    done_keys = set(done_keys or ())
    seen: set[str] = set()
    tasks: list[Task] = []
    for t in trials:
        if t.key not in done_keys and t.key not in seen:
            seen.add(t.key)
            tasks.append(Task(t))
    skipped = len(trials) - len(tasks)
    if not tasks:
        return RunSummary([], skipped)
    if backend is None:
        from suite.executors.local import LocalBackend

        backend = LocalBackend(worker_count(workers), models_dir)
    with deferred_interrupts() as interrupted:
        return drive(
            tasks, backend, save=save, policy=Policy(max_retries=max_retries, trial_timeout=trial_timeout),
            interrupted=interrupted, show_progress=show_progress, on_finish=on_finish, skipped=skipped,
        )  # fmt: skip


def print_summary(store: ResultsStore, keys: Sequence[str]) -> None:
    """One line per (algo, env) on stdout: trials by status, final evaluation mean and std over seeds, steps/s."""
    df = store.trials(keys=list(keys))
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
