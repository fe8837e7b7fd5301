"""A fixed, seeded battery of elementary functions through Python's ``math`` and numpy's ufuncs (issue 57), hashed per
function, so that any machine can check that its libm and numpy's SIMD kernels give the bits of the machine that made
``results/portable/libm-hashes.json``.

Why: glibc's libm picks FMA or SSE2 variants of ``exp``, ``log``, ``pow``, ``sin``, ``cos``, ``tan``, ``atan``... by
the CPU when it loads (ifunc), and no variable of the portable mode holds it; gymnasium's CartPole steps with
``math.sin``/``math.cos``, the algorithms and envs call numpy's ufuncs, Box2D and MuJoCo call the same libm. numpy
dispatches its float32/float64 transcendental kernels by the CPU too (the portable mode disables its AVX-512
targets). The battery covers the ranges the envs and algorithms use (pole angles, log-probabilities, activations,
rewards, positions) with tens of thousands of seeded inputs per function, plus hard cases (signed zeros, subnormals,
huge arguments, the edges of overflow, points next to multiples of pi/2, infinities and NaN).

    python benchmarks/libm_battery.py --write            # (re)write results/portable/libm-hashes.json (portable)
    python benchmarks/libm_battery.py --check            # compare this process's hashes with the committed ones
    python benchmarks/libm_battery.py --dump out.npz     # every output, for counting differing outputs
    python benchmarks/libm_battery.py --count a.npz b.npz  # differing outputs per function between two dumps
    python benchmarks/libm_battery.py --survey           # results/portable/libm-differences.json: this host and
                                                         # emulated CPUs, portable and native, counted

Run it with the portable variables (:func:`suite.kernels.environ`) for the portable mode; ``--write`` and
``--check`` refuse otherwise. It imports numpy and math only (no torch), so it runs in seconds under ``qemu-user``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HASHES = REPO / "results" / "portable" / "libm-hashes.json"
SEED = 57
N = 20_000
"""Seeded inputs per function and dtype (half in the range the envs and algorithms use, half log-uniform over the
function's whole domain), before the hard cases."""

LOG2_10 = 3.321928094887362
"""log2(10) as a literal (not computed by this machine's libm)."""
TINY = 5e-324
HARD = [0.0, -0.0, TINY, -TINY, 2.2250738585072014e-308, 1e-300, 1e-8, 0.5, 1.0 - 2**-53, 1.0, 1.0 + 2**-52, 2.0,
        math.pi / 4, math.pi / 2, math.pi, 1.5 * math.pi, 2 * math.pi, 355.0, 1e5, 1e10, 1e22, 2.0**52, 1e300,
        709.782712893384, 709.79, -745.1332191019411, -745.2, 88.72283, 88.73, -103.97, 11.0898664, 700.0,
        math.inf, -math.inf, math.nan]  # fmt: skip
"""Hard cases for every function (sign-flipped too where the domain allows): subnormals, signed zeros, the ends of
exp's range in float64 and float32, arguments whose reduction modulo pi/2 is delicate, infinities, NaN."""

# name -> (math function or None, numpy ufunc, (env range), (log-uniform magnitude range), domain)
# domain: "any" (signed inputs), "pos" (> 0), "unit" ([-1, 1]), "gt-1" (> -1)
UNARY: dict[str, tuple[Callable[[float], float] | None, Any, tuple[float, float], tuple[float, float], str]] = {
    "exp": (math.exp, np.exp, (-20.0, 20.0), (-300, 2.86), "any"),
    "expm1": (math.expm1, np.expm1, (-1.0, 1.0), (-300, 2.86), "any"),
    "exp2": (math.exp2, np.exp2, (-30.0, 30.0), (-300, 3.0), "any"),
    "log": (math.log, np.log, (1e-6, 10.0), (-307, 307), "pos"),
    "log1p": (math.log1p, np.log1p, (-0.999, 10.0), (-300, 300), "gt-1"),
    "log2": (math.log2, np.log2, (1e-6, 10.0), (-307, 307), "pos"),
    "log10": (math.log10, np.log10, (1e-6, 10.0), (-307, 307), "pos"),
    "sin": (math.sin, np.sin, (-0.25, 0.25), (-300, 22), "any"),
    "cos": (math.cos, np.cos, (-0.25, 0.25), (-300, 22), "any"),
    "tan": (math.tan, np.tan, (-1.5, 1.5), (-300, 22), "any"),
    "arcsin": (math.asin, np.arcsin, (-1.0, 1.0), (-300, 0), "unit"),
    "arccos": (math.acos, np.arccos, (-1.0, 1.0), (-300, 0), "unit"),
    "arctan": (math.atan, np.arctan, (-10.0, 10.0), (-300, 300), "any"),
    "sinh": (math.sinh, np.sinh, (-5.0, 5.0), (-300, 2.85), "any"),
    "cosh": (math.cosh, np.cosh, (-5.0, 5.0), (-300, 2.85), "any"),
    "tanh": (math.tanh, np.tanh, (-5.0, 5.0), (-300, 300), "any"),
    "arctanh": (math.atanh, np.arctanh, (-0.999, 0.999), (-300, 0), "unit"),
    "arcsinh": (math.asinh, np.arcsinh, (-10.0, 10.0), (-300, 300), "any"),
    "sqrt": (math.sqrt, np.sqrt, (0.0, 100.0), (-307, 307), "pos"),
    "cbrt": (math.cbrt, np.cbrt, (-100.0, 100.0), (-307, 307), "any"),
    "erf": (math.erf, None, (-4.0, 4.0), (-300, 1.5), "any"),
}
BINARY: dict[str, tuple[Callable[[float, float], float] | None, Any]] = {
    "pow": (math.pow, np.power),
    "atan2": (math.atan2, np.arctan2),
    "hypot": (math.hypot, np.hypot),
}


def _domain(x: np.ndarray, domain: str) -> np.ndarray:
    if domain == "pos":
        return np.abs(x)
    if domain == "unit":
        return np.clip(x, -1.0, 1.0)
    if domain == "gt-1":
        return np.where(x <= -1.0, -x, x)
    return x


def _log_uniform(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
    """``n`` positive floats with decimal exponents spread over ``[lo, hi)``, built from their bits (a random binary
    exponent and 52 random mantissa bits): no transcendental function of this machine makes the inputs, so they are
    the same bits everywhere (``10.0 ** x`` would go through numpy's CPU-dispatched power)."""
    e_lo, e_hi = math.floor(lo * LOG2_10), math.floor(hi * LOG2_10)
    exponent = rng.integers(e_lo, e_hi, n, dtype=np.int64) + 1023
    mantissa = rng.integers(0, 2**52, n, dtype=np.uint64)
    return ((exponent.astype(np.uint64) << np.uint64(52)) | mantissa).view(np.float64)


def unary_inputs(name: str) -> np.ndarray:
    """The float64 inputs of ``name``: seeded (``SEED`` and the name), the same on every machine."""
    _, _, (lo, hi), (elo, ehi), domain = UNARY[name]
    rng = np.random.Generator(np.random.PCG64([SEED, *name.encode()]))
    near = rng.uniform(lo, hi, N // 2)
    wide = _log_uniform(rng, elo, ehi, N // 2) * rng.choice([-1.0, 1.0], N // 2)
    hard = np.array(HARD + [-h for h in HARD])
    return _domain(np.concatenate([near, wide, hard]), domain)


def binary_inputs(name: str) -> tuple[np.ndarray, np.ndarray]:
    """The float64 input pairs of ``name``: pow with bases of the envs' ranges (discounts, normalisation) and
    exponents over their reach, atan2/hypot over positions and velocities; plus every pair of hard cases."""
    rng = np.random.Generator(np.random.PCG64([SEED, *name.encode()]))
    if name == "pow":
        x = np.concatenate([rng.uniform(0.0, 2.0, N // 2), _log_uniform(rng, -30, 30, N // 2)])
        y = np.concatenate([rng.uniform(-10.0, 1000.0, N // 2), rng.uniform(-10.0, 10.0, N // 2)])
    else:
        x = np.concatenate([rng.uniform(-10.0, 10.0, N // 2), _log_uniform(rng, -300, 300, N // 2)])
        y = np.concatenate([rng.uniform(-10.0, 10.0, N // 2), -_log_uniform(rng, -300, 300, N // 2)])
    hard = np.array(HARD + [-h for h in HARD])
    return np.concatenate([x, np.repeat(hard, hard.size)]), np.concatenate([y, np.tile(hard, hard.size)])


def _python(fn: Callable[..., float], *columns: np.ndarray) -> np.ndarray:
    """``fn`` over the inputs through Python floats, as the envs call it; a ValueError/OverflowError reads as NaN
    (Python raises instead of returning a NaN or infinity)."""
    out = np.empty(columns[0].size)
    for i, args in enumerate(zip(*(c.tolist() for c in columns), strict=True)):
        try:
            out[i] = fn(*args)
        except (ValueError, OverflowError):
            out[i] = math.nan
    return out


def outputs() -> dict[str, np.ndarray]:
    """Every output of the battery: ``math.<name>``, ``np.<name>.f64`` and ``np.<name>.f32`` per function."""
    out: dict[str, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for name, (py, uf, *_) in UNARY.items():
            x = unary_inputs(name)
            if py is not None:
                out[f"math.{name}"] = _python(py, x)
            if uf is not None:
                out[f"np.{name}.f64"] = uf(x)
                out[f"np.{name}.f32"] = uf(x.astype(np.float32))
        for name, (py2, uf) in BINARY.items():
            x, y = binary_inputs(name)
            if py2 is not None:
                out[f"math.{name}"] = _python(py2, x, y)
            out[f"np.{name}.f64"] = uf(x, y)
            out[f"np.{name}.f32"] = uf(x.astype(np.float32), y.astype(np.float32))
    return out


def _canonical(a: np.ndarray) -> np.ndarray:
    """``a`` with every NaN as the one quiet NaN of its dtype; every other value bit for bit (signed zeros count).

    NaN sign and payload are left out: QEMU returns a positive NaN from an operation on two NaNs of opposite sign
    (``np.add(nan, -nan)``) where x86 hardware returns the first operand's, so emulated replays would differ there
    while no real CPU does; no later arithmetic reads a NaN's sign."""
    return np.ascontiguousarray(np.where(np.isnan(a), np.nan, a).astype(a.dtype))


def hashes(outs: dict[str, np.ndarray]) -> dict[str, str]:
    """sha256 of each function's output bytes (NaNs canonical: :func:`_canonical`)."""
    return {name: hashlib.sha256(_canonical(a).tobytes()).hexdigest() for name, a in sorted(outs.items())}


def count(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, int]:
    """Outputs of each function whose bits differ between two runs (0: the same bits; NaNs canonical)."""
    out = {}
    for name in sorted(a):
        x, y = _canonical(a[name]), _canonical(b[name])
        width = np.uint32 if x.dtype == np.float32 else np.uint64
        out[name] = int(np.count_nonzero(x.view(width) != y.view(width)))
    return out


def libm() -> str:
    """The C library this process runs on (``gnu_libc_version``), e.g. ``glibc 2.36``."""
    import platform

    lib, version = platform.libc_ver()
    return f"{lib} {version}".strip()


def _portable() -> bool:
    sys.path.insert(0, str(REPO))
    from suite import kernels

    return all(os.environ.get(k) == v for k, v in kernels.environ("portable").items())


SURVEY = REPO / "results" / "portable" / "libm-differences.json"
CONFIGS = (
    ("host", "portable", None),
    ("host", "native", None),
    ("Haswell-v4", "portable", None),
    ("Haswell-v4", "native", None),
    ("Nehalem", "portable", None),
    ("Nehalem", "portable", "OPENBLAS_CORETYPE"),
    ("Nehalem", "native", None),
    ("qemu64", "native", None),
)
"""The survey's runs: (CPU: this host or what ``qemu-x86_64 -cpu`` emulates, kernel variables, a variable left out).
Haswell-v4 is Intel with AVX2 and FMA (the portable baseline), Nehalem has neither (SSE4.2: x86-64-v2), qemu64 is
x86-64-v1."""


def survey() -> dict[str, Any]:
    """Run the battery in every configuration of :data:`CONFIGS`, each in its own process, and count each one's
    differing outputs per function against this host's portable run."""
    import tempfile
    import time

    sys.path.insert(0, str(REPO))
    from suite import kernels

    runs = []
    with tempfile.TemporaryDirectory(prefix="libm-battery-") as tmp:
        base: dict[str, np.ndarray] | None = None
        for cpu_name, mode, left_out in CONFIGS:
            env = {k: v for k, v in os.environ.items() if k not in kernels.environ("portable")}
            env.update({k: v for k, v in kernels.environ(mode).items() if k != left_out})
            dump = Path(tmp) / f"{cpu_name}-{mode}-{left_out}.npz"
            argv = [sys.executable, str(Path(__file__).resolve()), "--dump", str(dump)]
            if cpu_name != "host":
                argv = ["qemu-x86_64", "-cpu", cpu_name, *argv]
            started = time.monotonic()
            done = subprocess.run(argv, env=env, capture_output=True, text=True)
            row: dict[str, Any] = {"cpu": cpu_name if cpu_name != "host" else "this host", "emulated": cpu_name != "host",
                                   "kernels": mode, "left_out": left_out, "returncode": done.returncode,
                                   "seconds": round(time.monotonic() - started, 1)}  # fmt: skip
            if done.returncode == 0:
                outs = {k: v for k, v in np.load(dump).items()}
                if base is None:
                    base = outs
                diff = count(base, outs)
                row["functions_differing"] = sum(1 for v in diff.values() if v)
                row["outputs_differing"] = {k: v for k, v in diff.items() if v}
            else:
                row["error"] = "killed by SIGILL" if done.returncode in (-4, 132) else done.stderr.strip()[-300:]
            runs.append(row)
            print(json.dumps(row), flush=True)
    sys.path.insert(0, str(HERE))
    from portable_hashes import cpu

    return {
        "what": "differing outputs per function of the libm/numpy battery against this host's portable run (NaNs canonical)",
        "inputs_per_function": {k: int(v.size) for k, v in sorted(outputs().items())},
        "host_cpu": cpu(),
        "libc": libm(),
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "qemu": subprocess.run(["qemu-x86_64", "--version"], capture_output=True, text=True).stdout.splitlines()[0],
        "load": os.getloadavg()[0],
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python benchmarks/libm_battery.py --survey",
        "runs": runs,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"write {HASHES.relative_to(REPO)}")
    ap.add_argument("--check", action="store_true", help="compare with the committed hashes; print the JSON verdict")
    ap.add_argument("--dump", type=Path, help="save every output to this .npz")
    ap.add_argument("--count", nargs=2, type=Path, metavar=("A", "B"), help="differing outputs per function")
    ap.add_argument("--print", action="store_true", help="print this process's hashes as JSON")
    ap.add_argument("--survey", action="store_true", help=f"count differing outputs across CPUs/modes -> {SURVEY.name}")
    args = ap.parse_args()
    if args.survey:
        SURVEY.write_text(json.dumps(survey(), indent=1) + "\n")
        return 0
    if args.count:
        a, b = (dict(np.load(p)) for p in args.count)
        print(json.dumps(count(a, b)))
        return 0
    if (args.write or args.check) and not _portable():
        print("libm_battery: run it with the portable variables (suite.kernels.environ('portable'))", file=sys.stderr)
        return 2
    outs = outputs()
    if args.dump:
        np.savez(args.dump, **outs)
    made = hashes(outs)
    if args.print:
        print(json.dumps(made))
    if args.check:
        committed = json.loads(HASHES.read_text())["hashes"]
        differ = sorted(k for k in committed if made.get(k) != committed[k])
        print(json.dumps({"functions": len(committed), "differ": differ}))
        return 1 if differ else 0
    if args.write:
        sys.path.insert(0, str(HERE))
        from portable_hashes import cpu

        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        payload = {
            "kernels": "portable",
            "cpu": {k: v for k, v in cpu().items() if k != "native_capability"},  # torch is not in the battery
            "libc": libm(),
            "numpy": np.__version__,
            "python": sys.version.split()[0],
            "inputs_per_function": {k: int(v.size) for k, v in sorted(outs.items())},
            "commit": commit,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": "python benchmarks/libm_battery.py --write  (with the portable variables)",
            "hashes": made,
        }
        HASHES.write_text(json.dumps(payload, indent=1) + "\n")
        print(f"{len(made)} functions -> {HASHES}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
