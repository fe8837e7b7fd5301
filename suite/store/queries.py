"""Reading a results database: trials, learning curves, evaluations and update metrics as pandas frames, and the
small questions the runner and ``suite status`` ask (which keys are recorded, which failures to retry)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from suite.store.connection import StoreConnection
from suite.store.records import as_list, concat, evals_to_records, key_filter, repeat_keys, trials_frame
from suite.store.schema import ENV_FAILURE_KINDS, F8, I8, TRIAL_COLUMNS

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
        rows = self._conn.execute(
            f"SELECT key, n, step_i8, return_f8, length_i8 FROM curves{where} ORDER BY key", params
        ).fetchall()
        counts = [row[1] for row in rows]
        return pd.DataFrame(
            {
                "key": repeat_keys([row[0] for row in rows], counts),
                "step": concat([row[2] for row in rows], I8),
                "return": concat([row[3] for row in rows], F8),
                "length": concat([row[4] for row in rows], I8),
            }
        )

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
        rows = self._conn.execute(
            f'SELECT key, step, final, episode, "return", length, wall_time_s FROM evals{where} ORDER BY key, idx, episode',
            params,
        ).fetchall()
        frame = pd.DataFrame.from_records(rows, columns=["key", "step", "final", "episode", "return", "length", "wall_time_s"])
        return frame.astype(
            {
                "key": object,
                "step": "int64",
                "final": bool,
                "episode": "int64",
                "return": "float64",
                "length": "float64",
                "wall_time_s": "float64",
            }
        )

    def updates(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Per-update training metrics, one row per gradient update phase.

        Args:
            keys: trial keys to load; None loads all.

        Returns:
            Columns ``key`` (str), ``update`` (int64), ``step`` (int64), then one float64 column per metric
            name seen in any loaded trial (first-seen order), NaN where a trial did not log that metric.
        """
        import pandas as pd

        where, params = key_filter(keys)
        rows = self._conn.execute(
            f"SELECT key, n, metrics, update_i8, step_i8, values_f8 FROM updates{where} ORDER BY key", params
        ).fetchall()
        counts = [row[1] for row in rows]
        total = sum(counts)
        columns: dict[str, np.ndarray] = {}
        offset = 0
        for _, n, metrics_json, _, _, values_blob in rows:
            metrics = json.loads(metrics_json)
            values = np.frombuffer(values_blob, dtype=F8).reshape(n, len(metrics))
            for j, name in enumerate(metrics):
                if name not in columns:
                    columns[name] = np.full(total, np.nan)
                columns[name][offset : offset + n] = values[:, j]
            offset += n
        return pd.DataFrame(
            {
                "key": repeat_keys([row[0] for row in rows], counts),
                "update": concat([row[3] for row in rows], I8),
                "step": concat([row[4] for row in rows], I8),
                **columns,
            }
        )

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
