"""Plan before spending: what a run is about to cost, printed by ``suite run`` and ``suite reproduce`` before they
start anything (and alone with ``--plan``). The one estimate of a run's time: the start line of
:func:`suite.executors.execute`, the order it starts trials in and its progress bar's ETA all read it, so the figures
they show are the plan's.

A plan counts the trials to run and those already recorded, their env steps, and prices the trials to run in
core-hours and wall time from recorded speeds (:func:`suite.throughput.trial_times`: a trial's fixed cost plus its
training time at its budget, phase by phase). The speeds come from the run's own database first; an (algorithm, env)
it has never run takes them from the committed claim records (``reports/claims/**/records.db``, read without
writing to them), so a fresh clone can price a paper-tier table before spending a core-hour on it; where neither has
a speed the plan says so instead of guessing. Core-hours are each trial's seconds times its torch threads. Wall time
is the longest-first schedule (:func:`longest_first`, the order :func:`suite.executors.execute` starts trials in) of
the trials on the workers at hand and, when asked, on ``--workers N``.
"""

from __future__ import annotations

import heapq
import math
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from suite.store import ResultsStore
from suite.store.queries import StoreQueries
from suite.throughput import TrialTime, trial_times
from suite.trial import TrialSpec

CLAIMS_DIR = Path(__file__).resolve().parent.parent / "reports" / "claims"
"""The committed claim tables' records (a source checkout; absent in an installed package: then only the run's
database prices a plan)."""

THIS_DB = "this run's database"


def format_duration(seconds: float) -> str:
    """``42 s``, ``12 min``, ``3.5 h`` or ``6.3 days``: a time estimate as a person reads it."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def longest_first(estimates: Sequence[float]) -> list[int]:
    """The order to start trials in, as indices into ``estimates`` (a plan's :attr:`RunPlan.seconds`): those with no
    estimate first, in the order given (they may be long), then the estimated ones longest first, ties in the order
    given. Longest processing time first: with more trials than workers the last ones to start are the short ones,
    so no worker idles long at the end of a study (a 2,000 s Hopper trial started last keeps one worker busy for half
    an hour after the others are done)."""
    est = list(estimates)
    unknown = [i for i, s in enumerate(est) if not math.isfinite(s)]
    known = sorted((i for i, s in enumerate(est) if math.isfinite(s)), key=lambda i: -est[i])
    return unknown + known


def schedule_seconds(seconds: Iterable[float], workers: int, busy: Iterable[float] = ()) -> float:
    """Wall seconds until ``seconds`` (trials not started; NaN ones left out) are done on ``workers`` workers,
    started longest first, each on the worker that frees first; ``busy``: what the trials running now still need,
    one worker each."""
    free = [b for b in busy if math.isfinite(b)]
    free += [0.0] * (max(1, workers) - len(free))
    heapq.heapify(free)
    for s in sorted((s for s in seconds if math.isfinite(s)), reverse=True):
        heapq.heappush(free, heapq.heappop(free) + s)
    return max(free)


class _CommittedRecords(StoreQueries):
    """A committed records database read as it is: ``immutable=1`` takes no lock and writes no WAL or shared-memory
    file, so pricing a plan never touches a file under version control."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = sqlite3.connect(f"file:{path}?immutable=1", uri=True)

    @property
    def _conn(self) -> sqlite3.Connection:
        assert self._db is not None
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
        self._db = None


@dataclass
class Speeds:
    """Recorded trial-time models per (algorithm id, env id), and where each came from."""

    models: dict[tuple[str, str], TrialTime] = field(default_factory=dict)
    sources: dict[tuple[str, str], str] = field(default_factory=dict)


def recorded_speeds(db_path: Path | None, pairs: Iterable[tuple[str, str]], claims_dir: Path | None = CLAIMS_DIR) -> Speeds:
    """The speeds of ``pairs`` ((algorithm id, env id)): from ``db_path``'s ok trials, then for the pairs it has
    none of from the claim records under ``claims_dir`` (files in sorted path order, the first that has the pair)."""
    wanted = set(pairs)
    speeds = Speeds()
    if db_path is not None and db_path.is_file():
        with ResultsStore(db_path, create=False) as store:
            for pair, model in trial_times(store).items():
                if pair in wanted:
                    speeds.models[pair], speeds.sources[pair] = model, THIS_DB
    if claims_dir is None or not claims_dir.is_dir():
        return speeds
    for path in sorted(claims_dir.rglob("records.db")):
        missing = wanted - speeds.models.keys()
        if not missing:
            break
        if db_path is not None and path.resolve() == db_path.resolve():
            continue
        records = _CommittedRecords(path)
        try:
            pairs_held = records._conn.execute("SELECT DISTINCT algo, env_id FROM trials WHERE status = 'ok'")
            held = {(str(algo), str(env)) for algo, env in pairs_held}
            # trial_times reads a store's speed_rows and evals, which _CommittedRecords has
            models = trial_times(records) if missing & held else {}  # type: ignore[arg-type]
        except sqlite3.Error:
            continue  # not a records database of this schema: no speeds from it
        finally:
            records.close()
        for pair in missing & models.keys():
            speeds.models[pair] = models[pair]
            speeds.sources[pair] = _shown(path)
    return speeds


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(CLAIMS_DIR.parent.parent))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class RunPlan:
    """What a run is about to do and what it should cost."""

    done: int | None
    """Trials the command names that are recorded already (skipped); None: not checked against the database yet (a
    run so large it is questioned before its trials resolve)."""
    labels: tuple[str, ...]
    """``algo/env`` of each trial to run."""
    steps: tuple[int, ...]
    """Env steps (budget) of each trial to run."""
    threads: tuple[int, ...]
    """Torch threads (cores) of each trial to run."""
    seconds: tuple[float, ...]
    """Estimated wall seconds of each trial to run (NaN: no recorded speed for its algorithm and env)."""
    sources: tuple[str, ...]
    """Where each trial's speed came from (``this run's database``, a claim records file, or ``""``)."""
    rerun: int = 0
    """Of the trials to run, recorded failures run again (``--retry-failed``)."""

    @property
    def to_run(self) -> int:
        return len(self.labels)

    @property
    def unknown(self) -> list[str]:
        """The ``algo/env`` pairs to run that have no recorded speed, in order of first appearance."""
        return list(dict.fromkeys(label for label, s in zip(self.labels, self.seconds, strict=True) if not math.isfinite(s)))

    def core_hours(self) -> float:
        """Core-hours of the trials with a recorded speed (seconds times threads)."""
        return sum(s * t for s, t in zip(self.seconds, self.threads, strict=True) if math.isfinite(s)) / 3600

    @property
    def known(self) -> int:
        """Trials to run with a recorded speed."""
        return sum(math.isfinite(s) for s in self.seconds)

    def core_hours_text(self) -> str:
        """Core-hours as printed: ``4.00``, ``< 0.01``."""
        hours = self.core_hours()
        return f"{hours:.2f}" if hours >= 0.01 else "< 0.01"

    def wall_seconds(self, workers: int) -> float:
        """Wall seconds of the trials with a recorded speed on ``workers`` workers, started longest first, each
        on the worker that frees first (:func:`schedule_seconds`)."""
        return schedule_seconds(self.seconds, workers)

    def wall_text(self, workers: int) -> str:
        """Wall time on ``workers`` workers as printed: ``about 2.0 h on 2 workers``."""
        return f"about {format_duration(self.wall_seconds(workers))} on {_workers(workers)}"

    def head(self) -> str:
        """The first line's figures: ``5 trials to run, 4 already done; 1,000 env steps``."""
        done = "not yet checked against the database" if self.done is None else f"{self.done:,} already done"
        rerun = f" ({self.rerun:,} recorded failures again)" if self.rerun else ""
        return f"{self.to_run:,} trials to run{rerun}, {done}; {sum(self.steps):,} env steps"

    def summary(self, workers: int | None) -> str:
        """The plan in one line (a run's start line, a refusal): :meth:`head`, the core-hours and the wall time on
        ``workers`` workers (None or 0: unknown, a Ray cluster's), each as :meth:`lines` prints it."""
        text = self.head()
        if not self.to_run:
            return text
        if not self.known:
            return f"{text}; core-hours unknown (no recorded speed for {', '.join(self.unknown)})"
        text += f"; {self.core_hours_text()} core-hours"
        if workers:
            text += f", {self.wall_text(workers)}"
        if self.known < self.to_run:
            text += f" (known speeds only: {self.to_run - self.known:,} trials with no recorded speed)"
        return text

    def lines(self, workers_at_hand: int | None, asked: int | None = None, at_hand_label: str = "") -> list[str]:
        """The plan as printed: trials, env steps, core-hours, wall time (on the workers at hand, and on ``asked``)."""
        out = [f"plan: {self.head()}"]
        if not self.to_run:
            return out
        if not self.known:
            out.append(f"  core-hours: unknown (no recorded speed for {', '.join(self.unknown)})")
            return out
        by_source = Counter(src for src, s in zip(self.sources, self.seconds, strict=True) if math.isfinite(s))
        where = "; ".join(f"{n:,} from {src}" for src, n in by_source.most_common())
        text = f"  core-hours: {self.core_hours_text()} (speeds recorded: {where})"
        if self.known < self.to_run:
            text += f"; plus {self.to_run - self.known:,} trials with no recorded speed ({', '.join(self.unknown)}): unknown"
        out.append(text)
        walls = []
        if workers_at_hand:
            walls.append(f"{self.wall_text(workers_at_hand)}{at_hand_label}")
        if asked and asked != workers_at_hand:
            walls.append(f"{self.wall_text(asked)} (--workers {asked})")
        if walls:
            out.append("  wall time: " + "; ".join(walls) + (" (known speeds only)" if self.known < self.to_run else ""))
        return out


def make_run_plan(
    specs: Sequence[TrialSpec],
    *,
    done: int | None,
    db_path: Path | None,
    rerun: int = 0,
    claims_dir: Path | None = CLAIMS_DIR,
) -> RunPlan:
    """The plan of running ``specs`` (the trials not recorded yet, ``rerun`` of them recorded failures run again)
    when ``done`` more are recorded (None: not checked yet), priced from :func:`recorded_speeds`."""
    pairs = [(_canonical(s.algo), s.env_id) for s in specs]
    speeds = recorded_speeds(db_path, set(pairs), claims_dir)
    seconds, sources = [], []
    for spec, pair in zip(specs, pairs, strict=True):
        model = speeds.models.get(pair)
        seconds.append(model.seconds(spec.total_timesteps) if model is not None else float("nan"))
        sources.append(speeds.sources.get(pair, ""))
    return RunPlan(
        done=done,
        labels=tuple(f"{a}/{e}" for a, e in pairs),
        steps=tuple(s.total_timesteps for s in specs),
        threads=tuple(s.threads for s in specs),
        seconds=tuple(seconds),
        sources=tuple(sources),
        rerun=rerun,
    )


def _canonical(algo: str) -> str:
    """An algorithm's registered id (an alias resolved); an id the registry does not know stays as it is (a plugin
    not loaded in this process): it has no recorded speed then, and the plan says so."""
    from suite.errors import UserError
    from suite.registry import get_algorithm

    try:
        return get_algorithm(algo).id
    except UserError:
        return algo


def _workers(n: int) -> str:
    return f"{n} worker{'s' * (n != 1)}"
