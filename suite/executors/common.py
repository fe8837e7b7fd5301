"""The execution policy, written once for every executor: retries, timeouts, interruptions, claims, progress.

An executor backend (:mod:`suite.executors.local`, :mod:`suite.executors.ray`) only knows how to start a trial
somewhere, report what happens to it (:class:`Started`, :class:`Progress`, :class:`Finished`, :class:`Died`) and
kill it. :func:`drive` decides everything else, identically for all of them:

* **Failures are data, but only real ones.** A trial whose process died (``worker_died``: killed, crashed, or its
  worker could not set it up), was killed by the OOM killer (``oom``) or ran past its timeout (``timeout``) failed
  because of the machine: it is started again, up to ``max_retries`` more times within the run, and only recorded
  as ``failed`` (with that ``failure_kind`` and its attempt count) when every attempt failed. A trial whose own
  code raised (``exception``) or produced NaN (``diverged``) is recorded at once: the same inputs give the same
  failure, so a retry would only repeat it.
* **An interrupted trial is never recorded as anything.** SIGINT (Ctrl-C, to the whole process group) and SIGTERM
  only set a flag while :func:`drive` runs (:func:`suite.interrupts.deferred_interrupts`); the loop notices it,
  saves the records that have fully arrived, kills every running trial without recording it, and returns. A trial
  process never sees the terminal's signals (the backends shield them), so it cannot die of them and be mistaken
  for a crash.
* **Each trial once, even across concurrent runs.** With a store, a trial is claimed (:meth:`ResultsStore.claim`)
  right before it starts; one claimed by another live ``suite run`` is waited for, one recorded meanwhile is
  skipped; the claim is dropped in the transaction that saves the record. The driver is the only writer.
* **Timeouts** end a hung trial. By default (:func:`default_trial_timeout`) a trial is hung when it has shown no
  sign of life for that long: the clock restarts with every progress message, which a trial sends after each
  iteration and during its evaluations (a Pong evaluation of 10 whole games at every tenth of a 1,024-step smoke
  budget is ~100 games: 461 s at load 5 against the 505 s limit that used to count from the start). A limit given
  with ``--trial-timeout`` is a total: the trial ends that long after it started executing on its worker.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from suite.plan import format_duration, schedule_seconds
from suite.store import ENV_FAILURE_KINDS, ResultsStore
from suite.trial import ResolvedTrial, failure_record

ALGORITHM_FAILURE_KINDS: tuple[str, ...] = ("exception", "diverged")
"""``failure_kind`` values that are the algorithm's own: recorded, never retried automatically."""

TIMEOUT_BASE_S = 300.0
TIMEOUT_MIN_STEPS_PER_S = 5.0
"""Default trial timeout: ``TIMEOUT_BASE_S + budget / TIMEOUT_MIN_STEPS_PER_S`` seconds without a progress
message, i.e. a trial is hung when it would run at under 5 env steps/s, a fifth of the slowest training speed measured
on this shared 2-core machine (SB3 SAC and TD3 on Hopper-v5, 23 steps/s on one torch thread at load average ~3.6;
PPO on Pong ~210 steps/s), plus five minutes for start-up. smoke tier (2,048 steps): 12 min; quick CartPole (100k):
5.6 h; paper Hopper (1M): 2.3 days. Evaluations send progress too. Pass ``--trial-timeout`` for a limit in all."""

POLL_S = 0.25
"""How often the driver looks at signals, timeouts and its workers when nothing arrives."""

HEARTBEAT_S = 30.0
"""How often a run tells the store it is alive (for runs on other hosts; on one host the pid is checked)."""

BUSY_RECHECK_S = 5.0
"""How often a trial claimed by another live run is looked at again."""


def default_trial_timeout(budget: int) -> float:
    """Seconds after which a trial with this step budget is treated as hung (see :data:`TIMEOUT_MIN_STEPS_PER_S`)."""
    return TIMEOUT_BASE_S + budget / TIMEOUT_MIN_STEPS_PER_S


def is_environment_failure(record: dict[str, Any]) -> bool:
    """Whether a record is a failure caused by the machine (retried), not by the algorithm (kept as data)."""
    return record.get("status") == "failed" and record.get("failure_kind") in ENV_FAILURE_KINDS


# ------------------------------------------------------------------------------------------------------ OOM


def _cgroup_oom_files(pid: int | str = "self") -> list[Path]:
    """The files that count OOM kills in the memory cgroup of ``pid``: cgroup v2 ``memory.events`` or cgroup v1
    ``memory.oom_control`` (both have an ``oom_kill N`` line), under the cgroup's path and at the mount root."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return []
    out: list[Path] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2
            out += [Path("/sys/fs/cgroup") / rel / "memory.events", Path("/sys/fs/cgroup/memory.events")]
        elif "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory")
            out += [base / rel / "memory.oom_control", base / "memory.oom_control"]
    return out


def oom_kill_count(pid: int | str = "self") -> int | None:
    """How many processes of this (or ``pid``'s) memory cgroup the kernel's OOM killer has killed so far, or None
    when no cgroup counter is readable (then an OOM kill cannot be told from any other SIGKILL)."""
    for path in _cgroup_oom_files(pid):
        try:
            for line in path.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


def describe_exit(exitcode: int | None, oom_before: int | None, oom_after: int | None) -> tuple[str, str]:
    """``(failure_kind, error)`` for a trial process that ended without a record.

    A SIGKILL while the cgroup's ``oom_kill`` counter rose is an OOM kill. Another process of the same cgroup being
    OOM-killed at the same moment would be mistaken for this one (the counter is per cgroup, not per process).
    """
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        if exitcode == -signal.SIGKILL and oom_before is not None and oom_after is not None and oom_after > oom_before:
            return "oom", f"OOMKilled: trial process killed by the kernel's OOM killer (cgroup oom_kill {oom_after})"
        unknown = " (no cgroup OOM counter readable: an OOM kill looks the same)" if oom_after is None else ""
        return "worker_died", f"WorkerDied: trial process killed by {name}{unknown}"
    return "worker_died", f"WorkerDied: trial process exited with code {exitcode} without a record"


# ----------------------------------------------------------------------------------------- backend protocol


@dataclass
class Task:
    """One trial as the driver tracks it."""

    resolved: ResolvedTrial
    attempt: int = 1
    """Attempt number within this run (1 = first start)."""
    prior_attempts: int = 0
    """Attempts recorded before this run (a recorded failure being run again): the record's count is cumulative."""
    rerun: str | None = None
    """For a recorded failure being run again: the ``ended_at`` of the record it replaces (see ``claim``)."""
    started: float | None = None
    """``time.monotonic()`` when it started executing on its worker (None: starting)."""
    submitted: float = 0.0
    steps: int = 0
    """Env steps credited to the progress bar."""
    alive: float | None = None
    """``time.monotonic()`` of its last sign of life (started, or a progress message): the default timeout's clock."""
    handle: Any = None
    planned_s: float = math.nan
    """Its wall seconds by the run's plan (:attr:`suite.plan.RunPlan.seconds`; NaN: no recorded speed): the ETA."""

    @property
    def label(self) -> str:
        return self.resolved.label

    @property
    def pair(self) -> tuple[str, str]:
        """(algorithm id, env id): what the plan prices it by, and the ETA's pace."""
        return self.resolved.algo.id, self.resolved.spec.env_id

    def __repr__(self) -> str:
        return f"Task({self.label}, attempt {self.attempt})"


@dataclass
class Started:
    """The trial began executing (in process ``pid`` on ``host``)."""

    task: Task
    pid: int
    host: str


@dataclass
class Progress:
    task: Task
    steps: int


@dataclass
class Finished:
    """The trial's record arrived (any status)."""

    task: Task
    record: dict[str, Any]


@dataclass
class Died:
    """The trial ended without a record, for a reason outside its code."""

    task: Task
    failure_kind: str
    error: str
    where: dict[str, Any] | None = None
    """Where it ran, when the backend knows (a Ray node: kept in the failure record's ``provenance.ray``)."""


Event = Started | Progress | Finished | Died


class Backend(Protocol):
    """Where trials run. ``start`` and ``kill`` never block for long; ``poll`` waits up to ``timeout`` seconds."""

    slots: int
    """How many trials run at the same time."""
    name: str

    def start(self, task: Task) -> Any:
        """Start ``task`` (attempt ``task.attempt``); returns the handle stored in ``task.handle``."""
        ...

    def poll(self, timeout: float) -> list[Event]:
        """Events of the running tasks since the last call."""
        ...

    def kill(self, task: Task) -> None:
        """Stop a running task now; no event of it follows."""
        ...

    def close(self) -> None:
        """Kill every running task (no events follow) and release the backend's resources."""
        ...


# ------------------------------------------------------------------------------------------------ the loop


@dataclass
class RunSummary:
    """What a run did."""

    finished: list[dict[str, Any]]
    """Records saved by this run, in the order they were saved."""
    skipped: int
    """Trials not run because they were already recorded (before the run, or by a concurrent run meanwhile)."""
    interrupted: bool = False
    signum: int | None = None
    """The signal that interrupted the run (SIGINT or SIGTERM)."""
    retried: int = 0
    """Attempts started again after an environment failure."""
    not_run: int = 0
    """Trials left unfinished (interrupted)."""
    wait_for_spare_work: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    """What ``on_spare_worker`` returned, if it was called (:func:`drive`)."""

    @property
    def exit_code(self) -> int:
        """0, or ``128 + signum`` when interrupted (130 for Ctrl-C, 143 for SIGTERM)."""
        return 128 + self.signum if self.interrupted and self.signum else 0


@dataclass
class Policy:
    """How :func:`drive` treats failures and time."""

    max_retries: int = 1
    """Further attempts after an environment failure (``worker_died``, ``timeout``, ``oom``)."""
    trial_timeout: float | None = None
    """Seconds in all; None: :func:`default_trial_timeout` of each trial's budget without a sign of life; 0: no limit."""

    def timeout_for(self, task: Task) -> float:
        if self.trial_timeout is None:
            return default_trial_timeout(task.resolved.spec.total_timesteps)
        return self.trial_timeout if self.trial_timeout > 0 else math.inf

    def timed_out(self, task: Task, now: float) -> str | None:
        """Why ``task`` is past its limit at ``now``, or None (also while it has not started executing)."""
        if task.started is None:
            return None
        limit = self.timeout_for(task)
        if self.trial_timeout is None:
            if now - (task.alive or task.started) > limit:
                return f"Timeout: no progress for {limit:.0f} s (hung; --trial-timeout sets a limit in all)"
            return None
        if now - task.started > limit:
            return f"Timeout: trial ran longer than its {limit:.0f} s limit (--trial-timeout)"
        return None


@dataclass
class _Coordination:
    store: ResultsStore
    run_id: str
    last_heartbeat: float = field(default_factory=time.monotonic)


def _write(message: str) -> None:
    from tqdm import tqdm

    tqdm.write(message, file=sys.stderr)


ETA_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]"
"""The progress bar with the plan's ETA (its postfix, :func:`eta_text`) in place of tqdm's own extrapolation."""


def eta_text(
    queue: Sequence[Task], running: Sequence[Task], slots: int, pace: Mapping[tuple[str, str], float] | None = None
) -> str:
    """The progress bar's ETA by the run's plan: the longest-first schedule (:func:`suite.plan.schedule_seconds`) on
    ``slots`` workers of the trials queued and what the running ones have left of their planned time (by the share
    of their budget not yet reported), each trial's planned time times the ``pace`` of its (algorithm, env): the
    finished trials of that pair's wall time over their planned time, 1 for a pair none of whose trials has finished
    (so the ETA shown first is the plan's wall time). One pace per pair, not one for the run: the plan prices each
    pair from other records, and one pair's records can be stale (made on a busier machine, or before a faster core)
    while another's are not. Trials with no recorded speed are counted apart, as the plan counts them."""
    pace = pace or {}

    def planned(t: Task) -> float:
        return t.planned_s * pace.get(t.pair, 1.0)

    left = [planned(t) * (1 - t.steps / max(t.resolved.spec.total_timesteps, 1)) for t in running]
    seconds = schedule_seconds([planned(t) for t in queue], slots, busy=left)
    unknown = sum(not math.isfinite(t.planned_s) for t in [*queue, *running])
    return f"ETA {format_duration(seconds)}" + (f" + {unknown:,} trials with no recorded speed" if unknown else "")


def drive(
    tasks: Sequence[Task],
    backend: Backend,
    *,
    save: Callable[[dict[str, Any]], None],
    policy: Policy,
    interrupted: Callable[[], int | None],
    coordination: tuple[ResultsStore, str] | None = None,
    show_progress: bool = True,
    on_finish: Callable[[dict[str, Any]], None] | None = None,
    skipped: int = 0,
    on_spare_worker: Callable[[], Callable[[], None]] | None = None,
) -> RunSummary:
    """Run ``tasks`` on ``backend`` under ``policy`` until all are recorded, or an interrupt arrives.

    Args:
        tasks: one per trial to run (distinct keys).
        backend: where they run; closed before returning.
        save: called in this process with each record to keep (the store's ``save_trial``).
        policy: retries and timeouts.
        interrupted: returns the signal number once SIGINT/SIGTERM arrived (see :func:`deferred_interrupts`).
        coordination: ``(store, run_id)`` to claim each trial before starting it (see the module doc); None runs
            every task.
        show_progress: draw a progress bar (env steps, with ETA) on stderr.
        on_finish: called after ``save`` with each saved record (for printing).
        skipped: trials already skipped by the caller (reported in the summary).
        on_spare_worker: called once, when no trial is left to start and a worker is free; what it returns (a function
            that waits for the work it started) is the summary's ``wait_for_spare_work``.
    """
    from tqdm import tqdm

    summary = RunSummary(finished=[], skipped=skipped)
    queue: deque[Task] = deque(tasks)
    running: list[Task] = []
    busy: list[tuple[float, Task]] = []  # (when to look again, task) for trials another run is executing
    told_busy: set[str] = set()
    coord = _Coordination(*coordination) if coordination else None
    total = len(queue)
    planned = any(math.isfinite(t.planned_s) for t in queue)
    bar = tqdm(
        total=sum(t.resolved.spec.total_timesteps for t in queue), unit="step", unit_scale=True,
        disable=not show_progress, dynamic_ncols=True, desc=f"0/{total} trials", file=sys.stderr,
        bar_format=ETA_FORMAT if planned else None,
    )  # fmt: skip
    done = 0
    spent: dict[tuple[str, str], list[float]] = {}  # per (algo, env): wall and planned seconds of its finished trials

    def show_eta() -> None:
        if planned and show_progress:
            pace = {pair: wall / plan for pair, (wall, plan) in spent.items() if plan > 0}
            bar.set_postfix_str(eta_text(queue, running, backend.slots, pace), refresh=False)

    def credit(task: Task, steps: int) -> None:
        steps = min(steps, task.resolved.spec.total_timesteps)
        bar.update(steps - task.steps)
        task.steps = steps

    def forget(task: Task) -> None:
        nonlocal done
        credit(task, task.resolved.spec.total_timesteps)
        done += 1
        bar.set_description(f"{done}/{total} trials")

    def keep(task: Task, record: dict[str, Any]) -> None:
        if record["status"] == "ok" and task.started is not None and math.isfinite(task.planned_s):
            pair = spent.setdefault(task.pair, [0.0, 0.0])
            pair[0] += time.monotonic() - task.started
            pair[1] += task.planned_s
        record["attempts"] = task.prior_attempts + task.attempt
        save(record)
        summary.finished.append(record)
        forget(task)
        if on_finish is not None:
            on_finish(record)

    def failed(task: Task, record: dict[str, Any]) -> None:
        """An attempt ended in ``record``: keep it, or start the trial again if the machine was the cause."""
        if record["status"] == "ok":
            keep(task, record)
        elif is_environment_failure(record) and task.attempt <= policy.max_retries:
            _write(f"  retry    {task.label}: {record['error']} (attempt {task.attempt + 1} of {policy.max_retries + 1})")
            summary.retried += 1
            credit(task, 0)
            queue.append(Task(task.resolved, task.attempt + 1, task.prior_attempts, task.rerun, planned_s=task.planned_s))
        else:
            keep(task, record)

    def take(task: Task) -> bool:
        """Claim ``task`` for this run; False if it must not start now (recorded meanwhile, or busy elsewhere)."""
        if coord is None:
            return True
        claim = coord.store.claim(task.resolved.key, coord.run_id, rerun=task.rerun)
        if claim.state == "claimed":
            return True
        if claim.state == "recorded":
            summary.skipped += 1
            forget(task)
            return False
        if task.resolved.key not in told_busy:
            told_busy.add(task.resolved.key)
            _write(f"  waiting  {task.label}: another run is executing it ({claim.owner})")
        busy.append((time.monotonic() + BUSY_RECHECK_S, task))
        return False

    try:
        while queue or running or busy:
            if interrupted() is not None:
                break
            now = time.monotonic()
            if busy and not queue:
                due = [t for when, t in busy if when <= now]
                busy[:] = [(when, t) for when, t in busy if when > now]
                queue.extend(due)
            while queue and len(running) < backend.slots and interrupted() is None:
                task = queue.popleft()
                if not take(task):
                    continue
                task.submitted = time.monotonic()
                task.handle = backend.start(task)
                running.append(task)
            if on_spare_worker is not None and not queue and not busy and len(running) < backend.slots:
                summary.wait_for_spare_work, on_spare_worker = on_spare_worker(), None
            show_eta()
            for event in backend.poll(POLL_S if running else min(POLL_S * 4, BUSY_RECHECK_S)):
                task = event.task
                if isinstance(event, Started):
                    task.started = task.alive = time.monotonic()
                elif isinstance(event, Progress):
                    task.alive = time.monotonic()
                    credit(task, event.steps)
                elif isinstance(event, Finished):
                    running.remove(task)
                    failed(task, event.record)
                elif isinstance(event, Died):
                    if interrupted() is not None:
                        continue  # a death during an interrupt is not a failure of the trial: it is not recorded
                    running.remove(task)
                    wall = time.monotonic() - (task.started or task.submitted)
                    record = failure_record(task.resolved, event.error, wall, failure_kind=event.failure_kind)
                    if event.where is not None:
                        record["provenance"] = {**record["provenance"], "ray": event.where}
                    failed(task, record)
            now = time.monotonic()
            for task in list(running):
                error = policy.timed_out(task, now)
                if error is not None and task.started is not None and interrupted() is None:
                    backend.kill(task)
                    running.remove(task)
                    failed(task, failure_record(task.resolved, error, now - task.started, failure_kind="timeout"))
            if coord is not None and now - coord.last_heartbeat > HEARTBEAT_S:
                coord.store.heartbeat(coord.run_id)
                coord.last_heartbeat = now
        signum = interrupted()
        if signum is not None:
            # Records that fully arrived are finished trials (whatever their status): keep them. Everything still
            # running is killed by close() below and recorded as nothing.
            for event in backend.poll(0):
                if isinstance(event, Finished):
                    running.remove(event.task)
                    keep(event.task, event.record)
            summary.interrupted, summary.signum = True, signum
            summary.not_run = total - done
    finally:
        backend.close()
        bar.close()
    return summary


def worker_count(workers: int | None) -> int:
    """``workers`` or one per usable CPU of this machine."""
    if workers is not None:
        return max(1, workers)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)
