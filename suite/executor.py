"""Run many trials in parallel worker processes, saving each as it finishes.

Each trial runs in a fresh process (from a forkserver that has already imported torch and the suite, so a
start costs milliseconds): its peak RSS is its own, a crash or OOM kill takes down only that trial (which is
recorded as ``failed`` with the exit code), and torch's thread setting cannot leak between trials.
The parent is the only writer of the results database: one transaction per finished trial, so killing the
study (Ctrl-C or SIGKILL) loses no finished trial and leaves no half-written one; re-running it skips every
key already recorded and runs only what is missing.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from suite.trial import ResolvedTrial, TrialSpec, failure_record, run_trial

PROGRESS_INTERVAL_S = 0.5


def _worker(spec: TrialSpec, conn: Connection, models_dir: str | None) -> None:
    """Body of a trial process: resolve, run, send progress messages and finally the record."""
    # Ctrl-C reaches the whole process group; only the parent handles it (it terminates the workers), so a
    # worker never prints a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    last = [0.0]

    def progress(steps: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_INTERVAL_S:
            last[0] = now
            conn.send(("progress", steps))

    try:
        resolved = spec.resolve()
        record = run_trial(resolved, models_dir=Path(models_dir) if models_dir else None, progress=progress)
        conn.send(("record", record))
    finally:
        conn.close()


@dataclass
class _Running:
    resolved: ResolvedTrial
    process: Any
    conn: Connection
    steps: int = 0
    started: float = field(default_factory=time.monotonic)


@dataclass
class RunSummary:
    """What a call to :func:`run_trials` did."""

    finished: list[dict[str, Any]]
    skipped: int
    interrupted: bool = False


def _context() -> Any:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "suite.trial", "suite.algorithms"])
    return ctx


def run_trials(
    trials: Sequence[ResolvedTrial],
    *,
    save: Callable[[dict[str, Any]], None],
    workers: int | None = None,
    models_dir: Path | None = None,
    done_keys: set[str] | None = None,
    show_progress: bool = True,
    on_finish: Callable[[dict[str, Any]], None] | None = None,
) -> RunSummary:
    """Run every trial whose key is not in ``done_keys``, at most ``workers`` at a time.

    Args:
        trials: resolved trials (duplicates by key are run once).
        save: called in this process with each finished record (the store's ``save_trial``).
        workers: parallel processes; default one per core.
        models_dir: where trained policies are saved (None: not saved).
        done_keys: keys already recorded; those trials are skipped.
        show_progress: draw a progress bar (env steps, with ETA) on stderr.
        on_finish: called after ``save`` with each record (for printing).
    """
    from tqdm import tqdm

    workers = max(1, workers or os.cpu_count() or 1)
    done_keys = set(done_keys or ())
    seen: set[str] = set()
    pending: list[ResolvedTrial] = []
    for t in trials:
        if t.key in done_keys or t.key in seen:
            continue
        seen.add(t.key)
        pending.append(t)
    skipped = len(trials) - len(pending)
    finished: list[dict[str, Any]] = []
    if not pending:
        return RunSummary(finished, skipped)
    ctx = _context()
    total_steps = sum(t.spec.total_timesteps for t in pending)
    bar = tqdm(
        total=total_steps, unit="step", unit_scale=True, disable=not show_progress, dynamic_ncols=True,
        desc=f"0/{len(pending)} trials",
    )  # fmt: skip
    running: list[_Running] = []
    queue = list(reversed(pending))
    credited = 0
    try:
        while queue or running:
            while queue and len(running) < workers:
                resolved = queue.pop()
                parent, child = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=_worker, args=(resolved.spec, child, str(models_dir) if models_dir else None), daemon=True
                )
                proc.start()
                child.close()
                running.append(_Running(resolved, proc, parent))
            ready = wait([r.conn for r in running] + [r.process.sentinel for r in running], timeout=1.0)
            for r in list(running):
                record = None
                if r.conn in ready or r.process.sentinel in ready:
                    try:
                        while r.conn.poll():
                            kind, payload = r.conn.recv()
                            if kind == "progress":
                                delta = min(payload, r.resolved.spec.total_timesteps) - r.steps
                                r.steps += delta
                                bar.update(delta)
                            else:
                                record = payload
                    except (EOFError, OSError):
                        pass  # the worker closed its end (exited); a missing record is handled just below
                if record is None and not r.process.is_alive():
                    r.process.join()
                    record = failure_record(
                        r.resolved, f"WorkerDied: trial process exited with code {r.process.exitcode}",
                        wall_time_s=time.monotonic() - r.started,
                    )  # fmt: skip
                if record is None:
                    continue
                save(record)
                finished.append(record)
                bar.update(r.resolved.spec.total_timesteps - r.steps)
                credited += 1
                bar.set_description(f"{credited}/{len(pending)} trials")
                running.remove(r)
                r.conn.close()
                r.process.join(timeout=5)
                if on_finish is not None:
                    on_finish(record)
    except KeyboardInterrupt:
        for r in running:
            r.process.terminate()
        for r in running:
            r.process.join(timeout=5)
        bar.close()
        return RunSummary(finished, skipped, interrupted=True)
    bar.close()
    return RunSummary(finished, skipped)
