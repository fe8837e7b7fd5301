"""Run the studies with every revision, interleaved, each through the revision's own ``suite run``.

Each *slot* is one revision running one *unit* (an algorithm on an env of one study, every seed) once, with its
own command line (so the comparison measures the revision's code, its trial runner included; every trial runs in
a fresh process as that runner does it), into the results database of that revision and repeat,
``<run>/<side>/r<k>/suite.db`` (trained policies beside it under ``models/``).
Two schedules (:func:`batches`): ``interleaved`` alternates the revisions' slots, the order flipping every repeat
(base head, head base, base head, ...), so a linear drift of a shared machine cancels in the paired ratios;
``concurrent`` starts the revisions' slots of a repeat together, so each trial runs at the same moment as its twin.

A slot that completed leaves a ``done-<unit>`` marker; running the same command again skips those slots and, inside
an unfinished slot, ``suite run`` itself skips the trials its database already holds. Ctrl-C stops the running
slot the way ``suite run`` stops (finished trials kept) and exits 130.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from suite.kernels import DEFAULT_VARIABLE
from suite.kernels import environ as kernel_environ
from suite.provenance import utc_now_iso
from suite.regress.build import Build

POLL_S = 0.5
"""How often the progress bar reads the running slot's database."""

_STRIPPED_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "SUITE_DB", "__PYVENV_LAUNCHER__")
"""Variables that would make a revision's ``suite`` import another checkout or write another database."""


class RevisionFailed(Exception):
    """A revision could not run the study at all (its ``suite run`` exited with an error, not a failed trial)."""

    def __init__(self, side: str, message: str) -> None:
        super().__init__(message)
        self.side = side


@dataclass(frozen=True)
class Unit:
    """What one ``suite run`` of a slot runs: one algorithm on one env of one study (every seed), so twins of the two
    revisions run close together in time (a whole study per run would put minutes between them)."""

    part: str
    """Study name (the run's studies share a slot folder and database)."""
    algo: str = ""
    """Algorithm id ('' = every algorithm of the study)."""
    env: str = ""
    """Env id ('' = every env of the study)."""

    def args(self) -> list[str]:
        """``suite run`` filters selecting the unit from its study file."""
        return (["--algo", self.algo] if self.algo else []) + (["--env", self.env] if self.env else [])

    @property
    def name(self) -> str:
        """File-name-safe identifier: ``regression.ppo.CartPole-v1``."""
        return re.sub(r"[^A-Za-z0-9._-]+", "_", ".".join(x for x in (self.part, self.algo, self.env) if x))


@dataclass(frozen=True)
class Slot:
    """One revision running one unit once."""

    side: str
    """``base`` or ``head``."""
    repeat: int
    """Repeat index, from 0."""
    unit: Unit = Unit("study")
    """What it runs."""

    @property
    def part(self) -> str:
        """The study."""
        return self.unit.part

    def folder(self, run_dir: Path) -> Path:
        """``<run>/<side>/r<repeat>``."""
        return run_dir / self.side / f"r{self.repeat}"

    def db(self, run_dir: Path) -> Path:
        """The results database of the side and repeat."""
        return self.folder(run_dir) / "suite.db"

    def marker(self, run_dir: Path) -> Path:
        """Written when the slot completed."""
        return self.folder(run_dir) / f"done-{self.unit.name}"

    def done(self, run_dir: Path) -> bool:
        """Whether the slot ran to completion before."""
        return self.marker(run_dir).is_file()


def interleaved(sides: Sequence[str], repeats: int, units: Sequence[Unit] = (Unit("study"),)) -> list[Slot]:
    """Slots in run order: per repeat, per unit, every side; the side order reversed every other repeat (base head,
    head base, ...), so each unit's pairs are balanced over the repeats."""
    out: list[Slot] = []
    for r in range(repeats):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        out.extend(Slot(side, r, unit) for unit in units for side in order)
    return out


def count_trials(db: Path) -> int:
    """Trials recorded in a slot's database (read-only; 0 while it does not exist yet)."""
    if not db.is_file():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])
    except sqlite3.Error:
        return 0  # not created yet, or locked for a moment: the next poll reads it


def clean_env() -> dict[str, str]:
    """The environment for a revision's processes: ours minus what would point it at other code or data."""
    return {k: v for k, v in os.environ.items() if k not in _STRIPPED_ENV}


_BALLAST = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass\n"
"""Keeps one CPU busy (and ignores Ctrl-C: it is killed when its batch ends)."""

SCHEDULES = ("interleaved", "concurrent")
"""How the revisions' runs are placed in time (see :func:`batches`)."""


def batches(slots: Sequence[Slot], schedule: str) -> list[list[Slot]]:
    """Slots grouped into what runs at the same time.

    ``interleaved``: one slot at a time, in :func:`interleaved` order (asv's ``continuous``). ``concurrent``: the
    slots of every revision for the same repeat and unit start together, one process each, so each trial is
    paired with its twin running *at the same moment*: on a shared machine the load of that moment hits both, which
    sequential runs minutes apart cannot promise (measured on the 2-core dev machine under load 6-8: per-pair spread of
    the CPU-time steps/s ratio 0.044 concurrent vs 0.15-0.22 interleaved). It needs a CPU per revision.
    """
    if schedule == "interleaved":
        return [[s] for s in slots]
    if schedule != "concurrent":
        raise ValueError(f"unknown schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    grouped: dict[tuple[int, Unit], list[Slot]] = {}
    for s in slots:
        grouped.setdefault((s.repeat, s.unit), []).append(s)
    return list(grouped.values())


@dataclass
class RunningSlot:
    """A revision's ``suite run`` in progress."""

    build: Build
    slot: Slot
    run_dir: Path
    proc: subprocess.Popen[bytes]
    log_path: Path
    before: int
    """Trials its database held when it started."""
    t0: float
    entry: dict[str, object]
    seconds: float | None = None
    """Wall time of the run, once it has ended."""

    def poll(self) -> bool:
        """Whether it is still running (records its duration when it has just ended)."""
        if self.proc.poll() is None:
            return True
        if self.seconds is None:
            self.seconds = time.perf_counter() - self.t0
        return False

    def progress(self) -> int:
        """Trials it has finished so far."""
        return count_trials(self.slot.db(self.run_dir)) - self.before


def start_slot(
    build: Build, slot: Slot, run_dir: Path, study_file: Path, *, workers: int = 1, kernels: str = "native"
) -> RunningSlot:
    """Start one revision running one unit once (``<venv>/bin/suite run STUDY --algo A --env E --db ... --quiet``),
    in kernel mode ``kernels``: its process gets the mode's variables (:func:`suite.kernels.environ`, inherited by
    its trial processes, so a revision made before the modes existed runs held kernels too) and ``$SUITE_KERNELS``
    (a revision that knows the modes puts it in its trial keys)."""
    folder = slot.folder(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    db = slot.db(run_dir)
    argv = [str(build.suite), "run", str(study_file), *slot.unit.args(), "--db", str(db), "--workers", str(workers),
            "--no-report", "--quiet"]  # fmt: skip
    entry: dict[str, object] = {"side": slot.side, "repeat": slot.repeat, "part": slot.part, "algo": slot.unit.algo,
                                "env": slot.unit.env, "started_at": utc_now_iso(), "load_start": _load()}  # fmt: skip
    log_path = folder / "suite.log"
    before = count_trials(db)
    with open(log_path, "ab") as log:
        env = {**clean_env(), **kernel_environ(kernels), DEFAULT_VARIABLE: kernels}
        proc = subprocess.Popen(argv, cwd=folder, stdout=log, stderr=subprocess.STDOUT, env=env)
    return RunningSlot(build, slot, run_dir, proc, log_path, before, time.perf_counter(), entry)


def finish_slot(running: RunningSlot) -> dict[str, object]:
    """Wait for a slot; mark it done and return its log entry.

    Raises:
        KeyboardInterrupt: it stopped on Ctrl-C (its finished trials are in its database).
        RevisionFailed: the revision's ``suite run`` exited with an error.
    """
    proc, slot = running.proc, running.slot
    proc.wait()
    running.poll()
    running.entry.update({"ended_at": utc_now_iso(), "seconds": round(running.seconds or 0.0, 3), "load_end": _load(),
                          "exit_code": proc.returncode})  # fmt: skip
    if proc.returncode == 130:
        raise KeyboardInterrupt
    if proc.returncode != 0:
        raise RevisionFailed(slot.side, f"{running.build.revision.describe()} cannot run the study: "
                                        f"{_last_error(running.log_path)} (exit code {proc.returncode}; "
                                        f"log: {running.log_path})")  # fmt: skip
    slot.marker(running.run_dir).write_text(json.dumps(running.entry))
    return running.entry


def run_batch(
    builds: Mapping[str, Build],
    batch: Sequence[Slot],
    run_dir: Path,
    study_file: Path,
    *,
    workers: int = 1,
    on_progress: Callable[[int], None] | None = None,
    kernels: str = "native",
) -> list[dict[str, object]]:
    """Run slots together (one, or every revision's at once) and return their log entries.

    ``on_progress`` gets the number of trials the batch has finished so far. Ctrl-C stops every slot the way
    ``suite run`` stops (finished trials kept) and is re-raised. When slots run together, one that ends first is
    replaced by a *ballast* process that keeps a CPU busy until the others end: otherwise the slower revision's last
    trials would run on a quieter machine than their twins and look faster than they are.

    Raises:
        KeyboardInterrupt: Ctrl-C.
        RevisionFailed: a revision's ``suite run`` exited with an error (the others are stopped first).
    """
    running = [start_slot(builds[s.side], s, run_dir, study_file, workers=workers, kernels=kernels) for s in batch]
    ballast: list[subprocess.Popen[bytes]] = []
    try:
        while True:
            alive = [r.poll() for r in running]
            if not any(alive):
                break
            if len(running) > 1:
                while len(ballast) < alive.count(False) * workers:
                    ballast.append(subprocess.Popen([sys.executable, "-c", _BALLAST], env=clean_env(),
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
            if on_progress is not None:
                on_progress(sum(r.progress() for r in running))
            time.sleep(POLL_S)
        if on_progress is not None:
            on_progress(sum(r.progress() for r in running))
        return [finish_slot(r) for r in running]
    except BaseException:
        for r in running:
            _stop(r.proc)
        raise
    finally:
        for proc in ballast:
            proc.kill()
            proc.wait()


STOP_TIMEOUT_S = 30.0
"""How long a revision's ``suite run`` gets to stop after SIGINT before SIGTERM, and again before SIGKILL."""


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Let a revision's ``suite run`` stop as on Ctrl-C (it saves what finished), then make sure it is gone (a process
    started in the background by a non-interactive shell ignores SIGINT: SIGTERM, then SIGKILL, follow)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        proc.send_signal(sig)  # SIGINT may have reached it already (same process group): a second is harmless
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            continue


def _last_error(log_path: Path) -> str:
    lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("suite: error:") or "Error" in ln]
    return (errors or lines or ["(no output)"])[-1]


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def machine() -> dict[str, object]:
    """The machine facts a timing needs next to it: CPU, platform, host and the load average now."""
    from suite.provenance import collect_provenance

    prov = collect_provenance(1)
    keep = ("cpu_model", "cpu_capability", "cpu_count", "cpu_count_usable", "platform", "python_version", "hostname")
    return {**{k: prov[k] for k in keep}, "load_average_1min": _load()}
