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
from suite.store import ResultsStore
from suite.throughput import TrialTime, trial_times
from suite.trial import ResolvedTrial, TrialSpec

__all__ = [
    "EXECUTORS",
    "LARGE_RUN_TRIALS",
    "ExecOptions",
    "Interrupted",
    "Plan",
    "RunSummary",
    "confirm_plan",
    "default_trial_timeout",
    "execute",
    "make_plan",
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


@dataclass(frozen=True)
class Plan:
    """What a run is about to do, with an estimate of its wall time from the speeds already recorded."""

    trials: int
    """Trials the command names."""
    recorded: int | None
    """Of those, already recorded (skipped); None: not checked yet (the plan counts all as to run)."""
    to_run: int
    """Trials to run (missing, plus recorded failures being run again)."""
    rerun: int
    """Of ``to_run``, recorded failures being run again (``--retry-failed``)."""
    steps: int
    """Env steps of the trials to run."""
    estimate_s: float | None
    """Estimated wall time on ``workers`` workers (None: no recorded speed for any of them)."""
    unestimated: int
    """Trials to run without a recorded speed for their (algorithm, env): not in the estimate."""
    workers: int
    """Trials at a time the estimate assumes; 0: unknown (a Ray cluster): the estimate is the sum over trials."""

    def describe(self) -> str:
        """One or two lines for stderr."""
        if self.recorded is None:
            parts = [f"{self.trials:,} trials (not yet checked against the database)"]
        else:
            parts = [f"{self.trials:,} trials", f"{self.recorded:,} already recorded", f"{self.to_run:,} to run"]
        if self.rerun:
            parts[-1] += f" ({self.rerun:,} recorded failures again)"
        text = ", ".join(parts)
        if self.to_run:
            text += f"; {_steps(self.steps)} env steps"
            if self.estimate_s is not None:
                if self.workers:
                    text += f", about {format_duration(self.estimate_s)} on {self.workers} worker{'s' * (self.workers > 1)}"
                else:
                    text += f", about {format_duration(self.estimate_s)} of trial time in all"
                if self.unestimated:
                    text += f" plus {self.unestimated:,} trial{'s' * (self.unestimated > 1)} with no recorded speed"
            else:
                text += " (no recorded speed to estimate the time from)"
        return text


def _steps(n: int) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def format_duration(seconds: float) -> str:
    """``42 s``, ``12 min``, ``3.5 h`` or ``6.3 days``: a time estimate as a person reads it."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def make_plan(
    specs: Sequence[TrialSpec],
    *,
    recorded: int | None = 0,
    rerun: int = 0,
    db_path: Path | None = None,
    workers: int = 1,
    estimates: Sequence[float] | None = None,
) -> Plan:
    """Plan a run of ``specs`` (the trials to run), estimating its time from the store's recorded speeds.

    ``recorded``: how many more trials the command names that are already recorded (None: not checked).
    ``estimates``: the trials' :func:`estimate_seconds`, when the caller has them already (else read from ``db_path``).

    The estimate models each (algorithm, env) from its recorded ok trials (:func:`suite.throughput.trial_times`: a
    trial's fixed cost, start-up and evaluations, plus its training time at the budget, the off-policy baselines'
    warm-up and training timed apart), summed and divided over ``workers``. A trial whose (algorithm, env) has no
    recorded run, or none past a warm-up its budget goes beyond, is left out and counted.
    """
    seconds, unestimated = 0.0, 0
    for trial_s in estimates if estimates is not None else estimate_seconds(specs, db_path):
        if math.isfinite(trial_s):
            seconds += trial_s
        else:
            unestimated += 1
    known = len(specs) - unestimated
    return Plan(
        trials=len(specs) + (recorded or 0),
        recorded=recorded,
        to_run=len(specs),
        rerun=rerun,
        steps=sum(s.total_timesteps for s in specs),
        estimate_s=seconds / max(workers, 1) if known else None,
        unestimated=unestimated if known else 0,
        workers=workers,
    )


def estimate_seconds(specs: Sequence[TrialSpec], db_path: Path | None) -> list[float]:
    """Each trial's wall seconds estimated from the speeds recorded in ``db_path`` (:func:`suite.throughput.
    trial_times`; NaN where its (algorithm, env) has no usable record)."""
    models: dict[tuple[str, str], TrialTime] = {}
    if db_path is not None and db_path.exists():
        with ResultsStore(db_path, create=False) as store:
            models = trial_times(store)
    out = []
    for spec in specs:
        model = models.get((_canonical(spec.algo), spec.env_id))
        out.append(model.seconds(spec.total_timesteps) if model is not None else float("nan"))
    return out


def longest_first(estimates: Sequence[float]) -> list[int]:
    """The order to start trials in, as indices into ``estimates`` (their :func:`estimate_seconds`): those with no
    estimate first, in the order given (they may be long), then the estimated ones longest first, ties in the order
    given. Longest processing time first: with more trials than workers the last ones to start are the short ones,
    so no worker idles long at the end of a study (a 2,000 s Hopper trial started last keeps one worker busy for half
    an hour after the others are done)."""
    est = list(estimates)
    unknown = [i for i, s in enumerate(est) if not math.isfinite(s)]
    known = sorted((i for i, s in enumerate(est) if math.isfinite(s)), key=lambda i: -est[i])
    return unknown + known


def _canonical(algo: str) -> str:
    from suite.registry import get_algorithm

    try:
        return get_algorithm(algo).id
    except UserError:
        return algo


def confirm_plan(plan: Plan, *, assume_yes: bool) -> None:
    """Ask before a run of more than :data:`LARGE_RUN_TRIALS` trials (interactive), or refuse (UserError).

    Raises:
        UserError: the run is large, ``assume_yes`` is False, and either stdin is not a terminal or the answer
            was not yes.
    """
    if plan.to_run <= LARGE_RUN_TRIALS or assume_yes:
        return
    refusal = f"{plan.describe()}: more than {LARGE_RUN_TRIALS:,} trials to run; add --yes to start them"
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UserError(refusal)
    print(f"plan: {plan.describe()}", file=sys.stderr)
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

    Plans (and for a large run asks first, see :func:`confirm_plan`), records that ``study`` includes every trial
    (at ``tier``), runs the missing ones (and with ``retry_failed`` the recorded failures; longest first by the
    speeds recorded in the database, :func:`longest_first`) on the chosen executor with retries, timeouts and claims
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
    unique: dict[str, ResolvedTrial] = {}
    for r in resolved:
        unique.setdefault(r.key, r)
    keys = list(unique)
    recorded: set[str] = set()
    rerun: dict[str, str] = {}
    if db_path.exists():
        with ResultsStore(db_path) as store:
            recorded = store.finished_keys() & set(keys)
            if options.retry_failed:
                rerun = store.failed_trials(keys, options.retry_failed)
    todo = [unique[k] for k in keys if k not in recorded or k in rerun]
    workers = options.workers or (worker_count(None) if options.executor == "local" or options.address is None else 0)
    estimates = estimate_seconds([r.spec for r in todo], db_path)
    plan = make_plan(
        [r.spec for r in todo], recorded=len(keys) - len(todo), rerun=len(rerun), workers=workers, estimates=estimates
    )
    confirm_plan(plan, assume_yes=options.assume_yes)
    print(
        f"study {study!r} ({tier} tier, {options.executor} executor): {plan.describe()}; results in {db_path}", file=sys.stderr
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
        todo = [todo[i] for i in longest_first(estimates)]
        tasks = [Task(r, prior_attempts=store.attempts(r.key) if r.key in rerun else 0, rerun=rerun.get(r.key)) for r in todo]
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
