"""Encoding a trial record into the database's rows and blobs, and decoding rows back into frames and records.

Pure functions of their arguments (no connection is opened here): everything a write needs is encoded before its
transaction starts, so a transaction only does I/O.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import sqlite3
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from suite.store.schema import F4, F8, I8, JSON_DEFAULTS, RECORD_FIELDS, REQUIRED, STATUSES, TRIAL_COLUMNS, UPDATE_BINS

if TYPE_CHECKING:  # pandas is imported where a frame is built: a trial process imports the store and never needs it
    import pandas as pd

U1 = np.dtype("u1")
ZLIB_LEVEL = 6
"""zlib's default: on shuffled float64 diagnostics level 9 is about 1% smaller and several times slower to write."""

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


# ---------------------------------------------------------------------- blobs

Layout = Sequence[tuple[np.dtype, int, bool]]
"""What a blob holds, in order: ``(dtype, number of elements, delta-coded)`` per array."""


def pack_arrays(arrays: Sequence[np.ndarray], layout: Layout) -> bytes:
    """Concatenate arrays into one zlib blob, losslessly.

    Each array is cast to its little-endian dtype; an array marked delta-coded (monotone integers: steps, update
    numbers) is stored as its differences (int64 arithmetic wraps, so decoding restores every value); every array's
    bytes are then shuffled (all first bytes, then all second bytes, ...), which puts the near-constant high bytes of
    numbers side by side, where zlib finds them. HDF5's and Blosc's shuffle filter, for the same reason.
    """
    parts: list[bytes] = []
    for array, (dtype, count, delta) in zip(arrays, layout, strict=True):
        flat = np.ascontiguousarray(array, dtype=dtype).reshape(-1)
        if flat.size != count:
            raise ValueError(f"blob layout wants {count} values, got {flat.size}")
        if delta and flat.size:
            flat = np.diff(flat, prepend=dtype.type(0))
        parts.append(flat.view(U1).reshape(-1, dtype.itemsize).T.tobytes())
    return zlib.compress(b"".join(parts), ZLIB_LEVEL)


def unpack_arrays(blob: bytes, layout: Layout) -> list[np.ndarray]:
    """The arrays :func:`pack_arrays` packed with the same ``layout`` (native byte order, 1-D)."""
    raw = zlib.decompress(blob)
    want = sum(dtype.itemsize * count for dtype, count, _ in layout)
    if len(raw) != want:
        raise ValueError(f"a series blob holds {len(raw)} bytes where its layout wants {want}")
    out: list[np.ndarray] = []
    offset = 0
    for dtype, count, delta in layout:
        size = dtype.itemsize * count
        shuffled = np.frombuffer(raw, dtype=U1, count=size, offset=offset).reshape(dtype.itemsize, count)
        array = np.ascontiguousarray(shuffled.T).view(dtype).reshape(-1).astype(dtype.newbyteorder("="))
        if delta:
            array = np.cumsum(array, dtype=array.dtype)
        out.append(array)
        offset += size
    return out


def curve_layout(n: int) -> Layout:
    return [(I8, n, True), (F8, n, False), (I8, n, False)]


def evals_layout(n: int) -> Layout:
    # idx, step, final, episode, return (NaN: none), length (NaN: unknown), wall_time_s (NaN: unknown)
    return [(I8, n, True), (I8, n, True), (U1, n, False), (I8, n, False), (F8, n, False), (F8, n, False), (F8, n, False)]


def updates_layout(n: int, n_metrics: int, binned: bool) -> Layout:
    if not binned:  # update, step, then the values column by column
        return [(I8, n, True), (I8, n, True), (F8, n * n_metrics, False)]
    # rows per bin; first and last update and step; then mean, min and max column by column
    return [(I8, n, False), (I8, n, True), (I8, n, True), (I8, n, True), (I8, n, True), *[(F4, n * n_metrics, False)] * 3]


# ---------------------------------------------------------------------- encoding series


def curve_row(step: np.ndarray, ret: np.ndarray, length: np.ndarray) -> tuple[int, bytes]:
    n = len(step)
    return n, pack_arrays([step, ret, length], curve_layout(n))


def encode_curve(curve: Mapping[str, Sequence[Any]] | None) -> tuple[int, bytes]:
    curve = curve or {}
    step = _as_array(curve.get("step"), I8, "curve['step']")
    ret = _as_array(curve.get("return"), F8, "curve['return']")
    length = _as_array(curve.get("length"), I8, "curve['length']")
    if not (step.ndim == ret.ndim == length.ndim == 1 and len(step) == len(ret) == len(length)):
        raise ValueError(
            f"curve step/return/length must be 1-D and equally long, got {step.shape}, {ret.shape}, {length.shape}"
        )
    return curve_row(step, ret, length)


def evals_row(columns: Sequence[np.ndarray]) -> tuple[int, bytes]:
    """``(n, blob)`` of eval episodes given as the columns idx, step, final, episode, return, length, wall_time_s."""
    n = len(columns[0])
    return n, pack_arrays(columns, evals_layout(n))


def encode_evals(evals: Sequence[Mapping[str, Any]] | None) -> tuple[int, bytes]:
    rows: list[tuple[float, ...]] = []
    for idx, ev in enumerate(evals or ()):
        returns = list(ev.get("returns") or ())
        lengths = list(ev.get("lengths") or ())
        if lengths and len(lengths) != len(returns):
            raise ValueError(f"evals[{idx}] has {len(returns)} returns but {len(lengths)} lengths")
        step, final = int(ev["step"]), bool(ev.get("final", False))
        wall = ev.get("wall_time_s")
        wall = math.nan if wall is None else float(wall)
        for episode, ret in enumerate(returns):
            length = lengths[episode] if lengths else None
            rows.append((idx, step, final, episode, _nan_if_none(ret), math.nan if length is None else int(length), wall))
    columns = list(zip(*rows, strict=True)) if rows else [()] * 7
    dtypes: tuple[np.dtype, ...] = (I8, I8, U1, I8, F8, F8, F8)
    return evals_row([np.asarray(c, dtype=d) for c, d in zip(columns, dtypes, strict=True)])


def _nan_if_none(value: Any) -> float:
    return math.nan if value is None else float(value)


@dataclass(frozen=True)
class UpdateRows:
    """A trial's update diagnostics as stored: one row per update, or one row per bin of consecutive updates.

    Shapes: ``(n,)`` for the integer columns and ``(n, num_metrics)`` for the statistics; for unbinned rows
    ``first`` equals ``last``, ``count`` is 1 and ``minimum``/``maximum`` equal ``mean``.
    """

    metrics: list[str]
    count: np.ndarray
    update_first: np.ndarray
    update_last: np.ndarray
    step_first: np.ndarray
    step_last: np.ndarray
    mean: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray
    resolution: str
    """One of :data:`~suite.store.schema.RESOLUTIONS`."""

    @property
    def binned(self) -> bool:
        return self.resolution == "binned"

    @property
    def n(self) -> int:
        return len(self.update_last)

    @property
    def n_updates(self) -> int:
        return int(self.count.sum())


def full_update_rows(
    metrics: list[str], update_no: np.ndarray, step: np.ndarray, values: np.ndarray, resolution: str = "every"
) -> UpdateRows:
    """Every update its own row (``values``: ``(n, num_metrics)`` float64)."""
    ones = np.ones(len(update_no), dtype=np.int64)
    return UpdateRows(metrics, ones, update_no, update_no, step, step, values, values, values, resolution)


def bin_update_rows(rows: UpdateRows, bins: int = UPDATE_BINS) -> UpdateRows:
    """``rows`` in at most ``bins`` rows: runs of consecutive updates of (nearly) equal length, each with the NaN-ignoring
    mean, minimum and maximum of every diagnostic (NaN where the run logged none) and its first and last update number
    and env step, exact. Rows already at most ``bins`` long are returned as they are (nothing is lost)."""
    n = rows.n
    if n <= bins:
        return rows
    starts = (np.arange(bins, dtype=np.int64) * n) // bins
    ends = np.append(starts[1:], n) - 1
    count = np.add.reduceat(rows.count, starts)
    missing = np.isnan(rows.mean)
    weights = rows.count[:, None] * ~missing
    sums = np.add.reduceat(np.where(missing, 0.0, rows.mean) * weights, starts, axis=0)
    seen = np.add.reduceat(weights, starts, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = sums / seen
    return UpdateRows(
        metrics=rows.metrics, count=count,
        update_first=rows.update_first[starts], update_last=rows.update_last[ends],
        step_first=rows.step_first[starts], step_last=rows.step_last[ends],
        mean=mean, minimum=np.fmin.reduceat(rows.minimum, starts, axis=0),
        maximum=np.fmax.reduceat(rows.maximum, starts, axis=0), resolution="binned",
    )  # fmt: skip


def updates_row(rows: UpdateRows) -> tuple[int, int, str, str, bytes]:
    """``(n, n_updates, resolution, metrics JSON, blob)`` of the ``updates`` table."""
    n, m = rows.n, len(rows.metrics)
    layout = updates_layout(n, m, rows.binned)
    if rows.binned:
        arrays = [rows.count, rows.update_first, rows.update_last, rows.step_first, rows.step_last,
                  rows.mean.T, rows.minimum.T, rows.maximum.T]  # fmt: skip
    else:
        arrays = [rows.update_last, rows.step_last, rows.mean.T]
    return n, rows.n_updates, rows.resolution, json.dumps(rows.metrics), pack_arrays(arrays, layout)


def decode_updates_row(n: int, resolution: str, metrics_json: str, blob: bytes) -> UpdateRows:
    metrics = json.loads(metrics_json)
    m = len(metrics)
    binned = resolution == "binned"
    arrays = unpack_arrays(blob, updates_layout(n, m, binned))
    if not binned:
        update_no, step, values = arrays
        return full_update_rows(metrics, update_no, step, values.reshape(m, n).T.astype(np.float64), resolution)
    count, u_first, u_last, s_first, s_last, mean, low, high = arrays
    mean, low, high = (a.reshape(m, n).T.astype(np.float64) for a in (mean, low, high))
    return UpdateRows(metrics, count, u_first, u_last, s_first, s_last, mean, low, high, resolution)


def parse_updates(updates: Sequence[Mapping[str, Any]] | None) -> UpdateRows:
    """A record's ``updates`` list as rows, one per update (metric columns in the order they were first logged)."""
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
    return full_update_rows(list(column), update_no, step, values)


def encode_updates(updates: Sequence[Mapping[str, Any]] | None, *, full: bool = False) -> tuple[int, int, str, str, bytes]:
    """The ``updates`` row of a record's update list: binned to :data:`UPDATE_BINS` rows unless ``full`` (then every
    row is kept, and marked so that ``suite migrate`` leaves it)."""
    rows = parse_updates(updates)
    if full:
        return updates_row(dataclasses.replace(rows, resolution="full"))
    return updates_row(bin_update_rows(rows))


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


def decode_evals(n: int, blob: bytes) -> list[np.ndarray]:
    """The eval columns idx, step, final, episode, return, length, wall_time_s of an ``evals`` row."""
    return unpack_arrays(blob, evals_layout(n))


def evals_to_records(conn: sqlite3.Connection, key: str) -> list[dict[str, Any]]:
    row = conn.execute("SELECT n, data FROM evals WHERE key = ?", (key,)).fetchone()
    if row is None:
        return []
    idxs, steps, finals, _, returns, lengths, walls = decode_evals(*row)
    evals: list[dict[str, Any]] = []
    last_idx = None
    for idx, step, final, ret, length, wall in zip(idxs, steps, finals, returns, lengths, walls, strict=True):
        if idx != last_idx:
            evals.append({"step": int(step), "final": bool(final), "returns": [], "lengths": []})
            if not math.isnan(wall):
                evals[-1]["wall_time_s"] = float(wall)
            last_idx = idx
        evals[-1]["returns"].append(float(ret))
        evals[-1]["lengths"].append(None if math.isnan(length) else int(length))
    return evals
