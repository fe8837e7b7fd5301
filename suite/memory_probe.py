"""Memory per phase of a trial: the probe every trial carries (``suite run --memory-profile``).

Modes (``suite run --memory-profile``, :data:`MODES`). The mode is not part of the trial key: it measures, it
never changes a result (a trial gives the same :func:`suite.trial.deterministic_view` in every mode, tested).

``off``
    No probe; the record keeps only the peak RSS of the trial process (``peak_rss_mb``).
``rss`` (the default)
    Per phase, the resident peak and growth of the trial process. Linux keeps a process's resident high-water
    mark (``VmHWM`` in ``/proc/self/status``) and resets it to the current RSS when ``5`` is written to
    ``/proc/self/clear_refs`` (the kernel's Documentation/filesystems/proc.rst). The probe resets it when a phase
    starts and reads it when the phase ends, which gives the phase's exact resident peak at a small cost per phase
    (``benchmarks/bench_memory_overhead.py`` measures it; docs/design.md). Where the reset is refused (not
    Linux, a sandbox), a sampler thread reads the RSS every :data:`SAMPLER_INTERVAL_S` instead, and the record
    says so (``rss_method = "sampler"``, ``rss_interval_ms``): a peak shorter than the interval can be missed.
``full``
    ``rss`` plus, per phase, the peak of *tracked allocations*: every malloc/calloc/realloc/posix_memalign/mmap
    of the process not yet freed, recorded by memray (which hooks the allocators, so it sees numpy arrays and
    torch CPU tensors alike; tracemalloc only sees Python's allocator and shows a 64 MiB torch tensor as 0).
    The capture is analysed when the trial ends (a pass over every allocation record);
    phase boundaries are marked in memray's allocation stream itself (:func:`_mark`), so each phase's peak is
    exact, not sampled. memray's own buffers add a few MB of resident memory in this mode.

Record fields: ``record["phases"][name]`` gains, for each phase that ran (:data:`suite.context.PHASES`) and for
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
RSS as its peak), and a worker that runs many trials (a Ray actor) would report
the peak of earlier trials.
MB is 2**20 bytes everywhere (as ``peak_rss_mb``). Only the trial process is measured: env workers of
``vectorization="async"`` are separate processes (every shipped env runs in-process by default).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.context import PHASES, TrialContext
from suite.errors import UserError

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
boundary."""


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
    """A :class:`suite.context.PhaseProbe` measuring memory per phase (see the module docstring).

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
