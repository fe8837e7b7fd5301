"""Kernel modes: which vector kernels a trial's libraries may pick, so that the same key gives the same bits anywhere.

torch (ATen's CPU capability), MKL, oneDNN, numpy's SIMD dispatch and OpenBLAS each choose their kernels by the CPU
they find when they load (MKL by the CPU's vendor too), and different kernels round differently: the same trial gives
other floats on an AVX-512 machine than on an AVX2 one, and on an AVX-512 Intel CPU than on an AVX-512 AMD one. Two
modes:

- ``native``: every library picks its kernels by the CPU (the suite's behaviour before the modes existed). Not in the
  trial key, so every record made before reads as native and keeps its key.
- ``portable``: every library held to one baseline that every x86-64 machine the project meets supports (AVX2), by
  the variables of :data:`PORTABLE_ENV`, which must be set before the libraries load: the trial processes are forked
  from a forkserver started with them (:mod:`suite.executors.local`, also on Ray nodes), ``suite regress`` passes
  them to each revision's run. Part of the trial key (``kernels = "portable"``), so records of the two modes never
  share a key.

What each variable pins:

- ``ATEN_CPU_CAPABILITY=avx2``: torch's own CPU kernels (elementwise ops, reductions, softmax...).
- ``MKL_CBWR=COMPATIBLE``: MKL's conditional numerical reproducibility (torch's GEMMs and VML go through MKL). The
  ``AVX2`` branch is honoured on Intel CPUs only (Intel's CNR guide), so the branch every CPU follows is chosen.
- ``ONEDNN_MAX_CPU_ISA=AVX2``: oneDNN's JIT kernels (torch's convolutions, e.g. the Atari CNN).
- ``NPY_DISABLE_CPU_FEATURES``: numpy's AVX-512 dispatch targets (its transcendental and sorting kernels); the list
  is the AVX-512 features this machine has (numpy refuses to disable one the machine lacks).
- ``OPENBLAS_CORETYPE=Haswell``: the kernels of the OpenBLAS numpy bundles (``numpy.linalg``, ``@`` on float64).

The record's provenance has a ``kernels`` block read back from the libraries inside the trial process
(:func:`read_back`), so what ran is recorded, not what was asked. A process not set up for portable kernels refuses a
portable trial (:func:`check_process`), and so does an x86-64 CPU without the baseline, AVX2 and FMA
(:func:`check_cpu`). docs/kernels.md has what stays machine-dependent and the speed of each mode.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from collections.abc import Iterator
from typing import Any

from suite.errors import UserError

MODES = ("native", "portable")
"""The kernel modes."""

DEFAULT = "native"
"""The mode of a trial that names none, unless ``$SUITE_KERNELS`` says (:func:`default_mode`; docs/kernels.md: why)."""

DEFAULT_VARIABLE = "SUITE_KERNELS"
"""The variable that sets the default mode of a process (``suite regress`` sets it for each revision's run)."""

NUMPY_AVX512 = (
    "AVX512F", "AVX512_KNL", "AVX512_KNM", "AVX512_SKX", "AVX512_CLX", "AVX512_CNL", "X86_V4", "AVX512_ICL",
    "AVX512_SPR",
)  # fmt: skip
"""numpy's AVX-512 dispatch targets (numpy 2.4 builds ``X86_V4 AVX512_ICL AVX512_SPR``; older ones the others): the
portable mode disables those its numpy build has (``__cpu_dispatch__``). Only dispatch targets can be disabled:
numpy leaves its ``AVX512F``... feature flags on, but no kernel of theirs runs."""

PORTABLE_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
}
"""The variables of the portable mode besides ``NPY_DISABLE_CPU_FEATURES`` (machine-dependent: :func:`environ`)."""

ATEN_ABOVE_AVX2 = ("AVX512", "AVX512_VNNI", "AVX512_BF16", "AVX512_FP16", "AMX")
"""ATen capabilities wider than the portable baseline."""

_ENV_LOCK = threading.Lock()


def check_mode(text: str) -> str:
    """``text`` as a kernel mode. Raises UserError (one line) for anything else."""
    mode = str(text).strip().lower()
    if mode not in MODES:
        raise UserError(f"unknown kernel mode {text!r}; allowed: {', '.join(MODES)}")
    return mode


def default_mode() -> str:
    """The mode of a trial that names none here: ``$SUITE_KERNELS``, else :data:`DEFAULT`.

    Raises:
        UserError: ``$SUITE_KERNELS`` names no mode.
    """
    value = os.environ.get(DEFAULT_VARIABLE)
    if not value:
        return DEFAULT
    try:
        return check_mode(value)
    except UserError as exc:
        raise UserError(f"${DEFAULT_VARIABLE}: {exc}") from None


def _numpy_features() -> dict[str, bool]:
    """numpy's CPU features of this process (``{name: enabled}``; disabled ones read False)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_features__  # type: ignore[no-redef]
    return dict(__cpu_features__)


def _numpy_dispatch() -> list[str]:
    """The dispatch targets numpy was built with (``__cpu_dispatch__``), e.g. ``X86_V3 X86_V4 AVX512_ICL AVX512_SPR``."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_dispatch__  # type: ignore[no-redef]
    return list(__cpu_dispatch__)


@functools.cache
def _numpy_disable() -> str:
    """``NPY_DISABLE_CPU_FEATURES`` of the portable mode: numpy's AVX-512 dispatch targets (the same list on every
    machine: numpy ignores a target the CPU lacks)."""
    return " ".join(name for name in _numpy_dispatch() if name in NUMPY_AVX512)


BASELINE = {"AVX2": "AVX2", "FMA3": "FMA"}
"""The CPU features of the portable baseline (numpy's name -> the usual one). Every library is held to kernels that
need them, and glibc's libm takes its FMA variants of ``exp``, ``log``, ``pow``, ``sin``... only where both exist, so a
CPU without them computes other bits, and OpenBLAS's Haswell kernels stop numpy with an illegal instruction there."""


def missing_baseline() -> list[str]:
    """The features of :data:`BASELINE` this x86-64 CPU lacks (numpy's CPUID reading), e.g. ``["AVX2", "FMA"]``;
    empty where it has them all, and on other architectures (docs/kernels.md: the variables change nothing there)."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return []
    features = _numpy_features()
    return [name for feature, name in BASELINE.items() if not features.get(feature)]


def check_cpu() -> None:
    """Refuse the portable mode on an x86-64 CPU without its baseline.

    Raises:
        UserError: the CPU lacks AVX2 or FMA (one line, saying which and what to do).
    """
    missing = missing_baseline()
    if missing:
        raise UserError(
            f"this CPU lacks {' and '.join(missing)}, the baseline of portable kernels, so it cannot give a portable "
            "trial the bits other machines give; run portable trials on an x86-64 CPU with AVX2 and FMA, or use "
            "--kernels native here"
        )


def environ(mode: str) -> dict[str, str]:
    """The variables a process of ``mode`` is started with (native: none; its libraries choose).

    Raises:
        UserError: portable on an x86-64 CPU without the baseline (:func:`check_cpu`).
    """
    if check_mode(mode) == "native":
        return {}
    check_cpu()
    out = dict(PORTABLE_ENV)
    disable = _numpy_disable()
    if disable:
        out["NPY_DISABLE_CPU_FEATURES"] = disable
    return out


@contextlib.contextmanager
def started_with(mode: str) -> Iterator[None]:
    """Set ``mode``'s variables in this process's environment for the block (for starting a process that inherits
    it, e.g. a forkserver); the environment is put back after it."""
    values = environ(mode)
    with _ENV_LOCK:
        saved = {name: os.environ.get(name) for name in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for name, old in saved.items():
                if old is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = old


def _mkl_branch() -> str | None:
    """MKL's CNR branch in this process (``mkl_cbwr_get``, from the MKL that torch links), or None when unreadable."""
    names = {1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2", 9: "AVX",
             10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1", 14: "AVX512_E1"}  # fmt: skip
    for lib in _torch_libraries():
        # torch links MKL statically and exports only its service layer's getter (``mkl_cbwr_get`` where MKL is shared)
        fn = getattr(lib, "mkl_cbwr_get", None) or getattr(lib, "mkl_serv_cbwr_get", None)
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int]
            value = int(fn(1))  # MKL_CBWR_BRANCH (AVX2 on a non-Intel CPU reads AUTO: not honoured there)
            return names.get(value, str(value))
    return None


def _onednn_isa() -> str | None:
    """oneDNN's effective ISA in this process (``dnnl_get_effective_cpu_isa``), or None when unreadable (torch's
    build keeps oneDNN's API hidden: then only ``ONEDNN_MAX_CPU_ISA`` in ``environ`` says)."""
    names = {0x0: "default", 0x1: "sse41", 0x3: "avx", 0x7: "avx2", 0xF: "avx2_vnni", 0x2F: "avx2_vnni_2",
             0x1F: "avx512_core", 0x5F: "avx512_core_vnni", 0x7F: "avx512_core_bf16", 0x3FF: "avx512_core_fp16",
             0xFFF: "avx512_core_amx", 0xBF: "avx10_1_512", 0x1FFF: "avx10_1_512_amx_fp16"}  # fmt: skip
    for lib in _torch_libraries():
        fn = getattr(lib, "dnnl_get_effective_cpu_isa", None)
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_int, []
            value = int(fn())
            return names.get(value, hex(value))
    return None


@functools.cache
def _torch_libraries() -> tuple[Any, ...]:
    """The shared libraries torch's CPU kernels live in (ctypes handles; empty where not found)."""
    import torch

    libs = []
    folder = os.path.join(os.path.dirname(torch.__file__), "lib")
    for name in ("libtorch_cpu.so", "libmkl_rt.so", "libdnnl.so"):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            with contextlib.suppress(OSError):
                libs.append(ctypes.CDLL(path))
    return tuple(libs)


def _openblas_cores() -> list[str]:
    """The core types of the OpenBLAS that numpy bundles (``numpy.libs``), e.g. ``["Haswell"]``: asked through its
    ``*_get_corename*`` function (what threadpoolctl reads, without its dependency). Loading it is what
    ``numpy.linalg`` does anyway; the core type is chosen then, from ``OPENBLAS_CORETYPE``."""
    import glob

    import numpy as np

    cores = set()
    folder = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(folder, "lib*openblas*.so*"))):
        lib = ctypes.CDLL(path)
        for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                cores.add(fn().decode())
                break
    return sorted(cores)


def _guard(fn: Any) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001  (provenance must never fail a trial)
        return f"unreadable: {type(exc).__name__}"


def read_back() -> dict[str, Any]:
    """What the libraries of this process run with: ``aten`` (torch's CPU capability), ``mkl_cbwr`` (MKL's CNR
    branch), ``onednn_isa``, ``numpy_dispatch`` (numpy's SIMD dispatch targets enabled), ``openblas`` (its core types)
    and ``environ`` (the kernel variables as set); plus ``held``: whether they add up to the portable mode."""
    import torch

    out: dict[str, Any] = {
        "aten": _guard(lambda: str(torch.backends.cpu.get_cpu_capability())),
        "mkl_cbwr": _guard(_mkl_branch),
        "onednn_isa": _guard(_onednn_isa),
        "numpy_dispatch": _guard(lambda: [t for t in _numpy_dispatch() if _numpy_features().get(t)]),
        "openblas": _guard(_openblas_cores),
        "environ": {name: os.environ.get(name) for name in (*PORTABLE_ENV, "NPY_DISABLE_CPU_FEATURES")},
    }
    out["held"] = not _portable_gaps(out)
    return out


def _portable_gaps(state: dict[str, Any]) -> list[str]:
    """Why the process described by ``state`` (:func:`read_back`) is not portable (empty: it is)."""
    gaps = [
        f"{name}={state['environ'].get(name) or 'unset'} (portable: {value})"
        for name, value in PORTABLE_ENV.items()
        if state["environ"].get(name) != value
    ]
    if state["aten"] in ATEN_ABOVE_AVX2:
        gaps.append(f"torch runs {state['aten']} kernels (it was loaded before ATEN_CPU_CAPABILITY was set)")
    numpy_wide = [t for t in state["numpy_dispatch"] if t in NUMPY_AVX512] if isinstance(state["numpy_dispatch"], list) else []
    if numpy_wide:
        gaps.append(f"numpy runs {' '.join(numpy_wide)} kernels")
    if isinstance(state["openblas"], list) and any(core != PORTABLE_ENV["OPENBLAS_CORETYPE"] for core in state["openblas"]):
        gaps.append(f"OpenBLAS runs its {' '.join(state['openblas'])} kernels")
    if state["mkl_cbwr"] not in (None, "COMPATIBLE") and not str(state["mkl_cbwr"]).startswith("unreadable"):
        gaps.append(f"MKL runs its {state['mkl_cbwr']} branch")
    return gaps


def process_mode() -> str:
    """The mode this process's libraries run in: ``portable`` when every library is held, else ``native``."""
    return "portable" if read_back()["held"] else "native"


def check_process(mode: str) -> None:
    """Refuse to run a ``mode`` trial in this process unless its libraries run in that mode.

    Raises:
        UserError: a portable trial in a process whose libraries were loaded otherwise (one line, saying what is
            off and how portable trials are run), or on a CPU without the baseline (:func:`check_cpu`).
    """
    if check_mode(mode) != "portable":
        return
    check_cpu()
    gaps = _portable_gaps(read_back())
    if gaps:
        raise UserError(
            "this process was not started for portable kernels, so it refuses a portable trial: "
            + "; ".join(gaps)
            + " (run it through suite run/reproduce/regress, whose trial processes are started for it)"
        )
