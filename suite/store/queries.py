"""Reading a results database: trials, learning curves, evaluations and update metrics as pandas frames, and the
small questions the runner and ``suite status`` ask (which keys are recorded, which failures to retry)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from suite.store.connection import StoreConnection
from suite.store.records import (
    UpdateRows,
    as_list,
    curve_layout,
    decode_evals,
    decode_updates_row,
    evals_to_records,
    key_filter,
    repeat_keys,
    trials_frame,
    unpack_arrays,
)
from suite.store.schema import ENV_FAILURE_KINDS, TRIAL_COLUMNS

if TYPE_CHECKING:
    import pandas as pd


class StoreQueries(StoreConnection):
    """The read side of :class:`suite.store.ResultsStore`."""

    def finished_keys(self) -> set[str]:
        """Keys of all recorded trials, whatever their status (a resumed study skips these)."""
        return {row[0] for row in self._conn.execute("SELECT key FROM trials")}

    def studies(self) -> list[str]:
        """Names of the studies with trials in this database (recorded by them or needed by them), sorted."""
        rows = self._conn.execute(
            "SELECT study FROM study_trials UNION SELECT study FROM trials WHERE study IS NOT NULL ORDER BY 1"
        ).fetchall()
        return [row[0] for row in rows]

    def failed_trials(self, keys: Iterable[str], which: str = "env") -> dict[str, str]:
        """The recorded failures among ``keys`` that ``suite run --retry-failed`` would run again.

        Args:
            keys: trial keys to look at (e.g. a study's).
            which: ``"env"``: failed trials whose cause is the machine (``failure_kind`` in
                :data:`ENV_FAILURE_KINDS`, or a schema-1 record whose error says ``WorkerDied``); ``"all"``: every
                trial whose status is not ``ok`` (also the algorithm's own exceptions and divergences).

        Returns:
            ``{key: ended_at}`` of those records (``ended_at`` identifies the record, see :meth:`claim`).
        """
        if which not in ("env", "all"):
            raise ValueError(f"which must be 'env' or 'all', got {which!r}")
        if which == "all":
            condition = "status != 'ok'"
            params: list[Any] = []
        else:
            condition = (
                "status = 'failed' AND (failure_kind IN (SELECT value FROM json_each(?))"
                " OR (failure_kind IS NULL AND error LIKE 'WorkerDied%'))"
            )
            params = [json.dumps(list(ENV_FAILURE_KINDS))]
        rows = self._conn.execute(
            f"SELECT key, ended_at FROM trials WHERE {condition} AND key IN (SELECT value FROM json_each(?))",
            [*params, json.dumps(as_list(keys))],
        ).fetchall()
        return {key: ended_at or "" for key, ended_at in rows}

    def attempts(self, key: str) -> int:
        """How many times the recorded trial ``key`` was started (0 if not recorded; 1 for a schema-1 record)."""
        row = self._conn.execute("SELECT attempts FROM trials WHERE key = ?", (key,)).fetchone()
        if row is None:
            return 0
        return int(row[0]) if row[0] is not None else 1

    def speed_rows(self) -> pd.DataFrame:
        """The ok trials' timing, for :func:`suite.throughput.trial_times`: columns ``key``, ``algo``, ``env_id``,
        ``steps`` (int64), ``steps_per_second`` (over the training clock), ``wall_time_s`` (the whole trial's, start-up
        and evaluations included), ``warmup`` (int64: the config's ``learning_starts``, 0 without one)."""
        import pandas as pd

        rows = self._conn.execute(
            "SELECT key, algo, env_id, steps, steps_per_second, wall_time_s,"
            " COALESCE(CAST(json_extract(config, '$.learning_starts') AS INTEGER), 0) FROM trials"
            " WHERE status = 'ok' AND steps > 0 AND steps_per_second > 0 AND wall_time_s IS NOT NULL"
        ).fetchall()
        columns = ["key", "algo", "env_id", "steps", "steps_per_second", "wall_time_s", "warmup"]
        frame = pd.DataFrame.from_records(rows, columns=columns)
        return frame.astype({"key": object, "algo": object, "env_id": object, "steps": "int64",
                             "steps_per_second": "float64", "wall_time_s": "float64", "warmup": "int64"})  # fmt: skip

    def failure_summary(self) -> pd.DataFrame:
        """Trials that are not ``ok``, counted per (study, status, failure_kind), for ``suite status``.

        Returns:
            Columns ``study``, ``status``, ``failure_kind`` (None for schema-1 records), ``n`` (int64),
            ``retried`` (int64: how many of them took more than one attempt).
        """
        import pandas as pd

        rows = self._conn.execute(
            "SELECT study, status, failure_kind, COUNT(*), SUM(COALESCE(attempts, 1) > 1) FROM trials"
            " WHERE status != 'ok' GROUP BY study, status, failure_kind ORDER BY study, status, failure_kind"
        ).fetchall()
        frame = pd.DataFrame.from_records(rows, columns=["study", "status", "failure_kind", "n", "retried"])
        return frame.astype({"n": "int64", "retried": "int64"})

    def study_tiers(self, study: str) -> dict[str, str]:
        """``{trial key: tier}`` as recorded by :meth:`add_to_study` (keys without a recorded tier left out)."""
        rows = self._conn.execute(
            "SELECT key, tier FROM study_trials WHERE study = ? AND tier IS NOT NULL", (study,)
        ).fetchall()
        return dict(rows)

    def has_trial(self, key: str) -> bool:
        """Whether a trial with this key is recorded."""
        return self._conn.execute("SELECT 1 FROM trials WHERE key = ?", (key,)).fetchone() is not None

    def trials(
        self,
        *,
        study: str | None = None,
        algos: str | Iterable[str] | None = None,
        envs: str | Iterable[str] | None = None,
        status: str | Iterable[str] | None = None,
        keys: Iterable[str] | None = None,
    ) -> pd.DataFrame:
        """One row per trial, sorted by algo, env_label, seed, key. Filters combine with AND.

        Args:
            study: only trials of this study: run by it, or needed by it and found already recorded.
            algos: only these algorithm ids.
            envs: only these environments, matched against ``env_label`` or ``env_id``.
            status: only these statuses (``ok``, ``failed``, ``diverged``).
            keys: only these trial keys.

        Returns:
            Columns as in the trial record minus the series (``curve``, ``evals``, ``updates``).
            ``env_kwargs``, ``config`` and ``provenance`` hold parsed dicts; ``seed`` is int64; ``budget``,
            ``threads``, ``steps`` are nullable ``Int64``; timing, memory and eval columns are float64.
        """
        where: list[str] = []
        params: list[Any] = []
        if study is not None:
            where.append("(study = ? OR key IN (SELECT key FROM study_trials WHERE study = ?))")
            params.extend([study, study])
        for column, values in (("algo", algos), ("status", status), ("key", keys)):
            if values is not None:
                where.append(f"{column} IN (SELECT value FROM json_each(?))")
                params.append(json.dumps(as_list(values)))
        if envs is not None:
            where.append("(env_label IN (SELECT value FROM json_each(?)) OR env_id IN (SELECT value FROM json_each(?)))")
            params.extend([json.dumps(as_list(envs))] * 2)
        sql = f"SELECT {', '.join(TRIAL_COLUMNS)} FROM trials"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY algo, env_label, seed, key"
        rows = self._conn.execute(sql, params).fetchall()
        return trials_frame(rows)

    def curves(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Learning curves in long format: one row per finished training episode.

        Args:
            keys: trial keys to load; None loads all.

        Returns:
            Columns ``key`` (str), ``step`` (int64, global env step at the episode's end), ``return`` (float64),
            ``length`` (int64); trials in key order, episodes in recorded order.
        """
        import pandas as pd

        where, params = key_filter(keys)
        rows = self._conn.execute(f"SELECT key, n, data FROM curves{where} ORDER BY key", params).fetchall()
        columns = [unpack_arrays(blob, curve_layout(n)) for _, n, blob in rows]
        return pd.DataFrame(
            {
                "key": repeat_keys([row[0] for row in rows], [row[1] for row in rows]),
                **{name: _concat([c[j] for c in columns], dtype) for j, (name, dtype) in
                   enumerate((("step", np.int64), ("return", np.float64), ("length", np.int64)))},
            }
        )  # fmt: skip

    def evals(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Evaluation episodes in long format.

        Args:
            keys: trial keys to load; None loads all.

        Returns:
            Columns ``key`` (str), ``step`` (int64), ``final`` (bool, the end-of-training evaluation),
            ``episode`` (int64, 0-based within its evaluation), ``return`` (float64), ``length`` (float64, NaN
            where unknown), ``wall_time_s`` (float64: training time, rollout + update, elapsed when the evaluation
            ran; NaN where unknown); trials in key order, evaluations in recorded order.
        """
        import pandas as pd

        where, params = key_filter(keys)
        rows = self._conn.execute(f"SELECT key, n, data FROM evals{where} ORDER BY key", params).fetchall()
        columns = [decode_evals(n, blob) for _, n, blob in rows]
        names = (("step", np.int64, 1), ("final", bool, 2), ("episode", np.int64, 3), ("return", np.float64, 4),
                 ("length", np.float64, 5), ("wall_time_s", np.float64, 6))  # fmt: skip
        return pd.DataFrame(
            {
                "key": repeat_keys([row[0] for row in rows], [row[1] for row in rows]),
                **{name: _concat([c[j] for c in columns], dtype) for name, dtype, j in names},
            }
        )

    def _update_rows(self, keys: Iterable[str] | None) -> list[tuple[str, UpdateRows]]:
        where, params = key_filter(keys)
        rows = self._conn.execute(f"SELECT key, n, resolution, metrics, data FROM updates{where} ORDER BY key", params)
        return [(key, decode_updates_row(*row)) for key, *row in rows]

    def updates(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Per-update training metrics: one row per update, or per bin of consecutive updates where the trial's
        diagnostics were binned (see :data:`suite.store.schema.UPDATE_BINS`).

        A bin's row carries its last update number and env step and the mean of each diagnostic over its updates;
        :meth:`update_bins` adds the bin's first update and step, its size, and each diagnostic's minimum and maximum.

        Args:
            keys: trial keys to load; None loads all.

        Returns:
            Columns ``key`` (str), ``update`` (int64), ``step`` (int64), then one float64 column per metric
            name seen in any loaded trial (first-seen order), NaN where a trial did not log that metric.
        """
        import pandas as pd

        loaded = self._update_rows(keys)
        frame = pd.DataFrame(
            {
                "key": repeat_keys([key for key, _ in loaded], [rows.n for _, rows in loaded]),
                "update": _concat([rows.update_last for _, rows in loaded], np.int64),
                "step": _concat([rows.step_last for _, rows in loaded], np.int64),
            }
        )
        return frame.assign(**_metric_columns(loaded, "mean", ""))

    def update_bins(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Per-update training metrics with each row's extent and spread: what :meth:`updates` gives, in full.

        Args:
            keys: trial keys to load; None loads all.

        Returns:
            Columns ``key`` (str), ``update_first``, ``update_last``, ``step_first``, ``step_last``, ``bin_size``
            (int64: the updates the row stands for, 1 where every update has its own row), then per metric
            ``<name>`` (the mean over the row's updates), ``<name>_min`` and ``<name>_max`` (float64; NaN where a
            trial did not log that metric).
        """
        import pandas as pd

        loaded = self._update_rows(keys)
        ints = {
            name: _concat([getattr(rows, attr) for _, rows in loaded], np.int64)
            for name, attr in (("update_first", "update_first"), ("update_last", "update_last"),
                               ("step_first", "step_first"), ("step_last", "step_last"), ("bin_size", "count"))
        }  # fmt: skip
        frame = pd.DataFrame({"key": repeat_keys([key for key, _ in loaded], [rows.n for _, rows in loaded]), **ints})
        means, lows, highs = (_metric_columns(loaded, stat, suffix)
                              for stat, suffix in (("mean", ""), ("minimum", "_min"), ("maximum", "_max")))  # fmt: skip
        stats = {}
        for metric in _metric_names(loaded):
            low, high = f"{metric}_min", f"{metric}_max"
            stats.update({metric: means[metric], low: lows[low], high: highs[high]})
        return frame.assign(**stats)

    def get_trial(self, key: str) -> dict[str, Any] | None:
        """The full record of one trial, in the shape :meth:`save_trial` accepted, or None if absent.

        Scalars come back as Python ``int``/``float``/``str``/``None``; series as lists.
        """
        import pandas as pd

        frame = self.trials(keys=[key])
        if frame.empty:
            return None
        record: dict[str, Any] = {}
        for name, kind in TRIAL_COLUMNS.items():
            value = frame.iloc[0][name]
            if kind in ("int", "real"):
                value = None if pd.isna(value) else (int(value) if kind == "int" else float(value))
            record[name] = value
        # A binned trial's updates read back as one entry per bin (its last update and step, each diagnostic's mean).
        curve = self.curves([key])
        record["curve"] = {name: curve[name].tolist() for name in ("step", "return", "length")}
        record["evals"] = evals_to_records(self._conn, key)
        updates = self.updates([key])
        metric_names = [c for c in updates.columns if c not in ("key", "update", "step")]
        record["updates"] = [
            {"update": int(u), "step": int(s), **{m: float(v) for m, v in zip(metric_names, vals, strict=True)}}
            for u, s, *vals in updates[["update", "step", *metric_names]].itertuples(index=False, name=None)
        ]
        return record

    def summary(self) -> pd.DataFrame:
        """Trial counts per (study, algo, env_label, status), for ``suite status``.

        Returns:
            Columns ``study`` (None for ad-hoc trials), ``algo``, ``env_label``, ``status``, ``n`` (int64).
        """
        import pandas as pd

        rows = self._conn.execute(
            "SELECT study, algo, env_label, status, COUNT(*) FROM trials"
            " GROUP BY study, algo, env_label, status ORDER BY study, algo, env_label, status"
        ).fetchall()
        frame = pd.DataFrame.from_records(rows, columns=["study", "algo", "env_label", "status", "n"])
        return frame.astype({"n": "int64"})


def _concat(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.array([], dtype=dtype)


def _metric_names(loaded: list[tuple[str, UpdateRows]]) -> list[str]:
    names: dict[str, None] = {}
    for _, rows in loaded:
        names.update(dict.fromkeys(rows.metrics))
    return list(names)


def _metric_columns(loaded: list[tuple[str, UpdateRows]], stat: str, suffix: str) -> dict[str, np.ndarray]:
    """One float64 column ``<metric><suffix>`` per metric of the ``stat`` matrices, NaN where a trial lacks it."""
    total = sum(rows.n for _, rows in loaded)
    columns = {name + suffix: np.full(total, np.nan) for name in _metric_names(loaded)}
    offset = 0
    for _, rows in loaded:
        values = getattr(rows, stat)
        for j, name in enumerate(rows.metrics):
            if name + suffix in columns:
                columns[name + suffix][offset : offset + rows.n] = values[:, j]
        offset += rows.n
    return columns
