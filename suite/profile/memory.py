"""Memory per phase of a trial (the probe every trial carries) and ``suite profile memory``.

Modes (``suite run --memory-profile``, :data:`MODES`). The mode is not part of the trial key: it measures, it
never changes a result (a trial gives the same :func:`suite.trial.deterministic_view` in every mode, tested).

``off``
    No probe; the record keeps only the peak RSS of the trial process (``peak_rss_mb``).
``rss`` (the default)
    Per phase, the resident peak and growth of the trial process. Linux keeps a process's resident high-water
    mark (``VmHWM`` in ``/proc/self/status``) and resets it to the current RSS when ``5`` is written to
    ``/proc/self/clear_refs`` (the kernel's Documentation/filesystems/proc.rst). The probe resets it when a phase
    starts and reads it when the phase ends, which gives the phase's exact resident peak for about 50 us per
    phase (``benchmarks/bench_memory_overhead.py`` measures the overhead). Where the reset is refused (not
    Linux, a sandbox), a sampler thread reads the RSS every :data:`SAMPLER_INTERVAL_S` instead, and the record
    says so (``rss_method = "sampler"``, ``rss_interval_ms``): a peak shorter than the interval can be missed.
``full``
    ``rss`` plus, per phase, the peak of *tracked allocations*: every malloc/calloc/realloc/posix_memalign/mmap
    of the process not yet freed, recorded by memray (which hooks the allocators, so it sees numpy arrays and
    torch CPU tensors alike; tracemalloc only sees Python's allocator and shows a 64 MiB torch tensor as 0).
    The capture is analysed when the trial ends (a few microseconds per allocation: seconds to minutes);
    phase boundaries are marked in memray's allocation stream itself (:func:`_mark`), so each phase's peak is
    exact, not sampled. memray's own buffers add a few MB of resident memory in this mode.

Record fields: ``record["phases"][name]`` gains, for each phase that ran (:data:`suite.trial.PHASES`) and for
``setup`` (from the trial's start to its first phase: envs, networks and buffers being built; a memory-only
entry, so its ``time_s`` and ``calls`` are 0 and training time is unchanged):

======================== =================================================================================
``rss_peak_mb``          highest resident size of the process during the phase (max over its calls)
``rss_peak_over_entry_mb`` highest (peak - resident size when the call started) over the calls: what the phase
                         needs on top of what it found
``rss_growth_mb``        sum over the calls of (resident at the end - resident at the start): what it left
``rss_anon_growth_mb``   the same for anonymous memory only (heap, arrays, tensors): RSS also counts the pages of
                         shared libraries read in the first time their code runs (torch's kernels, the emulator)
``rss_method``           ``vmhwm`` (exact) or ``sampler``
``rss_interval_ms``      the sampler's interval (sampler only)
``alloc_peak_mb``        (full) highest tracked allocation total during the phase (allocations since the trial
                         started, not yet freed)
``alloc_peak_over_entry_mb`` (full) highest (peak - total when the call started) over the calls
``alloc_growth_mb``      (full) sum over the calls of (total at the end - total at the start)
======================== =================================================================================

Allocated vs resident: ``np.zeros`` and ``torch.zeros`` of a large size reserve address space that becomes
resident page by page as it is written, so an SB3 replay buffer built in ``setup`` shows as ``alloc_growth_mb``
of ``setup`` and as ``rss_growth_mb`` of ``rollout`` while it fills; the reports show both.

The trial's ``peak_rss_mb`` comes from the probe too (:meth:`MemoryProbe.peak_mb`): the highest RSS from the
probe's start (before setup) to its stop, read before every reset. ``getrusage``'s peak could not serve: the resets
reset it, after ``exec`` it keeps the peak of the process that exec'd (a ``spawn``ed child starts with its parent's
RSS as its peak: measured 322 MB for a 15 MB child), and a worker that runs many trials (a Ray actor) would report
the peak of earlier trials.
MB is 2**20 bytes everywhere (as ``peak_rss_mb``). Only the trial process is measured: env workers of
``vectorization="async"`` are separate processes (every shipped env runs in-process by default).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from suite.errors import UserError

if TYPE_CHECKING:
    from suite.trial import TrialContext

MODES: tuple[str, ...] = ("off", "rss", "full")
"""Values of ``--memory-profile``: no probe, resident memory per phase, plus tracked allocations (memray)."""

DEFAULT_MODE = "rss"
"""The cheapest mode that still gives per-phase peaks."""

SAMPLER_INTERVAL_S = 0.002
"""RSS sampling interval where the kernel's peak cannot be reset (recorded with the numbers)."""

SETUP = "setup"
"""Name of the memory-only entry for everything before the first phase (envs, networks, buffers)."""

MB = 2**20
_KIB_PER_MB = 1024

# Phase-boundary markers in memray's allocation stream: a malloc of _MARK_A bytes followed, on the same thread and
# with no malloc of _MARK_GAP bytes or more between them, by one of _MARK_B + code bytes (code = 2 * phase index + 0
# at entry, 1 at exit). Both sizes are odd and below glibc's mmap threshold (128 KiB), so a marker is two cheap heap
# allocations that never move the threshold; a real allocation pair of exactly these sizes in this order is not a
# realistic coincidence.
_MARK_A = 77_773
_MARK_B = 88_001
_MARK_GAP = 1024
"""Mallocs smaller than this between a marker's two halves do not break it: numpy allocates an array's shape and
strides (16 bytes here) with malloc before its data whenever its small-block cache is empty, which would hide the
boundary (a test once saw no ``rollout`` window in a long-lived test process under load)."""


def check_mode(mode: str) -> str:
    """``mode`` if it is a valid ``--memory-profile`` value that can run here, else a :class:`UserError`."""
    if mode not in MODES:
        raise UserError(f"unknown memory profile {mode!r}; allowed: {', '.join(MODES)}")
    if mode == "full" and not memray_available():
        raise UserError("memory profile 'full' needs memray (pip install memray; Linux or macOS)")
    return mode


def memray_available() -> bool:
    """Whether memray can be imported (it has wheels for Linux and macOS only)."""
    try:
        import memray  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------------------------------ resident size
class _ProcReader:
    """Current and peak resident size of this process from ``/proc/self`` (file descriptors kept open: opening
    resolves ``self`` once, so a reader must be created in the process it measures)."""

    def __init__(self) -> None:
        self._page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
        self._statm: int | None = None
        self._status: int | None = None
        self._clear: int | None = None
        self._psutil: Any = None
        try:
            self._statm = os.open("/proc/self/statm", os.O_RDONLY)
            self._status = os.open("/proc/self/status", os.O_RDONLY)
        except OSError:  # no procfs (macOS): psutil reads the RSS, the sampler finds the peaks
            import psutil

            self._psutil = psutil.Process()

    def rss_kib(self) -> int:
        """Resident set size now (``statm``'s second field, pages)."""
        if self._statm is None:
            return int(self._psutil.memory_info().rss) // 1024
        return int(os.pread(self._statm, 128, 0).split()[1]) * self._page_kib

    def sizes_kib(self) -> tuple[int, int]:
        """``(resident, anonymous resident)`` now: ``statm``'s resident minus its file-backed ("shared") pages, so
        anonymous memory (heap, arrays, tensors) is told from library code read in on first use."""
        if self._statm is None:
            info = self._psutil.memory_info()
            return int(info.rss) // 1024, (int(info.rss) - int(getattr(info, "shared", 0))) // 1024
        fields = os.pread(self._statm, 128, 0).split()
        resident, shared = int(fields[1]) * self._page_kib, int(fields[2]) * self._page_kib
        return resident, resident - shared

    def hwm_kib(self) -> int:
        """Resident high-water mark since the last reset (``VmHWM``)."""
        if self._status is None:
            raise OSError("no /proc/self/status")
        text = os.pread(self._status, 8192, 0)
        start = text.index(b"VmHWM:") + 6
        return int(text[start : text.index(b"\n", start)].split()[0])

    def enable_reset(self) -> bool:
        """Open ``clear_refs`` and reset once; False where the kernel refuses (then only the sampler works)."""
        try:
            self.hwm_kib()
            self._clear = os.open("/proc/self/clear_refs", os.O_WRONLY)
            os.write(self._clear, b"5")
        except (OSError, ValueError):
            if self._clear is not None:
                os.close(self._clear)
            self._clear = None
            return False
        return True

    def reset_peak(self) -> None:
        """Set ``VmHWM`` to the current RSS."""
        assert self._clear is not None
        os.write(self._clear, b"5")

    def close(self) -> None:
        for fd in (self._statm, self._status, self._clear):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


class _Sampler(threading.Thread):
    """Reads the RSS every ``interval`` seconds and keeps the highest value since the last :meth:`reset`."""

    def __init__(self, read: Any, interval: float) -> None:
        super().__init__(name="suite-memory-sampler", daemon=True)
        self._read, self.interval = read, interval
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._peak = 0

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            value = self._read()
            with self._lock:
                self._peak = max(self._peak, value)

    def reset(self, value: int) -> None:
        with self._lock:
            self._peak = value

    def peak(self, value: int) -> int:
        """The highest sample since the last reset, or ``value`` if that is higher."""
        with self._lock:
            return max(self._peak, value)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=1.0)


@dataclass
class _Window:
    """Running figures of one phase (or setup), in KiB (RSS) and bytes (allocations)."""

    calls: int = 0
    peak: int = 0
    peak_over_entry: int = 0
    growth: int = 0

    def add(self, entry: int, peak: int, leave: int) -> None:
        self.calls += 1
        self.peak = max(self.peak, peak)
        self.peak_over_entry = max(self.peak_over_entry, peak - entry)
        self.growth += leave - entry


# ---------------------------------------------------------------------------------------------------- the probe
class MemoryProbe:
    """A :class:`suite.trial.PhaseProbe` measuring memory per phase (see the module docstring).

    Lifecycle: :meth:`start` (the start of ``setup``), then ``enter``/``exit`` around every phase (called by
    :class:`suite.trial.TrialContext`), :meth:`stop` when the trial ends, then :meth:`summary` and
    :meth:`peak_mb`. Use :func:`start_memory_probe` to create, start and register one.

    Args:
        mode: ``rss`` or ``full``.
        capture: ``full`` only: keep memray's capture file at this path (for a flame graph); None = a temporary
            file deleted after the analysis.
        method: ``auto`` (reset the kernel's peak where possible, else sample), or ``sampler`` to force the
            fallback (tests use it).
        interval_s: the sampler's interval.
    """

    def __init__(
        self, mode: str, *, capture: Path | None = None, method: str = "auto", interval_s: float = SAMPLER_INTERVAL_S
    ) -> None:
        if mode not in ("rss", "full"):
            raise ValueError(f"a memory probe measures in mode rss or full, not {mode!r}")
        if method not in ("auto", "sampler"):
            raise ValueError(f"method must be auto or sampler, got {method!r}")
        self.mode = mode
        self.capture = capture
        self._method_wanted = method
        self.interval_s = interval_s
        self.method = ""
        """``vmhwm`` or ``sampler`` once started."""
        self._proc: _ProcReader | None = None
        self._sampler: _Sampler | None = None
        self._windows: dict[str, _Window] = {}
        self._open: tuple[str, int, int] | None = None  # (phase, RSS and anonymous RSS at entry, KiB)
        self._anon_growth: dict[str, int] = {}
        self._peak = 0  # KiB, the trial's peak RSS so far
        self._tracker: Any = None
        self._capture_dir: str | None = None
        self._capture_path: Path | None = None
        self._alloc: dict[str, _Window] = {}
        self._alloc_error: str | None = None
        self._codes: dict[str, int] = {}
        self._stopped = False

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Begin measuring (the start of ``setup``)."""
        from suite.trial import PHASES

        self._codes = {name: i for i, name in enumerate(PHASES)}
        proc = self._proc = _ProcReader()
        self._peak = proc.rss_kib()
        if self._method_wanted == "auto" and proc.enable_reset():
            self.method = "vmhwm"
        else:
            self.method = "sampler"
            self._sampler = _Sampler(proc.rss_kib, self.interval_s)
            self._sampler.start()
        if self.mode == "full":
            try:
                self._start_tracker()
            except Exception as exc:  # noqa: BLE001  (e.g. another memray tracker is active: RSS is still measured)
                self._tracker = None
                self._alloc_error = f"{type(exc).__name__}: {exc}"
        self._begin(SETUP)

    def stop(self) -> None:
        """End measuring; in ``full`` mode, stop memray and analyse its capture. Idempotent."""
        if self._stopped or self._proc is None:
            return
        self._stopped = True
        if self._open is not None:
            self._finish()
        self._fold_peak()
        if self._sampler is not None:
            self._sampler.stop()
        if self._tracker is not None:
            self._stop_tracker()
        self._proc.close()

    # -- PhaseProbe --------------------------------------------------------------------------------------------
    def enter(self, phase: str) -> None:
        """A phase starts (closes ``setup`` the first time)."""
        if self._open is not None:
            self._finish()
        self._begin(phase)

    def exit(self, phase: str) -> None:
        """The phase that started last ends."""
        if self._open is not None:
            self._finish()

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per phase (and ``setup``), the fields of the module docstring (MB: exact multiples of 1/1024)."""
        out: dict[str, dict[str, Any]] = {}
        for name, w in self._windows.items():
            fields: dict[str, Any] = {
                "rss_peak_mb": w.peak / _KIB_PER_MB,
                "rss_peak_over_entry_mb": w.peak_over_entry / _KIB_PER_MB,
                "rss_growth_mb": w.growth / _KIB_PER_MB,
                "rss_anon_growth_mb": self._anon_growth.get(name, 0) / _KIB_PER_MB,
                "rss_method": self.method,
            }
            if self.method == "sampler":
                fields["rss_interval_ms"] = self.interval_s * 1000.0
            a = self._alloc.get(name)
            if a is not None:
                fields.update(
                    alloc_peak_mb=a.peak / MB,
                    alloc_peak_over_entry_mb=a.peak_over_entry / MB,
                    alloc_growth_mb=a.growth / MB,
                )
            elif self._alloc_error is not None:
                fields["alloc_error"] = self._alloc_error
            out[name] = fields
        return out

    def peak_mb(self) -> float:
        """Peak RSS of the process from the probe's start to now (or to :meth:`stop`): the trial's own peak,
        setup, phases and the moments between them included."""
        if not self._stopped:
            self._fold_peak()
        return self._peak / _KIB_PER_MB

    # -- resident size -----------------------------------------------------------------------------------------
    def _begin(self, name: str) -> None:
        proc = self._proc
        assert proc is not None
        if self.method == "vmhwm":
            self._peak = max(self._peak, proc.hwm_kib())  # the gap since the last phase
            entry, anon = proc.sizes_kib()
            proc.reset_peak()
        else:
            entry, anon = proc.sizes_kib()
            assert self._sampler is not None
            self._peak = max(self._peak, self._sampler.peak(entry))  # the gap since the last phase
            self._sampler.reset(entry)
        self._open = (name, entry, anon)
        if self._tracker is not None and name != SETUP:
            _mark(2 * self._codes[name])

    def _finish(self) -> None:
        proc = self._proc
        assert proc is not None and self._open is not None
        name, entry, anon = self._open
        self._open = None
        if self._tracker is not None and name != SETUP:
            _mark(2 * self._codes[name] + 1)
        leave, anon_leave = proc.sizes_kib()
        self._anon_growth[name] = self._anon_growth.get(name, 0) + anon_leave - anon
        if self.method == "vmhwm":
            peak = max(proc.hwm_kib(), leave)
        else:
            assert self._sampler is not None
            peak = self._sampler.peak(max(entry, leave))
        self._peak = max(self._peak, peak)
        self._windows.setdefault(name, _Window()).add(entry, peak, leave)

    def _fold_peak(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if self.method == "vmhwm":
            self._peak = max(self._peak, proc.hwm_kib())
        elif self._sampler is not None:
            self._peak = max(self._peak, self._sampler.peak(proc.rss_kib()))

    # -- tracked allocations (memray) --------------------------------------------------------------------------
    def _start_tracker(self) -> None:
        import memray

        if self.capture is not None:
            self.capture.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                self.capture.unlink()
            path = self.capture
        else:
            self._capture_dir = tempfile.mkdtemp(prefix="suite-memray-")
            path = Path(self._capture_dir) / "trial.bin"
        self._capture_path = path
        self._tracker = memray.Tracker(path)
        self._tracker.__enter__()

    def _stop_tracker(self) -> None:
        tracker, self._tracker = self._tracker, None
        try:
            tracker.__exit__(None, None, None)
            assert self._capture_path is not None
            self._alloc = analyse_capture(self._capture_path, {code: name for name, code in self._codes.items()})
        except Exception as exc:  # noqa: BLE001  (a failed analysis must not cost the trial its record)
            self._alloc_error = f"{type(exc).__name__}: {exc}"
        finally:
            if self._capture_dir is not None:
                shutil.rmtree(self._capture_dir, ignore_errors=True)


def _mark(code: int) -> None:
    """Write a phase-boundary marker into memray's allocation stream (see :data:`_MARK_A`)."""
    import numpy as np

    first = np.empty(_MARK_A, dtype=np.uint8)
    second = np.empty(_MARK_B + code, dtype=np.uint8)
    del second, first


def analyse_capture(path: Path, phases: dict[int, str]) -> dict[str, _Window]:
    """Tracked allocation figures per phase (and ``setup``) from a memray capture with phase markers.

    Replays the allocation stream in order, keeping the total of live allocations (bytes allocated since the
    capture started and not yet freed; a free of an older block is ignored, as memray does). ``munmap`` of part
    of a mapping is subtracted from its start; unmapping the middle or tail of a mapping is not tracked.

    Args:
        path: memray capture file (``FileFormat.ALL_ALLOCATIONS``).
        phases: phase name by index (marker code // 2).

    Returns:
        ``{name: _Window}`` in bytes, for ``setup`` and every phase that ran.
    """
    import memray

    kinds = memray.AllocatorType
    free_kinds = {int(kinds.FREE), int(kinds.PYMALLOC_FREE)}
    munmap = int(kinds.MUNMAP)
    mmap = int(kinds.MMAP)
    malloc = int(kinds.MALLOC)
    marker_b = range(_MARK_B, _MARK_B + 2 * len(phases))
    live: dict[int, int] = {}
    maps: dict[int, int] = {}
    last_by_tid: dict[int, tuple[int, int]] = {}  # tid -> (size, address) of its last malloc
    windows: dict[str, _Window] = {}
    heap = 0
    current, entry, peak = SETUP, 0, 0
    with memray.FileReader(path) as reader:
        for record in reader.get_allocation_records():
            kind, address = int(record.allocator), record.address
            if kind in free_kinds:
                heap -= live.pop(address, 0)
                continue
            if kind == munmap:
                mapped = maps.pop(address, 0)
                if mapped:
                    freed = min(mapped, record.size)
                    heap -= freed
                    if mapped > freed:
                        maps[address + freed] = mapped - freed
                continue
            size = record.size
            if kind == malloc and size in marker_b:
                previous = last_by_tid.get(record.tid)
                if previous is not None and previous[0] == _MARK_A:
                    heap -= live.pop(previous[1], 0)  # the marker's first half is not the program's memory
                    windows.setdefault(current, _Window()).add(entry, max(peak, heap), heap)
                    code = size - _MARK_B
                    current = phases[code // 2] if code % 2 == 0 else "(between phases)"
                    entry = peak = heap
                    last_by_tid.pop(record.tid, None)
                    continue
            if kind == mmap:
                maps[address] = size
            else:
                live[address] = size
            heap += size
            if kind == malloc and size >= _MARK_GAP:
                last_by_tid[record.tid] = (size, address)
                if size == _MARK_A:
                    continue  # most likely a marker's first half: it must not raise the peak
            if heap > peak:
                peak = heap
    windows.setdefault(current, _Window()).add(entry, max(peak, heap), heap)
    windows.pop("(between phases)", None)
    return windows


def start_memory_probe(ctx: TrialContext, mode: str, *, capture: Path | None = None) -> MemoryProbe | None:
    """Create the probe of ``mode`` (None for ``off``), start it and register it on ``ctx``.

    Args:
        ctx: the trial's context (the probe measures its phases).
        mode: one of :data:`MODES`.
        capture: ``full`` mode: keep memray's capture here (see :class:`MemoryProbe`).
    """
    check_mode(mode)
    if mode == "off":
        return None
    probe = MemoryProbe(mode, capture=capture)
    probe.start()
    ctx.add_probe(probe)
    return probe


# ------------------------------------------------------------------------------------------- what a rollout weighs
def rollout_weight(
    n_steps: int,
    n_envs: int,
    obs_shape: tuple[int, ...],
    obs_itemsize: int,
    *,
    action_size: int = 1,
    action_itemsize: int = 8,
    float_itemsize: int = 4,
) -> dict[str, int]:
    """Bytes of one rollout in the suite's layout (:class:`suite.algorithms.core.Rollout` plus what GAE adds).

    ``T = n_steps`` steps of ``N = n_envs`` envs: observations ``(T, N, *obs_shape)``, actions ``(T, N, action_size)``
    and six ``(T, N)`` floats (log-probs, values, rewards, dones, advantages, returns). Used to say what a rollout of
    the same shape weighs at a document's sizes (the ``seed000-memory`` claim set). On Pong, ``ppo`` keeps frames as
    uint8: 27.6 MiB computed, of the 48.0 MB memray tracks in its ``setup`` (with the networks and 8 emulators).

    Returns:
        ``{"observations", "actions", "per_step_floats", "total"}`` in bytes.
    """
    cells = n_steps * n_envs
    obs = cells * int(np.prod(obs_shape, dtype=np.int64)) * obs_itemsize
    actions = cells * action_size * action_itemsize
    floats = 6 * cells * float_itemsize
    return {"observations": obs, "actions": actions, "per_step_floats": floats, "total": obs + actions + floats}


# ------------------------------------------------------------------------------------------ suite profile memory
PROFILE_MODES: tuple[str, ...] = ("rss", "full")
"""Modes ``suite profile memory --mode`` accepts (a profile without measurement is not one)."""

DEFAULT_SLICE_STEPS = 3_072
"""Default training slice (3 Atari rollouts of 8 envs x 128 steps); on-policy configs get at least 2 rollouts."""

TRIAL = "trial"
"""Row of a profile for the whole trial: the process peak RSS, and the highest tracked total of any phase."""

PROFILE_ROWS: tuple[str, ...] = (SETUP, "rollout", "advantages", "update", "eval", TRIAL)
"""Rows of a profile table, in order (a phase an algorithm does not have is left out)."""

MEASURES: tuple[tuple[str, str], ...] = (
    ("rss_peak_mb", "peak RSS (MB)"),
    ("rss_above_start_mb", "peak RSS above the trial's start (MB)"),
    ("rss_peak_over_entry_mb", "peak RSS above the phase's entry (MB)"),
    ("rss_growth_mb", "RSS growth (MB)"),
    ("rss_anon_growth_mb", "anonymous RSS growth (MB)"),
    ("alloc_peak_mb", "peak tracked allocations (MB)"),
    ("alloc_peak_over_entry_mb", "peak tracked allocations above the phase's entry (MB)"),
    ("alloc_growth_mb", "tracked allocation growth (MB)"),
)
"""Per-row measures of a profile run (``rss_above_start_mb`` = ``rss_peak_mb`` - the trial's ``baseline_rss_mb``,
the RSS before its envs and networks were built: what the algorithm itself adds to the imported libraries)."""

BASELINE = "baseline"

RATIO_MIN_MB = 1.0
"""No ratio is given against a baseline value below this: identical runs differ by ~0.5 MB of tracked allocations
(Python's 256 KiB arenas, hash seeds), so a ratio of two sub-MB figures is noise."""


@dataclass(frozen=True)
class Variant:
    """One configuration of a profile: the baseline, one toggle, or all toggles together."""

    name: str
    """``baseline``, ``NAME=VALUE`` or ``all toggles``."""
    changes: dict[str, Any]
    """What differs from the baseline (empty for it)."""
    spec: Any
    """The :class:`suite.trial.TrialSpec` that runs it (resolved once when planned, so mistakes surface first)."""


@dataclass(frozen=True)
class ProfilePlan:
    """What ``suite profile memory`` runs: every variant ``repeats`` times, interleaved, each in a fresh process."""

    algo: str
    env_id: str
    env_label: str
    steps: int
    seed: int
    repeats: int
    mode: str
    n_eval_episodes: int
    baseline_overrides: dict[str, Any]
    variants: tuple[Variant, ...]
    notes: tuple[str, ...] = ()
    """Caveats found while planning (e.g. a slice shorter than one rollout)."""

    def runs(self) -> list[tuple[int, Variant]]:
        """``(repeat, variant)`` in execution order: repeat 0 of every variant, then repeat 1, ..."""
        return [(r, v) for r in range(self.repeats) for v in self.variants]


def default_slice_steps(config: dict[str, Any]) -> int:
    """The default ``--steps``: :data:`DEFAULT_SLICE_STEPS`, or two whole rollouts of an on-policy config
    (``n_steps`` x ``n_envs``, no replay buffer) when that is more, so rollout and update see full batches."""
    steps = DEFAULT_SLICE_STEPS
    if "buffer_size" not in config and isinstance(config.get("n_steps"), int) and isinstance(config.get("n_envs"), int):
        steps = max(steps, 2 * config["n_steps"] * config["n_envs"])
    return steps


def parse_toggles(items: list[str] | None) -> list[tuple[str, Any]]:
    """``["NAME=VALUE", ...]`` (values parsed as ``--set`` parses them) -> ``[(name, value)]``; a malformed item or a
    name given twice is a :class:`UserError`."""
    from suite.config import parse_value

    out: list[tuple[str, Any]] = []
    for item in items or []:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UserError(f"--toggle expects NAME=VALUE, got {item!r}")
        if any(name == n for n, _ in out):
            raise UserError(f"--toggle {name} is given twice; give each config field once")
        out.append((name, parse_value(value.strip())))
    return out


def plan_profile(
    algo: str,
    env_id: str,
    *,
    toggles: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    steps: int | None = None,
    repeats: int = 3,
    seed: int = 0,
    mode: str = "full",
    n_eval_episodes: int = 2,
    threads: int = 1,
) -> ProfilePlan:
    """Validate a profile request and build its variants (every mistake is a :class:`UserError` here).

    The baseline is the algorithm's per-env configuration with ``overrides`` (``--set``); each toggle
    ``NAME=VALUE`` is the baseline with that one field changed; with two or more toggles, ``all toggles`` has
    them all. Every run trains ``steps`` env steps from ``seed`` and evaluates once at the end
    (``n_eval_episodes`` episodes), so all variants do the same work.
    """
    from suite.config import config_to_dict
    from suite.envs import env_label
    from suite.trial import TrialSpec

    if mode not in PROFILE_MODES:
        raise UserError(f"unknown profile mode {mode!r}; allowed: {', '.join(PROFILE_MODES)}")
    check_mode(mode)
    if repeats < 1:
        raise UserError(f"--repeats must be >= 1, got {repeats}")
    if steps is not None and steps < 1:
        raise UserError(f"--steps must be >= 1, got {steps}")
    if n_eval_episodes < 1:
        raise UserError(f"--eval-episodes must be >= 1, got {n_eval_episodes}")
    base = dict(overrides or {})
    pairs = parse_toggles(toggles)

    def spec_for(layer: dict[str, Any], budget: int) -> Any:
        return TrialSpec(
            algo, env_id, seed, budget, overrides=layer, env_kwargs=dict(env_kwargs or {}), threads=threads,
            n_eval_episodes=n_eval_episodes, eval_freq=budget, study="profile-memory", memory_profile=mode,
        )  # fmt: skip

    probe = spec_for(base, steps or 1).resolve()  # the baseline's config: validates algo, env, --set
    config = config_to_dict(probe.config)
    budget = steps or default_slice_steps(config)
    notes: list[str] = []
    per_rollout = config.get("n_steps", 0) * config.get("n_envs", 0) if "buffer_size" not in config else 0
    if isinstance(per_rollout, int) and per_rollout > budget:
        notes.append(
            f"the slice ({budget:,} steps) is shorter than one rollout ({per_rollout:,} = n_steps x n_envs): the "
            "update trains on a partial batch; pass --steps to cover whole rollouts"
        )
    variants = [Variant(BASELINE, {}, spec_for(base, budget))]
    for name, value in pairs:
        if name not in config:
            raise UserError(
                f"--toggle {name}: {probe.algo.id} has no config field {name!r}; fields: {', '.join(sorted(config))}"
            )
        variants.append(Variant(f"{name}={_show(value)}", {name: value}, spec_for({**base, name: value}, budget)))
    if len(pairs) > 1:
        changes = dict(pairs)
        variants.append(Variant("all toggles", changes, spec_for({**base, **changes}, budget)))
    for variant in variants:
        resolved = variant.spec.resolve()  # a bad value is one clear error, before anything runs
        new = config_to_dict(resolved.config)
        for name in variant.changes:
            if new[name] == config[name]:
                raise UserError(
                    f"--toggle {name}={_show(variant.changes[name])}: the baseline already has {name} = "
                    f"{_show(config[name])}; set the baseline with --set {name}=OTHER"
                )
    return ProfilePlan(
        algo=probe.algo.id, env_id=env_id, env_label=env_label(env_id, probe.env_kwargs), steps=budget, seed=seed,
        repeats=repeats, mode=mode, n_eval_episodes=n_eval_episodes, baseline_overrides=base,
        variants=tuple(variants), notes=tuple(notes),
    )  # fmt: skip


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return str(value)


def run_measures(record: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The profile rows of one trial record: ``{row: {measure: MB}}`` (rows of :data:`PROFILE_ROWS` it has)."""
    phases = record.get("phases") or {}
    start = record.get("baseline_rss_mb")
    out: dict[str, dict[str, float]] = {}
    for row in PROFILE_ROWS[:-1]:
        fields = phases.get(row)
        if not fields or "rss_peak_mb" not in fields:
            continue
        values = {m: float(fields[m]) for m, _ in MEASURES if m in fields}
        if start is not None:
            values["rss_above_start_mb"] = float(fields["rss_peak_mb"]) - float(start)
        out[row] = values
    if record.get("peak_rss_mb") is not None:
        trial: dict[str, float] = {"rss_peak_mb": float(record["peak_rss_mb"])}
        if start is not None:
            trial["rss_above_start_mb"] = float(record["peak_rss_mb"]) - float(start)
        allocs = [v["alloc_peak_mb"] for v in out.values() if "alloc_peak_mb" in v]
        if allocs:
            trial["alloc_peak_mb"] = max(allocs)
        out[TRIAL] = trial
    return out


@dataclass
class ProfileRun:
    """One finished run of a profile."""

    variant: str
    repeat: int
    key: str
    status: str
    error: str | None
    steps: int
    wall_time_s: float
    baseline_rss_mb: float | None
    peak_rss_mb: float | None
    phases: dict[str, dict[str, Any]]
    flamegraph: str | None = None

    @property
    def measures(self) -> dict[str, dict[str, float]]:
        return run_measures({"phases": self.phases, "baseline_rss_mb": self.baseline_rss_mb, "peak_rss_mb": self.peak_rss_mb})

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _worker(spec: Any, capture: str | None, conn: Any) -> None:
    """Body of a profile run's process: one trial, its record sent back (progress messages on the way)."""
    import signal

    from suite.trial import run_trial

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and ends this process
    # torch imports torch._dynamo (and sympy) lazily when the first optimizer is built: ~75 MB and seconds, the same
    # for every torch-based algorithm. Import it before the trial so that its setup row shows what the algorithm
    # builds, not torch's own start-up (a forkserver that preloads it would give trials the same baseline).
    import torch._dynamo  # noqa: F401

    last = [0.0]

    def progress(steps: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.5:
            last[0] = now
            conn.send(("progress", steps))

    try:
        record = run_trial(spec.resolve(), progress=progress, memory_capture=Path(capture) if capture else None)
        keep = ("key", "status", "error", "steps", "wall_time_s", "baseline_rss_mb", "peak_rss_mb", "phases")
        conn.send(("record", {k: record[k] for k in keep}))
    finally:
        conn.close()


def _run_in_fresh_process(spec: Any, capture: Path | None, on_progress: Any) -> dict[str, Any]:
    """Run one trial in a new interpreter (``spawn``: nothing inherited but the spec) and return its record."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worker, args=(spec, str(capture) if capture else None, child), daemon=True)
    proc.start()
    child.close()
    record = None
    try:
        while record is None:
            if parent.poll(0.5):
                try:
                    kind, payload = parent.recv()
                except EOFError:
                    break
                if kind == "progress":
                    on_progress(payload)
                else:
                    record = payload
            elif not proc.is_alive():
                break
    finally:
        if proc.is_alive() and record is None:
            proc.terminate()
        proc.join(timeout=30)
        parent.close()
    if record is None:
        return {"key": "", "status": "failed", "error": f"WorkerDied: profile run exited with code {proc.exitcode}",
                "steps": 0, "wall_time_s": 0.0, "baseline_rss_mb": None, "peak_rss_mb": None, "phases": {}}  # fmt: skip
    return record


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "run"


PROFILES_DIR = Path("reports") / "profile-memory"
"""Parent of the default output folders of ``suite profile memory`` (relative to the current directory)."""


def default_output_dir(algo: str, env_label: str) -> Path:
    """``reports/profile-memory/<algo>_<env>/`` (unsafe characters replaced: ``ALE/Pong-v5`` -> ``ALE_Pong-v5``)."""
    return PROFILES_DIR / _slug(f"{algo}_{env_label}")


def render_flamegraph(capture: Path, html: Path) -> None:
    """memray's own flame graph HTML for a capture (``memray flamegraph``), then the capture is deleted."""
    import subprocess

    html.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "memray", "flamegraph", "--force", "-o", str(html), str(capture)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"memray flamegraph failed: {done.stderr.strip() or done.stdout.strip()}")
    capture.unlink(missing_ok=True)


RUNS_FILE = "runs.jsonl"
"""Where a profile keeps its finished runs (one JSON object per line), so a second call resumes."""


def load_runs(out_dir: Path, plan: ProfilePlan) -> dict[tuple[str, int], ProfileRun]:
    """Finished runs of this plan already in ``out_dir`` (matched by trial key, repeat and mode)."""
    import json

    path = out_dir / RUNS_FILE
    keys = {v.name: v.spec.resolve().key for v in plan.variants}
    found: dict[tuple[str, int], ProfileRun] = {}
    if not path.exists():
        return found
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
            run = ProfileRun(**data["run"])
        except (ValueError, TypeError, KeyError):
            continue  # a line cut short by a kill, or from another version: rerun it
        if data.get("mode") == plan.mode and keys.get(run.variant) == run.key and run.repeat < plan.repeats:
            found[(run.variant, run.repeat)] = run
    return found


def run_profile(
    plan: ProfilePlan,
    out_dir: Path,
    *,
    flamegraph_dir: Path | None = None,
    fresh: bool = False,
    show_progress: bool = True,
) -> list[ProfileRun]:
    """Run every (repeat, variant) of ``plan`` not already in ``out_dir`` (see :data:`RUNS_FILE`).

    Each run is a fresh process; runs are interleaved (baseline, toggle 1, ..., then the next repeat), so
    machine drift spreads over all variants. A failed run is kept (status and error) and left out of the
    statistics. Ctrl-C ends the profile after saving what finished; the same command resumes it.

    Returns:
        Every run of the plan, in plan order.
    """
    import json

    from tqdm import tqdm

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RUNS_FILE
    if fresh:
        path.unlink(missing_ok=True)
    done = load_runs(out_dir, plan)
    todo = [(r, v) for r, v in plan.runs() if (v.name, r) not in done]
    if done:
        print(f"{len(done)} of {len(plan.runs())} runs already in {path}; running the other {len(todo)}", file=sys.stderr)
    bar = tqdm(total=len(todo) * plan.steps, unit="step", unit_scale=True, disable=not show_progress, dynamic_ncols=True)
    try:
        for i, (repeat, variant) in enumerate(todo):
            bar.set_description(f"{i}/{len(todo)} runs: {variant.name} #{repeat + 1}")
            credited = [0]

            def advance(steps: int, credited: list[int] = credited) -> None:
                step = min(steps, plan.steps)
                bar.update(step - credited[0])
                credited[0] = step

            capture = None
            if flamegraph_dir is not None:
                capture = flamegraph_dir / f"{_slug(variant.name)}-r{repeat}.bin"
            record = _run_in_fresh_process(variant.spec, capture, advance)
            advance(plan.steps)
            graph = None
            if capture is not None and capture.exists():
                html = capture.with_suffix(".html")
                render_flamegraph(capture, html)
                graph = str(html)
            run = ProfileRun(
                variant=variant.name, repeat=repeat, key=record["key"], status=record["status"], error=record["error"],
                steps=record["steps"], wall_time_s=record["wall_time_s"], baseline_rss_mb=record["baseline_rss_mb"],
                peak_rss_mb=record["peak_rss_mb"], phases=record["phases"], flamegraph=graph,
            )  # fmt: skip
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"mode": plan.mode, "run": run.to_json()}) + "\n")
            done[(variant.name, repeat)] = run
    finally:
        bar.close()
    return [done[(v.name, r)] for r, v in plan.runs() if (v.name, r) in done]


def summarise(runs: list[ProfileRun], plan: ProfilePlan) -> Any:
    """Statistics of a profile, long format (a pandas DataFrame).

    Columns: ``variant, row, measure, n`` (ok runs), ``median, min, max`` (MB over the repeats), and for every
    variant but the baseline ``ratio_median, ratio_min, ratio_max``: the variant's value over the baseline's in
    the same repeat (runs are paired by repeat: they ran next to each other), so ``0.70`` is a 30% saving. A
    ratio is left out (NaN) where the baseline's value is below :data:`RATIO_MIN_MB`.
    """
    import numpy as np
    import pandas as pd

    values: dict[tuple[str, str, str], dict[int, float]] = {}
    for run in runs:
        if run.status != "ok":
            continue
        for row, fields in run.measures.items():
            for measure, value in fields.items():
                values.setdefault((run.variant, row, measure), {})[run.repeat] = value
    rows = []
    for variant in plan.variants:
        for row in PROFILE_ROWS:
            for measure, _ in MEASURES:
                by_repeat = values.get((variant.name, row, measure))
                if not by_repeat:
                    continue
                v = np.array(list(by_repeat.values()), dtype=float)
                entry: dict[str, Any] = {
                    "variant": variant.name, "row": row, "measure": measure, "n": len(v),
                    "median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()),
                    "ratio_median": np.nan, "ratio_min": np.nan, "ratio_max": np.nan,
                }  # fmt: skip
                base = values.get((BASELINE, row, measure), {})
                if variant.name != BASELINE:
                    ratios = np.array(
                        [x / base[r] for r, x in by_repeat.items() if base.get(r, 0.0) >= RATIO_MIN_MB], dtype=float
                    )
                    if ratios.size:
                        entry.update(ratio_median=float(np.median(ratios)), ratio_min=float(ratios.min()),
                                     ratio_max=float(ratios.max()))  # fmt: skip
                rows.append(entry)
    columns = ["variant", "row", "measure", "n", "median", "min", "max", "ratio_median", "ratio_min", "ratio_max"]
    return pd.DataFrame(rows, columns=columns)


TABLE_MEASURES: tuple[tuple[str, str], ...] = (
    ("rss_peak_mb", "RSS peak"),
    ("rss_above_start_mb", "above start"),
    ("alloc_peak_mb", "alloc peak"),
)
"""The measures the terminal table shows (MB, median over repeats), each with its ratio to the baseline."""


def format_ratio(median: float, lo: float, hi: float) -> str:
    """``0.70 [0.69, 0.71]``; ``-`` when there is no ratio; one number when the spread is nil."""
    import math

    if math.isnan(median):
        return "-"
    if lo == hi:
        return f"{median:.2f}"
    return f"{median:.2f} [{lo:.2f}, {hi:.2f}]"


def profile_table(summary: Any, plan: ProfilePlan) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the side-by-side table (one line per phase and variant)."""
    header = ["phase", "variant"]
    for _, title in TABLE_MEASURES:
        header += [f"{title} MB", f"{title} ratio"]
    index = {(r.variant, r.row, r.measure): r for r in summary.itertuples(index=False)}
    lines = []
    for row in PROFILE_ROWS:
        first = True
        for variant in plan.variants:
            cells = []
            present = False
            for measure, _ in TABLE_MEASURES:
                entry = index.get((variant.name, row, measure))
                if entry is None:
                    cells += ["-", "-"]
                    continue
                present = True
                cells += [f"{entry.median:,.1f}", format_ratio(entry.ratio_median, entry.ratio_min, entry.ratio_max)]
            if present:
                lines.append([row if first else "", variant.name, *cells])
                first = False
    return header, lines


def format_profile(summary: Any, plan: ProfilePlan, runs: list[ProfileRun]) -> str:
    """The terminal report: what ran, the side-by-side table, failed runs, notes."""
    n_ok = sum(r.status == "ok" for r in runs)
    lines = [
        f"memory profile: {plan.algo} on {plan.env_label}, {plan.steps:,} steps from seed {plan.seed}, "
        f"{plan.repeats} repeat(s) per variant in fresh processes, mode {plan.mode}; {n_ok}/{len(runs)} runs ok",
        "MB = 2**20 bytes, median over repeats; ratio = variant / baseline in the same repeat: median [min, max]; "
        "'above start' = peak RSS - the RSS before the trial built its envs and networks; 'alloc' = memray's tracked "
        "allocations (full mode).",
    ]
    if plan.baseline_overrides:
        lines.append("baseline: " + ", ".join(f"{k}={_show(v)}" for k, v in sorted(plan.baseline_overrides.items())))
    header, rows = profile_table(summary, plan)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines.append("")
    for r in [header, *rows]:
        lines.append(
            "  ".join(str(c).rjust(w) if i > 1 else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        )
    for run in runs:
        if run.status != "ok":
            lines.append(f"run {run.variant} #{run.repeat + 1}: {run.status}: {run.error}")
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines)
