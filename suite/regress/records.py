"""A slot's results database as one row per trial: what the comparison needs, and hashes of what must not move.

The row of a trial (the *runs* frame, also the format of the committed reference) holds its identity, status,
final evaluation return, AUC of the evaluation curve, training steps/s (on the wall clock, the CPU clock and the
unstarved wall clock), peak RSS, per-phase time and memory fields when the record has them, and two hashes:

``result_hash``
    SHA-256 of the canonical JSON of what training produced: status, steps, the learning curve, every
    evaluation episode (step, return, length) and the final evaluation. Clocks and memory are left out.
``param_hash``
    SHA-256 of the trained parameters in the saved policy (name, dtype, shape and bytes of every tensor, in
    name order): Tianshou's determinism check, which compares a hash of the trained network across branches.

Databases are read from a copy (SQLite's backup API on a read-only connection): opening an older revision's
database with this code would upgrade it in place, and that revision could then no longer resume it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from suite.stats.curves import area_under_curve
from suite.store import ResultsStore
from suite.store.models import find_model_file

TIME_PREFIX = "time:"
"""Column prefix of per-phase seconds (``time:update``)."""
MEM_PREFIX = "mem:"
"""Column prefix of per-phase memory fields (``mem:rollout:rss_peak_mb``)."""
CPU_SPEED = "cpu_steps_per_second"
"""Env steps over the CPU seconds of the training phases (records that have ``phases[...]["cpu_s"]``; else NaN)."""
UNSTARVED_SPEED = "unstarved_steps_per_second"
"""Env steps over the *unstarved wall clock* of the training phases: wall seconds minus the run-queue wait
(``phases[...]["wait_s"]``, :mod:`suite.schedstat`), the time the trial would have taken with a CPU to itself. Its
own sleeps and waits stay in, other processes' load is out. NaN for records without ``wait_s`` (older builds, or a
kernel that does not provide it)."""

BASE_COLUMNS: tuple[str, ...] = (
    "side", "repeat", "key", "algo", "algo_version", "env_id", "env_kwargs", "env_label", "seed", "budget", "threads",
    "config_hash", "status", "failure_kind", "error", "steps", "final_return", "auc", "steps_per_second",
    "cpu_steps_per_second", "unstarved_steps_per_second", "wall_time_s", "peak_rss_mb", "result_hash", "param_hash",
)  # fmt: skip
"""Columns every runs frame has, in order; per-phase columns follow."""

TEXT_COLUMNS: frozenset[str] = frozenset({
    "side", "key", "algo", "algo_version", "env_id", "env_kwargs", "env_label", "config_hash", "status", "failure_kind",
    "error", "result_hash", "param_hash", "kernels", "cpu",
})  # fmt: skip
"""Columns that hold text (a CSV reader must not turn version ``1.10`` or a hex hash of digits into a number)."""


def is_memory_field(name: str) -> bool:
    """Per-phase memory fields the gate compares: peaks in MB (``rss_peak_mb``, ``alloc_peak_over_entry_mb``...).

    Growth fields are left out: they can be near zero, where a ratio is noise."""
    return name.endswith("_mb") and "peak" in name


def copy_database(db: Path, dest: Path) -> None:
    """Copy a SQLite database (WAL included) without writing to it."""
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        out = sqlite3.connect(dest)
        try:
            src.backup(out)
        finally:
            out.close()
    finally:
        src.close()


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def result_hash(row: Mapping[str, Any], curve: pd.DataFrame, evals: pd.DataFrame) -> str:
    """Hash of a trial's deterministic outcome (see the module docstring)."""
    payload = {
        "status": row["status"],
        "steps": None if pd.isna(row["steps"]) else int(row["steps"]),
        "final": [None if pd.isna(row[c]) else float(row[c]) for c in ("final_eval_mean", "final_eval_std")],
        "curve": [curve[c].tolist() for c in ("step", "return", "length")],
        "evals": [evals[c].tolist() for c in ("step", "final", "episode", "return", "length")],
    }
    return hashlib.sha256(_canonical(payload)).hexdigest()


def _model_hash(models: Path | None, record: Mapping[str, Any]) -> str | None:
    """:func:`param_hash` of a trial's saved policy in ``models`` (named or an older ``<key>.pt``), if any."""
    found = find_model_file(models, record) if models is not None else None
    return param_hash(found) if found is not None else None


def param_hash(model: Path) -> str | None:
    """Hash of the trained parameters in a saved policy; None when there is no such file or it cannot be read."""
    import torch

    if not model.is_file():
        return None
    try:
        payload = torch.load(model, weights_only=True, map_location="cpu")
        state = payload["state_dict"]
    except Exception:  # noqa: BLE001  (an unreadable model is a missing hash, not a failed comparison)
        return None
    digest = hashlib.sha256()
    for name in sorted(state):
        value = state[name]
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous().reshape(-1)
            digest.update(f"{name}|{t.dtype}|{tuple(value.shape)}|".encode())
            digest.update(t.view(torch.uint8).numpy().tobytes())
        else:
            digest.update(f"{name}|{value!r}|".encode())
    return digest.hexdigest()


def eval_auc(evals: pd.DataFrame) -> float:
    """Average return under the evaluation curve (trapezoid over env steps / span; the value for one point)."""
    if evals.empty:
        return float("nan")
    means = evals.groupby("step", sort=True)["return"].mean()
    return area_under_curve(means.index.to_numpy(dtype=float), means.to_numpy(dtype=float))


def load_slot(db: Path, side: str, repeat: int) -> pd.DataFrame:
    """The runs frame of one slot's database (empty when it does not exist); models are read from ``models/``."""
    if not db.is_file():
        return pd.DataFrame(columns=list(BASE_COLUMNS))
    with tempfile.TemporaryDirectory(prefix="suite-regress-") as tmp:
        copy = Path(tmp) / "copy.db"
        copy_database(db, copy)
        with ResultsStore(copy, create=False) as store:
            trials = store.trials()
            curves = store.curves()
            evals = store.evals()
    return summarise(trials, curves, evals, side=side, repeat=repeat, models=db.parent / "models")


def summarise(
    trials: pd.DataFrame, curves: pd.DataFrame, evals: pd.DataFrame, *, side: str, repeat: int, models: Path | None
) -> pd.DataFrame:
    """One runs-frame row per trial of ``trials`` (as :meth:`ResultsStore.trials` returns them)."""
    curve_by_key = dict(tuple(curves.groupby("key", sort=False))) if not curves.empty else {}
    evals_by_key = dict(tuple(evals.groupby("key", sort=False))) if not evals.empty else {}
    empty_curve = pd.DataFrame({c: [] for c in ("step", "return", "length")})
    empty_evals = pd.DataFrame({c: [] for c in ("step", "final", "episode", "return", "length")})
    rows: list[dict[str, Any]] = []
    for rec in trials.to_dict("records"):
        key = rec["key"]
        ev = evals_by_key.get(key, empty_evals)
        row: dict[str, Any] = {
            "side": side,
            "repeat": repeat,
            "key": key,
            "algo": rec["algo"],
            "algo_version": rec["algo_version"],
            "env_id": rec["env_id"],
            "env_kwargs": json.dumps(rec.get("env_kwargs") or {}, sort_keys=True),
            "env_label": rec["env_label"],
            "seed": int(rec["seed"]),
            "budget": _int_or_none(rec.get("budget")),
            "threads": _int_or_none(rec.get("threads")),
            "config_hash": rec.get("config_hash"),
            "status": rec["status"],
            "failure_kind": rec.get("failure_kind"),
            "error": rec.get("error"),
            "steps": _int_or_none(rec.get("steps")),
            "final_return": _float(rec.get("final_eval_mean")),
            "auc": eval_auc(ev) if rec["status"] == "ok" else float("nan"),
            "steps_per_second": _float(rec.get("steps_per_second")),
            "cpu_steps_per_second": _cpu_speed(rec.get("steps"), rec.get("phases") or {}),
            "unstarved_steps_per_second": _unstarved_speed(rec.get("steps"), rec.get("phases") or {}),
            "wall_time_s": _float(rec.get("wall_time_s")),
            "peak_rss_mb": _float(rec.get("peak_rss_mb")),
            "result_hash": result_hash(rec, curve_by_key.get(key, empty_curve), ev),
            "param_hash": _model_hash(models, rec),
            "kernels": ((rec.get("provenance") or {}).get("kernels") or {}).get("mode", "native"),
            "cpu": (rec.get("provenance") or {}).get("cpu_model"),
        }
        for phase, fields in sorted((rec.get("phases") or {}).items()):
            if not isinstance(fields, Mapping):
                continue
            if isinstance(fields.get("time_s"), int | float):
                row[f"{TIME_PREFIX}{phase}"] = float(fields["time_s"])
            for name, value in sorted(fields.items()):
                if is_memory_field(name) and isinstance(value, int | float) and not isinstance(value, bool):
                    row[f"{MEM_PREFIX}{phase}:{name}"] = float(value)
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(BASE_COLUMNS) + sorted({k for r in rows for k in r} - set(BASE_COLUMNS)))
    return frame


def _training_phases(steps: Any, phases: Mapping[str, Any], *fields: str) -> list[Mapping[str, Any]] | None:
    """The training phases (every phase that ran but ``eval``) when each has every one of ``fields``; else None."""
    training = [f for name, f in phases.items() if name != "eval" and isinstance(f, Mapping) and f.get("calls", 1)]
    if steps is None or pd.isna(steps) or not training:
        return None
    if any(not isinstance(f.get(name), int | float) for f in training for name in fields):
        return None
    return training


def _cpu_speed(steps: Any, phases: Mapping[str, Any]) -> float:
    """Steps per CPU second of training (every phase but ``eval``), when every training phase recorded ``cpu_s``."""
    training = _training_phases(steps, phases, "cpu_s")
    cpu = sum(float(f["cpu_s"]) for f in training) if training else 0.0
    return float(steps) / cpu if cpu > 0 else float("nan")


def _unstarved_speed(steps: Any, phases: Mapping[str, Any]) -> float:
    """Steps per unstarved wall second of training (``time_s - wait_s`` summed over every phase but ``eval``), when
    every training phase recorded ``wait_s``."""
    training = _training_phases(steps, phases, "time_s", "wait_s")
    unstarved = sum(float(f["time_s"]) - float(f["wait_s"]) for f in training) if training else 0.0
    return float(steps) / unstarved if unstarved > 0 else float("nan")


def _int_or_none(value: Any) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _float(value: Any) -> float:
    return float("nan") if value is None or pd.isna(value) else float(value)


def phase_columns(frame: pd.DataFrame, prefix: str) -> list[str]:
    """The per-phase columns of a runs frame with this prefix, sorted."""
    return sorted(c for c in frame.columns if c.startswith(prefix))


def finite(values: Any) -> np.ndarray:
    """Finite entries of a column as float64."""
    arr = np.asarray(values, dtype=float)
    return arr[np.isfinite(arr)]
