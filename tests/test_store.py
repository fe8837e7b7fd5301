"""Tests for suite.store: round trips, replacement, multi-process writers, crash safety, refusal of foreign files."""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from suite.errors import UserError
from suite.provenance import collect_provenance, utc_now_iso
from suite.store import APPLICATION_ID, SCHEMA_VERSION, ResultsStore, default_db_path

# Spawned children re-import this module, so everything they run lives at module level.
_SPAWN = mp.get_context("spawn")


def make_record(i: int, *, n_episodes: int = 50, n_updates: int = 20, n_evals: int = 3, **overrides: Any) -> dict:
    """A synthetic trial record shaped like the trial runner's; trial ``i`` has ``n_episodes + i`` episodes."""
    rng = np.random.default_rng(i)
    n_ep = n_episodes + i
    steps = np.cumsum(rng.integers(10, 200, n_ep))
    record = {
        "key": f"{i:064x}",
        "study": "quick",
        "algo": "ppo" if i % 2 == 0 else "a2c",
        "algo_version": "1.0.0",
        "env_id": "CartPole-v1",
        "env_kwargs": {},
        "env_label": "CartPole-v1",
        "seed": i,
        "budget": 100_000,
        "threads": 1,
        "n_eval_episodes": 10,
        "eval_freq": 10_000,
        "format": 2,
        "suite_version": "0.1.0",
        "attempts": 1,
        "failure_kind": None,
        "phases": {"rollout": {"time_s": 5.1, "calls": 20}, "update": {"time_s": 14.0, "calls": 20}},
        "metrics": {"sample_diversity": 0.5},
        "baseline_rss_mb": 300.5,
        "config": {"learning_rate": 3e-4, "n_steps": 128, "policy": {"net_arch": [64, 64]}},
        "config_hash": "c0ffee",
        "status": "ok",
        "error": None,
        "traceback": None,
        "steps": int(steps[-1]),
        "wall_time_s": 21.3,
        "rollout_time_s": 5.1,
        "update_time_s": 14.0,
        "eval_time_s": 2.0,
        "steps_per_second": 4711.0,
        "peak_rss_mb": 512.3,
        "final_eval_mean": 500.0,
        "final_eval_std": 0.0,
        "provenance": {"suite_version": "0.1.0", "packages": {"torch": "2.13.0", "mujoco": None}},
        "started_at": "2025-01-01T00:00:00.000000+00:00",
        "ended_at": "2025-01-01T00:00:21.300000+00:00",
        "model_path": None,
        "curve": {
            "step": steps.tolist(),
            "return": rng.normal(100, 20, n_ep).tolist(),
            "length": rng.integers(1, 500, n_ep).tolist(),
        },
        "evals": [
            {
                "step": 1000 * (k + 1),
                "final": k == n_evals - 1,
                "returns": rng.normal(100, 5, 10).tolist(),
                "lengths": rng.integers(1, 500, 10).tolist(),
                "wall_time_s": 1.5 * (k + 1),
            }
            for k in range(n_evals)
        ],
        "updates": [
            {"update": u + 1, "step": 256 * (u + 1), "policy_loss": float(rng.normal()), "entropy": 0.69 - u * 1e-3}
            for u in range(n_updates)
        ],
    }
    record.update(overrides)
    return record


def assert_records_equal(got: dict, want: dict) -> None:
    """Field-by-field equality where NaN equals NaN."""
    assert set(got) == set(want)

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        return a == b and type(a) is type(b)

    for name in want:
        assert same(got[name], want[name]), f"{name}: {got[name]!r} != {want[name]!r}"


def _count_rows(db: Path, key: str) -> tuple[int, int, int]:
    with ResultsStore(db) as store:
        return len(store.curves([key])), len(store.evals([key])), len(store.updates([key]))


# ---------------------------------------------------------------------- round trip and replacement


def test_round_trip_keeps_every_field_including_nan_in_updates(tmp_path: Path) -> None:
    record = make_record(3, provenance=collect_provenance(threads=1), started_at=utc_now_iso())
    record["updates"][1]["approx_kl"] = math.nan
    record["updates"][2]["clip_fraction"] = math.inf
    # Runner output may hold numpy scalars and arrays; they are stored as plain numbers.
    record["seed"] = np.int64(3)
    record["final_eval_mean"] = np.float32(499.5)
    record["curve"]["return"] = np.asarray(record["curve"]["return"])

    with ResultsStore(tmp_path / "r.db") as store:
        store.save_trial(record)
        got = store.get_trial(record["key"])

    want = {**record, "seed": 3, "final_eval_mean": 499.5, "curve": {**record["curve"]}}
    want["curve"]["return"] = record["curve"]["return"].tolist()
    # Metrics absent from an update read back as NaN (updates are stored as a dense matrix).
    names = ["policy_loss", "entropy", "approx_kl", "clip_fraction"]
    want["updates"] = [
        {"update": u["update"], "step": u["step"], **{m: u.get(m, math.nan) for m in names}} for u in record["updates"]
    ]
    assert_records_equal(got, want)
    assert math.isnan(got["updates"][1]["approx_kl"])
    assert got["updates"][2]["clip_fraction"] == math.inf


def test_loaders_return_documented_columns_and_counts(tmp_path: Path) -> None:
    records = [make_record(i) for i in range(4)]
    records[1]["updates"][0]["grad_norm"] = 1.5  # a metric only one trial logs
    with ResultsStore(tmp_path / "r.db") as store:
        for record in records:
            store.save_trial(record)
        trials = store.trials()
        curves = store.curves()
        evals = store.evals()
        updates = store.updates()
        two = [records[0]["key"], records[3]["key"]]
        curves_two = store.curves(two)

    assert len(trials) == 4
    assert trials["config"].iloc[0] == records[0]["config"]  # JSON columns come back as dicts
    assert trials["seed"].dtype == np.int64
    assert list(curves.columns) == ["key", "step", "return", "length"]
    assert len(curves) == sum(50 + i for i in range(4))
    assert curves.groupby("key").size().to_dict() == {r["key"]: 50 + i for i, r in enumerate(records)}
    np.testing.assert_array_equal(curves_two["step"], records[0]["curve"]["step"] + records[3]["curve"]["step"])
    assert list(evals.columns) == ["key", "step", "final", "episode", "return", "length", "wall_time_s"]
    assert len(evals) == 4 * 3 * 10
    assert evals["final"].sum() == 4 * 10
    assert evals["episode"].max() == 9
    assert list(updates.columns) == ["key", "update", "step", "policy_loss", "entropy", "grad_norm"]
    assert len(updates) == 4 * 20
    assert updates["grad_norm"].notna().sum() == 1


def test_failed_trial_without_series_round_trips(tmp_path: Path) -> None:
    record = make_record(0, status="failed", error="RuntimeError: boom", traceback="Traceback ...")
    for name in ("curve", "evals", "updates", "final_eval_mean", "final_eval_std"):
        del record[name]
    with ResultsStore(tmp_path / "r.db") as store:
        store.save_trial(record)
        got = store.get_trial(record["key"])
        assert len(store.curves()) == len(store.evals()) == len(store.updates()) == 0
    assert got["status"] == "failed" and got["error"] == "RuntimeError: boom"
    assert got["final_eval_mean"] is None
    assert got["curve"] == {"step": [], "return": [], "length": []}
    assert got["evals"] == [] and got["updates"] == []


def test_save_twice_with_same_key_replaces_the_trial_and_its_series(tmp_path: Path) -> None:
    failed = make_record(0, status="failed", error="boom", n_episodes=30, n_evals=2)
    retried = make_record(0, n_episodes=80, n_evals=4)
    with ResultsStore(tmp_path / "r.db") as store:
        store.save_trial(failed)
        store.save_trial(retried)
        assert store.finished_keys() == {retried["key"]}
        trials = store.trials()
        assert len(trials) == 1 and trials["status"].iloc[0] == "ok"
        assert len(store.curves()) == 80
        assert len(store.evals()) == 40
        assert len(store.updates()) == 20


def test_filters_and_summary(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.db") as store:
        for i in range(6):
            store.save_trial(make_record(i, n_episodes=5, status="diverged" if i == 5 else "ok"))
        store.save_trial(make_record(6, n_episodes=5, study=None, env_id="Acrobot-v1", env_label="Acrobot-v1"))
        assert store.has_trial(f"{6:064x}") and not store.has_trial("nope")
        assert len(store.trials(study="quick")) == 6
        assert len(store.trials(algos="ppo")) == 4
        assert len(store.trials(algos=["ppo", "a2c"], status="ok")) == 6
        assert list(store.trials(envs=["Acrobot-v1"])["seed"]) == [6]
        assert list(store.trials(status=["diverged"])["seed"]) == [5]
        summary = store.summary()

    assert list(summary.columns) == ["study", "algo", "env_label", "status", "n"]
    counts = {tuple(row[:4]): row[4] for row in summary.itertuples(index=False)}
    assert counts == {
        (None, "ppo", "Acrobot-v1", "ok"): 1,
        ("quick", "a2c", "CartPole-v1", "diverged"): 1,
        ("quick", "a2c", "CartPole-v1", "ok"): 2,
        ("quick", "ppo", "CartPole-v1", "ok"): 3,
    }


def test_malformed_records_are_rejected_before_writing(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.db") as store:
        with pytest.raises(ValueError, match="unknown fields"):
            store.save_trial(make_record(0, surprise=1))
        with pytest.raises(ValueError, match="status"):
            store.save_trial(make_record(0, status="done"))
        with pytest.raises(ValueError, match="equally long"):
            store.save_trial(make_record(0, curve={"step": [1, 2], "return": [1.0], "length": [1, 1]}))
        bad = make_record(0)
        bad["updates"][0]["policy_loss"] = "high"
        with pytest.raises(ValueError, match="policy_loss"):
            store.save_trial(bad)
        assert store.finished_keys() == set()


def test_error_inside_the_transaction_rolls_the_whole_trial_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with ResultsStore(tmp_path / "r.db") as store:
        store.save_trial(make_record(0))

        def fail(*args: object) -> None:
            raise OSError("disk full")

        monkeypatch.setattr(ResultsStore, "_write_series", fail)
        with pytest.raises(OSError, match="disk full"):
            store.save_trial(make_record(1))
        # A failed replacement keeps the old trial intact.
        with pytest.raises(OSError, match="disk full"):
            store.save_trial(make_record(0, status="failed"))
        assert store.finished_keys() == {f"{0:064x}"}
        assert store.trials()["status"].tolist() == ["ok"]
        assert len(store.curves()) == 50


# ---------------------------------------------------------------------- processes and crashes


def _write_trials(db: str, first: int, count: int) -> None:
    with ResultsStore(db) as store:
        for i in range(first, first + count):
            store.save_trial(make_record(i, n_episodes=200))


def test_two_writer_processes_both_land(tmp_path: Path) -> None:
    db = tmp_path / "new" / "r.db"  # neither process finds the file: both race to create it
    workers = [_SPAWN.Process(target=_write_trials, args=(str(db), first, 15)) for first in (0, 100)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    with ResultsStore(db) as store:
        assert store.finished_keys() == {f"{i:064x}" for i in [*range(15), *range(100, 115)]}
        assert store.curves().groupby("key").size().sum() == sum(200 + i for i in [*range(15), *range(100, 115)])


def _write_then_die_mid_trial(db: str, die_at: int) -> None:
    """Save trials 0.. and SIGKILL this process after trial ``die_at``'s row is written but before its series."""
    original = ResultsStore._write_series

    def dying(self: ResultsStore, conn: sqlite3.Connection, curve_row: tuple, *rest: Any) -> None:
        if curve_row[0] == f"{die_at:064x}":
            conn.execute("INSERT INTO curves VALUES (?, ?, ?)", curve_row)  # half of the series
            os.kill(os.getpid(), signal.SIGKILL)
        original(self, conn, curve_row, *rest)

    ResultsStore._write_series = dying  # type: ignore[method-assign]
    _write_trials(db, 0, die_at + 10)


def _write_forever(db: str) -> None:
    _write_trials(db, 0, 10_000)


def _assert_only_complete_trials(db: Path) -> set[str]:
    with ResultsStore(db) as store:
        keys = store.finished_keys()
        curves = store.curves().groupby("key").size().to_dict()
        evals = store.evals().groupby("key").size().to_dict()
        updates = store.updates().groupby("key").size().to_dict()
    for key in keys:
        i = int(key, 16)
        assert curves.get(key) == 200 + i, key
        assert evals.get(key) == 30, key
        assert updates.get(key) == 20, key
    assert set(curves) <= keys and set(evals) <= keys and set(updates) <= keys  # no orphaned series
    return keys


def test_sigkill_inside_a_transaction_loses_only_the_unfinished_trial(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    worker = _SPAWN.Process(target=_write_then_die_mid_trial, args=(str(db), 5))
    worker.start()
    worker.join(timeout=60)
    assert worker.exitcode == -signal.SIGKILL
    assert _assert_only_complete_trials(db) == {f"{i:064x}" for i in range(5)}


def test_sigkill_at_a_random_moment_leaves_only_complete_trials(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    worker = _SPAWN.Process(target=_write_forever, args=(str(db),))
    worker.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until some trials are committed, then kill mid-stream
        if db.exists():
            try:
                with ResultsStore(db, create=False) as store:
                    if len(store.finished_keys()) >= 20:
                        break
            except UserError:
                pass  # caught the file between creation and schema commit
        time.sleep(0.02)
    worker.kill()
    worker.join(timeout=10)
    keys = _assert_only_complete_trials(db)
    assert len(keys) >= 20
    # Committed trials are numbered consecutively: none was lost before the last one that landed.
    assert keys == {f"{i:064x}" for i in range(len(keys))}


# ---------------------------------------------------------------------- foreign files and paths


def test_random_bytes_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    junk = np.random.default_rng(0).bytes(4096)
    path.write_bytes(junk)
    with pytest.raises(UserError, match=r"is not a rl-suite results database"):
        ResultsStore(path)
    assert path.read_bytes() == junk


def test_foreign_sqlite_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER)")
    before = path.read_bytes()
    with pytest.raises(UserError, match=r"other\.db is not a rl-suite results database .*customers"):
        ResultsStore(path)
    assert path.read_bytes() == before  # in particular, not switched to WAL


def test_sqlite_database_with_another_application_id_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA application_id = 42")
    with pytest.raises(UserError, match="application_id 0x2a"):
        ResultsStore(path)


def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    ResultsStore(path).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(UserError, match=f"newer rl-suite \\(schema version {SCHEMA_VERSION + 1}"):
        ResultsStore(path)


def test_missing_file_with_create_false_and_directory_path_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no results database at"):
        ResultsStore(tmp_path / "absent.db", create=False)
    assert not (tmp_path / "absent.db").exists()
    with pytest.raises(UserError, match="not a file"):
        ResultsStore(tmp_path)


def test_creates_parent_directories_and_reopens(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "r.db"
    with ResultsStore(path) as store:
        store.save_trial(make_record(0))
    with ResultsStore(path, create=False) as store:
        assert store.path == path
        assert len(store.finished_keys()) == 1


def test_db_path_precedence_explicit_then_env_then_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SUITE_DB", raising=False)
    assert default_db_path() == Path("results/suite.db")
    monkeypatch.setenv("SUITE_DB", "")
    assert default_db_path() == Path("results/suite.db")
    monkeypatch.setenv("SUITE_DB", str(tmp_path / "env.db"))
    assert default_db_path() == tmp_path / "env.db"
    assert default_db_path(tmp_path / "explicit.db") == tmp_path / "explicit.db"

    with ResultsStore() as store:
        assert store.path == tmp_path / "env.db"
    monkeypatch.delenv("SUITE_DB")
    with ResultsStore() as store:
        store.save_trial(make_record(0))
    assert (tmp_path / "results" / "suite.db").is_file()


# ---------------------------------------------------------------------- export


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_export_reads_back_equal(tmp_path: Path, suffix: str) -> None:
    def read(path: Path) -> pd.DataFrame:
        # Keys are hex strings; without dtype, read_csv would parse an all-digit key as a number.
        return pd.read_csv(path, dtype={"key": str}) if suffix == ".csv" else pd.read_parquet(path)

    with ResultsStore(tmp_path / "r.db") as store:
        for i in range(3):
            store.save_trial(make_record(i))
        for table in ("curves", "evals", "updates"):
            out = tmp_path / "out" / f"{table}{suffix}"
            assert store.export(table, out) == len(getattr(store, table)())
            pd.testing.assert_frame_equal(read(out), getattr(store, table)(), check_exact=False, rtol=1e-12)
        assert store.export("trials", tmp_path / f"trials{suffix}") == 3
        trials = read(tmp_path / f"trials{suffix}")
        expected = store.trials()

    flat = [c for c in expected.columns if c not in ("phases", "metrics")]
    assert [c for c in trials.columns if c in flat] == flat
    assert trials["key"].tolist() == expected["key"].tolist()
    assert trials["final_eval_mean"].tolist() == expected["final_eval_mean"].tolist()
    assert [json.loads(text) for text in trials["config"]] == expected["config"].tolist()
    assert [json.loads(text) for text in trials["provenance"]] == expected["provenance"].tolist()


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_export_has_per_phase_memory_and_timing_as_flat_columns(tmp_path: Path, suffix: str) -> None:
    """pandas reads the export as it is: no JSON cell to parse for a phase's memory or seconds."""
    records = []
    for i in range(3):
        record = make_record(i)
        record["phases"] = {
            "setup": {"time_s": 0.0, "calls": 0, "rss_peak_mb": 100.0 + i, "rss_method": "vmhwm"},
            "rollout": {"time_s": 5.0 + i, "cpu_s": 4.5 + i, "calls": 20, "rss_peak_mb": 200.5 + i, "rss_growth_mb": 1.25},
            "update": {"time_s": 14.0 + i, "cpu_s": 13.0, "calls": 20, "rss_peak_mb": 250.25 + i, "rss_growth_mb": -0.5},
        }  # fmt: skip
        record["metrics"] = {"sample_diversity": 0.5 + i / 10}
        record["update_time_s"] = 16.0 + i  # the trial's: advantages + update
        records.append(record)
    records[2]["phases"], records[2]["metrics"] = {}, {}  # a trial recorded without the probe
    with ResultsStore(tmp_path / "r.db") as store:
        for record in records:
            store.save_trial(record)
        out = tmp_path / f"trials{suffix}"
        assert store.export("trials", out) == 3
    frame = (pd.read_csv(out, dtype={"key": str}) if suffix == ".csv" else pd.read_parquet(out)).set_index("key")
    assert "phases" not in frame.columns and "metrics" not in frame.columns
    expected_columns = [
        "setup_seconds", "setup_calls", "setup_rss_method", "setup_rss_peak_mb",
        "rollout_seconds", "rollout_cpu_seconds", "rollout_calls", "rollout_rss_growth_mb", "rollout_rss_peak_mb",
        "update_seconds", "update_cpu_seconds", "update_calls", "update_rss_growth_mb", "update_rss_peak_mb",
        "metric_sample_diversity",
    ]  # fmt: skip
    assert [c for c in frame.columns if c in expected_columns] == expected_columns  # grouped by phase, in order
    for record in records:
        row = frame.loc[record["key"]]
        for phase, fields in record["phases"].items():
            for name, value in fields.items():
                column = f"{phase}_{ {'time_s': 'seconds', 'cpu_s': 'cpu_seconds'}.get(name, name) }"
                assert row[column] == value, column
        if not record["phases"]:
            assert row[["rollout_rss_peak_mb", "update_seconds", "setup_calls"]].isna().all()
            assert pd.isna(row["metric_sample_diversity"])
        else:
            assert row["metric_sample_diversity"] == record["metrics"]["sample_diversity"]
    assert pd.api.types.is_float_dtype(frame["update_rss_peak_mb"])
    # The trial's update_time_s (advantages + update) is its own column, apart from the update phase's seconds.
    assert frame.loc[records[0]["key"], ["update_time_s", "update_seconds"]].tolist() == [16.0, 14.0]


def test_export_rejects_unknown_suffix_and_table(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "r.db") as store:
        with pytest.raises(UserError, match=r"unknown file type '\.xlsx'; use \.csv or \.parquet"):
            store.export("curves", tmp_path / "c.xlsx")
        with pytest.raises(UserError, match="choose one of trials, curves, evals, updates"):
            store.export("episodes", tmp_path / "c.csv")
    assert not (tmp_path / "c.xlsx").exists()


# ---------------------------------------------------------------------- load speed (reported, not asserted)


def test_smoke_load_500_trials_and_print_time(tmp_path: Path) -> None:
    """Smoke test with a printed timing: the speed target lives in benchmarks, not here."""
    template = make_record(0, n_episodes=2000, n_updates=500, n_evals=20)
    template["updates"] = [{**u, **{f"m{j}": 0.5 * j for j in range(8)}} for u in template["updates"]]
    db = tmp_path / "r.db"
    with ResultsStore(db) as store:
        start = time.perf_counter()
        for i in range(500):
            store.save_trial({**template, "key": f"{i:064x}", "seed": i})
        saved = time.perf_counter() - start
    with ResultsStore(db, create=False) as store:
        start = time.perf_counter()
        trials, curves, evals, updates = store.trials(), store.curves(), store.evals(), store.updates()
        loaded = time.perf_counter() - start
    print(f"\n500 trials: saved in {saved:.2f} s, loaded trials+curves+evals+updates in {loaded:.2f} s")
    assert (len(trials), len(curves), len(evals), len(updates)) == (500, 500 * 2000, 500 * 200, 500 * 500)
    assert updates.shape[1] == 3 + 2 + 8


def test_study_membership_includes_trials_recorded_by_another_run(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "m.db") as store:
        store.save_trial(make_record(0, study=None))
        store.save_trial(make_record(1, study="other"))
        assert store.trials(study="quick").empty
        store.add_to_study("quick", [make_record(0)["key"], make_record(1)["key"]])
        store.add_to_study("quick", [make_record(0)["key"]])  # idempotent
        assert sorted(store.trials(study="quick")["seed"]) == [0, 1]
        assert list(store.trials(study="other")["seed"]) == [1]


def test_study_tiers_are_recorded_per_key_and_replaced(tmp_path: Path) -> None:
    with ResultsStore(tmp_path / "t.db") as store:
        k0, k1 = make_record(0)["key"], make_record(1)["key"]
        store.add_to_study("s", [k0, k1], tier="quick")
        store.add_to_study("s", [k1], tier="custom")
        store.add_to_study("s", [k0])  # no tier: replaces with unknown
        assert store.study_tiers("s") == {k1: "custom"}


# ------------------------------------------------------------------------------- retries and run coordination


def test_studies_failed_trials_and_attempts(tmp_path: Path) -> None:
    env_kinds = {"worker_died": "WorkerDied: exit -9", "timeout": "Timeout: 30 s", "oom": "OOMKilled"}
    records = [make_record(0, study="a")]
    for i, (kind, error) in enumerate(env_kinds.items(), start=1):
        records.append(make_record(i, study="b", status="failed", failure_kind=kind, error=error, attempts=2))
    records.append(make_record(4, study="b", status="failed", failure_kind="exception", error="ValueError: x"))
    records.append(make_record(5, study="b", status="diverged", failure_kind="diverged", error="Diverged: nan"))
    records.append(make_record(6, study="b", status="failed", failure_kind=None, error="WorkerDied: code 0", attempts=None))
    with ResultsStore(tmp_path / "f.db") as store:
        for r in records:
            store.save_trial(r)
        store.add_to_study("c", [records[0]["key"]])
        keys = [r["key"] for r in records]
        assert store.studies() == ["a", "b", "c"]
        env = store.failed_trials(keys, "env")
        assert set(env) == {records[i]["key"] for i in (1, 2, 3, 6)}  # machine causes, incl. a schema-1 WorkerDied
        assert env[records[1]["key"]] == records[1]["ended_at"]
        assert set(store.failed_trials(keys, "all")) == {r["key"] for r in records[1:]}
        assert set(store.failed_trials(keys[:2], "all")) == {keys[1]}  # only among the keys asked about
        assert [store.attempts(k) for k in keys] == [1, 2, 2, 2, 1, 1, 1] and store.attempts("0" * 64 + "x") == 0
        summary = store.failure_summary()
        assert summary["n"].sum() == 6 and summary["retried"].sum() == 3


def test_claims_let_each_trial_run_once_across_runs(tmp_path: Path) -> None:
    rec = make_record(0)
    with ResultsStore(tmp_path / "c.db") as first, ResultsStore(tmp_path / "c.db") as second:
        run_a, run_b = first.begin_run("suite run a"), second.begin_run("suite run b")
        assert first.claim(rec["key"], run_a).state == "claimed"
        assert first.claim(rec["key"], run_a).state == "claimed"  # idempotent for its owner
        busy = second.claim(rec["key"], run_b)
        assert busy.state == "busy" and f"pid {os.getpid()}" in busy.owner and "suite run a" in busy.owner
        assert len(second.active_runs()) == 2 and second.active_runs()["claimed"].sum() == 1
        first.save_trial(rec)  # saving drops the claim in the same transaction
        assert second.claim(rec["key"], run_b).state == "recorded"
        # a recorded failure planned for a re-run: claimable while the record is the planned one
        failed = make_record(1, status="failed", failure_kind="timeout", error="Timeout")
        first.save_trial(failed)
        planned = second.failed_trials([failed["key"]])[failed["key"]]
        assert second.claim(failed["key"], run_b, rerun=planned).state == "claimed"
        assert first.claim(failed["key"], run_a, rerun=planned).state == "busy"
        second.save_trial(make_record(1, ended_at="2025-01-02T00:00:00.000000+00:00"))  # run b re-ran it
        assert first.claim(failed["key"], run_a, rerun=planned).state == "recorded"  # not a second time
        second.end_run(run_b)
        first.end_run(run_a)
        assert first.active_runs().empty


def _claim_and_exit(db: str, key: str) -> None:
    with ResultsStore(db) as store:
        run = store.begin_run("doomed")
        assert store.claim(key, run).state == "claimed"
    os._exit(0)  # dies without end_run, like a SIGKILLed driver


def test_a_dead_runs_claims_are_taken_over_at_once(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    key = make_record(0)["key"]
    child = _SPAWN.Process(target=_claim_and_exit, args=(str(db), key))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    with ResultsStore(db) as store:
        assert store.active_runs().empty  # the dead run is not reported as live
        run = store.begin_run("rerun")
        assert store.claim(key, run).state == "claimed"
        assert store._conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1  # the dead run was forgotten


def test_a_file_without_coordination_tables_gains_them(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with ResultsStore(db) as store:
        store.save_trial(make_record(0))
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE claims")
    conn.execute("DROP TABLE runs")
    conn.commit()
    conn.close()
    with ResultsStore(db) as store:
        run = store.begin_run()
        assert store.claim(make_record(1)["key"], run).state == "claimed"
        store.save_trial(make_record(1))
        assert len(store.finished_keys()) == 2


def test_merge_copies_whole_trials_keeps_existing_ones_and_lists_differences(tmp_path: Path) -> None:
    here, there = tmp_path / "here.db", tmp_path / "there.db"
    with ResultsStore(there) as src:
        for i in range(4):
            src.save_trial(make_record(i, study="claims/a" if i < 3 else "other"))
        src.add_to_study("claims/a", [f"{i:064x}" for i in range(3)], tier="standard")
        wanted = {k: src.get_trial(k) for k in src.finished_keys()}
    with ResultsStore(here) as dst:
        dst.save_trial(make_record(0, study="claims/a"))  # the same outcome
        dst.save_trial(make_record(1, study="claims/a", final_eval_mean=-1.0))  # another outcome for the same key
        result = dst.merge_from(there, studies=["claims/a"])
        assert (result.added, result.identical, result.differing) == (1, 1, [f"{1:064x}"])
        assert dst.finished_keys() == {f"{i:064x}" for i in range(3)}  # "other" left out
        assert_records_equal(dst.get_trial(f"{2:064x}"), wanted[f"{2:064x}"])  # row, curve, evals, updates whole
        assert dst.get_trial(f"{1:064x}")["final_eval_mean"] == -1.0  # never overwritten
        assert dst.study_tiers("claims/a") == {f"{i:064x}": "standard" for i in range(3)}
        again = dst.merge_from(there)  # everything: only the missing trial comes in, nothing twice
        assert (again.added, again.identical, len(again.differing)) == (1, 2, 1)
        assert len(dst.trials()) == 4 and len(dst.evals()) == sum(len(dst.evals([k])) for k in dst.finished_keys())
    with ResultsStore(here) as dst:
        with pytest.raises(UserError, match="has no study 'nope'"):
            dst.merge_from(there, studies=["nope"])
        with pytest.raises(UserError, match="into itself"):
            dst.merge_from(here)
        with pytest.raises(UserError, match="no results database"):
            dst.merge_from(tmp_path / "absent.db")
    assert not (tmp_path / "absent.db").exists()


def test_suite_merge_command_combines_databases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from suite.cli import main

    parts = [tmp_path / "a.db", tmp_path / "b.db"]
    for n, part in enumerate(parts):
        with ResultsStore(part) as store:
            for i in range(3 * n, 3 * n + 4):  # trial 3 is in both
                store.save_trial(make_record(i))
    merged = tmp_path / "merged.db"
    assert main(["merge", *map(str, parts), "--db", str(merged)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{parts[0]}: 4 trials added, 0 already here with the same outcome",
                   f"{parts[1]}: 3 trials added, 1 already here with the same outcome", f"merged into {merged}"]  # fmt: skip
    with ResultsStore(merged) as store:
        assert store.finished_keys() == {f"{i:064x}" for i in range(7)}


def test_opening_while_another_process_creates_the_file_sees_a_results_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a fresh-clone run hit: a reader read the header (empty file: application_id 0), the driver then
    created the schema, and the reader's look at the tables found them and called the file foreign."""
    db = tmp_path / "race.db"
    real = ResultsStore._table_names
    raced: list[bool] = []

    def table_names(conn: sqlite3.Connection) -> set[str]:
        if not raced:
            raced.append(True)
            ResultsStore(db).close()  # another process creates the schema between the two reads
        return real(conn)

    monkeypatch.setattr(ResultsStore, "_table_names", staticmethod(table_names))
    with ResultsStore(db) as store:
        assert store.finished_keys() == set()
    assert raced
