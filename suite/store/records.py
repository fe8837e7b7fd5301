"""Encoding a trial record into the database's rows and blobs, and decoding rows back into frames and records.

Pure functions of their arguments (no connection is opened here): everything a write needs is encoded before its
transaction starts, so a transaction only does I/O.
"""

from __future__ import annotations

import copy
import json
import math
import os
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from suite.store.schema import F8, I8, JSON_DEFAULTS, RECORD_FIELDS, REQUIRED, STATUSES, TRIAL_COLUMNS

if TYPE_CHECKING:  # pandas is imported where a frame is built: a trial process imports the store and never needs it
    import pandas as pd

INSERT_TRIAL = f"INSERT INTO trials ({', '.join(TRIAL_COLUMNS)}) VALUES ({', '.join('?' for _ in TRIAL_COLUMNS)})"


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dump_json(value: Any) -> str:
    # sort_keys: the same config always gives the same text, so exports diff cleanly.
    return json.dumps(value, sort_keys=True, default=_json_default)


def encode_trial(record: Mapping[str, Any]) -> tuple[Any, ...]:
    unknown = set(record) - RECORD_FIELDS
    if unknown:
        raise ValueError(f"trial record has unknown fields {sorted(unknown)}; the store knows {sorted(RECORD_FIELDS)}")
    missing = [name for name in sorted(REQUIRED) if record.get(name) is None]
    if missing:
        raise ValueError(f"trial record lacks required fields {missing}")
    if record["status"] not in STATUSES:
        raise ValueError(f"trial status {record['status']!r} is not one of {STATUSES}")
    row: list[Any] = []
    for name, kind in TRIAL_COLUMNS.items():
        value = record.get(name)
        if isinstance(value, np.generic):
            value = value.item()
        if kind == "json":
            value = dump_json(JSON_DEFAULTS[name] if value is None else value)
        elif value is not None and kind == "int":
            value = int(value)
        elif value is not None and kind == "real":
            value = float(value)
        elif value is not None and kind == "text" and not isinstance(value, str):
            value = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
        row.append(value)
    return tuple(row)


def _as_array(values: Any, dtype: np.dtype, what: str) -> np.ndarray:
    try:
        return np.asarray([] if values is None else values, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be a sequence of numbers: {exc}") from exc


def encode_curve(curve: Mapping[str, Sequence[Any]] | None) -> tuple[int, bytes, bytes, bytes]:
    curve = curve or {}
    step = _as_array(curve.get("step"), I8, "curve['step']")
    ret = _as_array(curve.get("return"), F8, "curve['return']")
    length = _as_array(curve.get("length"), I8, "curve['length']")
    if not (step.ndim == ret.ndim == length.ndim == 1 and len(step) == len(ret) == len(length)):
        raise ValueError(
            f"curve step/return/length must be 1-D and equally long, got {step.shape}, {ret.shape}, {length.shape}"
        )
    return len(step), step.tobytes(), ret.tobytes(), length.tobytes()


def encode_evals(key: str, evals: Sequence[Mapping[str, Any]] | None) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for idx, ev in enumerate(evals or ()):
        returns = list(ev.get("returns") or ())
        lengths = list(ev.get("lengths") or ())
        if lengths and len(lengths) != len(returns):
            raise ValueError(f"evals[{idx}] has {len(returns)} returns but {len(lengths)} lengths")
        step, final = int(ev["step"]), bool(ev.get("final", False))
        wall = ev.get("wall_time_s")
        wall = None if wall is None else float(wall)
        for episode, ret in enumerate(returns):
            length = lengths[episode] if lengths else None
            rows.append((key, idx, step, final, episode, float(ret), None if length is None else int(length), wall))
    return rows


def encode_updates(updates: Sequence[Mapping[str, Any]] | None) -> tuple[int, str, bytes, bytes, bytes]:
    updates = list(updates or ())
    names: dict[str, None] = {}  # an ordered set: metric columns keep the order the algorithm logs them in
    for entry in updates:
        for name in entry:
            if name not in ("update", "step"):
                names.setdefault(name)
    column = {name: j for j, name in enumerate(names)}
    n = len(updates)
    update_no = np.empty(n, dtype=I8)
    step = np.empty(n, dtype=I8)
    values = np.full((n, len(column)), np.nan, dtype=F8)
    for i, entry in enumerate(updates):
        try:
            update_no[i] = int(entry["update"])
            step[i] = int(entry["step"])
        except KeyError as exc:
            raise ValueError(f"updates[{i}] lacks {exc.args[0]!r}") from exc
        for name, value in entry.items():
            j = column.get(name)
            if j is not None and value is not None:
                try:
                    values[i, j] = float(value)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"updates[{i}][{name!r}] = {value!r} is not a number") from exc
    return n, json.dumps(list(column)), update_no.tobytes(), step.tobytes(), values.tobytes()


# ---------------------------------------------------------------------- decoding helpers


def as_list(values: str | Iterable[str]) -> list[str]:
    return [values] if isinstance(values, str) else list(values)


def key_filter(keys: Iterable[str] | None) -> tuple[str, list[Any]]:
    # One JSON parameter instead of one "?" per key: no SQLite variable limit, however many keys a report asks for.
    if keys is None:
        return "", []
    return " WHERE key IN (SELECT value FROM json_each(?))", [json.dumps(as_list(keys))]


def repeat_keys(keys: list[str], counts: list[int]) -> np.ndarray:
    return np.repeat(np.array(keys, dtype=object), counts) if keys else np.array([], dtype=object)


def concat(blobs: list[bytes], dtype: np.dtype) -> np.ndarray:
    # Native byte order for the DataFrame; the stored blobs are little-endian whatever the machine.
    native = dtype.newbyteorder("=")
    if not blobs:
        return np.array([], dtype=native)
    return np.concatenate([np.frombuffer(blob, dtype=dtype) for blob in blobs]).astype(native, copy=False)


def trials_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame.from_records(rows, columns=list(TRIAL_COLUMNS))
    dtypes: dict[str, Any] = {}
    for name, kind in TRIAL_COLUMNS.items():
        if kind == "json":
            default = JSON_DEFAULTS.get(name)
            frame[name] = [json.loads(text) if text is not None else copy.deepcopy(default) for text in frame[name]]
        elif kind == "real":
            dtypes[name] = "float64"
        elif kind == "int":
            dtypes[name] = "int64" if name in REQUIRED else "Int64"
        else:
            dtypes[name] = object
    return frame.astype(dtypes)


def evals_to_records(conn: sqlite3.Connection, key: str) -> list[dict[str, Any]]:
    evals: list[dict[str, Any]] = []
    last_idx = None
    for idx, step, final, ret, length, wall in conn.execute(
        'SELECT idx, step, final, "return", length, wall_time_s FROM evals WHERE key = ? ORDER BY idx, episode', (key,)
    ):
        if idx != last_idx:
            evals.append({"step": step, "final": bool(final), "returns": [], "lengths": []})
            if wall is not None:
                evals[-1]["wall_time_s"] = wall
            last_idx = idx
        evals[-1]["returns"].append(math.nan if ret is None else ret)
        evals[-1]["lengths"].append(length)
    return evals
