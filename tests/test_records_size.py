"""Tests for records whose size does not grow with the steps: binned update rows, compressed series blobs, the
lossless upgrade of schema-1/2 files, ``suite migrate`` and ``--full-updates``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from suite.cli import main
from suite.cli.options import exec_options
from suite.errors import UserError
from suite.store import SCHEMA_VERSION, ResultsStore
from suite.store.records import (
    INSERT_TRIAL,
    U1,
    bin_update_rows,
    encode_trial,
    pack_arrays,
    parse_updates,
    unpack_arrays,
)
from suite.store.schema import F4, F8, I8, UPDATE_BINS
from tests.test_store import assert_records_equal, make_record

# ---------------------------------------------------------------------- the schema-2 file, as that version wrote it

SCHEMA_2_SQL = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE trials (key TEXT PRIMARY KEY, study TEXT, algo TEXT NOT NULL, algo_version TEXT, env_id TEXT NOT NULL,
    env_kwargs TEXT NOT NULL, env_label TEXT, seed INTEGER NOT NULL, budget INTEGER, threads INTEGER,
    n_eval_episodes INTEGER, eval_freq INTEGER, config TEXT NOT NULL, config_hash TEXT, status TEXT NOT NULL,
    error TEXT, traceback TEXT, steps INTEGER, wall_time_s REAL, rollout_time_s REAL, update_time_s REAL,
    eval_time_s REAL, steps_per_second REAL, peak_rss_mb REAL, baseline_rss_mb REAL, final_eval_mean REAL,
    final_eval_std REAL, provenance TEXT NOT NULL, started_at TEXT, ended_at TEXT, model_path TEXT,
    suite_version TEXT, format INTEGER, attempts INTEGER, failure_kind TEXT, phases TEXT, metrics TEXT,
    CHECK (status IN ('ok', 'failed', 'diverged')));
CREATE INDEX trials_by_group ON trials (study, algo, env_label);
CREATE TABLE curves (key TEXT PRIMARY KEY, n INTEGER NOT NULL, step_i8 BLOB NOT NULL, return_f8 BLOB NOT NULL,
    length_i8 BLOB NOT NULL);
CREATE TABLE evals (key TEXT NOT NULL, idx INTEGER NOT NULL, step INTEGER NOT NULL, final INTEGER NOT NULL,
    episode INTEGER NOT NULL, "return" REAL, length INTEGER, wall_time_s REAL, PRIMARY KEY (key, idx, episode))
    WITHOUT ROWID;
CREATE TABLE study_trials (study TEXT NOT NULL, key TEXT NOT NULL, tier TEXT, PRIMARY KEY (study, key)) WITHOUT ROWID;
CREATE TABLE updates (key TEXT PRIMARY KEY, n INTEGER NOT NULL, metrics TEXT NOT NULL, update_i8 BLOB NOT NULL,
    step_i8 BLOB NOT NULL, values_f8 BLOB NOT NULL);
INSERT INTO meta VALUES ('format', 'rl-suite-results'), ('schema_version', '2');
PRAGMA application_id = 1380733780;  -- 0x524C5354, ASCII RLST
PRAGMA user_version = 2;
"""


def write_schema_2_database(path: Path, records: list[dict[str, Any]]) -> None:
    """A results file exactly as schema version 2 laid it out: raw little-endian blobs, one eval row per episode."""
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA_2_SQL)
    for record in records:
        key = record["key"]
        conn.execute(INSERT_TRIAL, encode_trial(record))
        curve = record["curve"]
        conn.execute(
            "INSERT INTO curves VALUES (?, ?, ?, ?, ?)",
            (key, len(curve["step"]), np.asarray(curve["step"], I8).tobytes(),
             np.asarray(curve["return"], F8).tobytes(), np.asarray(curve["length"], I8).tobytes()),
        )  # fmt: skip
        for idx, ev in enumerate(record["evals"]):
            for episode, ret in enumerate(ev["returns"]):
                conn.execute(
                    "INSERT INTO evals VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (key, idx, ev["step"], ev["final"], episode, ret, ev["lengths"][episode], ev["wall_time_s"]),
                )
        rows = parse_updates(record["updates"])
        conn.execute(
            "INSERT INTO updates VALUES (?, ?, ?, ?, ?, ?)",
            (key, rows.n, json.dumps(rows.metrics), rows.update_last.astype(I8).tobytes(),
             rows.step_last.astype(I8).tobytes(), rows.mean.astype(F8).tobytes()),
        )  # fmt: skip
        conn.execute("INSERT INTO study_trials VALUES (?, ?, ?)", (record["study"], key, "quick"))
    conn.commit()
    conn.close()


def long_updates(n: int) -> list[dict[str, Any]]:
    """``n`` updates every 8 env steps: ``loss`` = the update number, ``kl`` logged on odd updates only."""
    return [{"update": u, "step": 8 * u, "loss": float(u), **({"kl": 0.5 * u} if u % 2 else {})} for u in range(1, n + 1)]


# ---------------------------------------------------------------------- blobs and bins


def test_blobs_round_trip_bit_for_bit_including_nan_and_int64_extremes() -> None:
    ints = np.array([0, -(2**63), 2**63 - 1, 5, 5, -1], dtype=np.int64)
    floats = np.array([np.nan, -0.0, np.inf, 1e-310, 3.25, -np.inf])
    small = np.array([0, 1, 255, 7], dtype=U1)
    layout = [(I8, 6, True), (F8, 6, False), (U1, 4, False), (F4, 2, False)]
    got = unpack_arrays(pack_arrays([ints, floats, small, np.float32([1.5, np.nan])], layout), layout)
    assert got[0].tolist() == ints.tolist()  # the deltas wrap and unwrap
    assert got[1].tobytes() == floats.tobytes()
    assert got[2].tolist() == [0, 1, 255, 7] and got[3][0] == 1.5 and np.isnan(got[3][1])
    with pytest.raises(ValueError, match="layout wants 5 values, got 6"):
        pack_arrays([ints], [(I8, 5, True)])


def test_binning_keeps_counts_exact_update_numbers_and_the_mean_min_max_of_a_known_series(tmp_path: Path) -> None:
    record = make_record(0, updates=long_updates(2500))
    with ResultsStore(tmp_path / "r.db") as store:
        store.save_trial(record)
        bins = store.update_bins()
        rows = store.updates()
        resolution = store._conn.execute("SELECT n, n_updates, resolution FROM updates").fetchone()
        assert store.export("update_bins", tmp_path / "bins.csv") == 1000
    exported = pd.read_csv(tmp_path / "bins.csv", dtype={"key": str})
    assert list(exported.columns) == ["key", "update_first", "update_last", "step_first", "step_last", "bin_size",
                                      "loss", "loss_min", "loss_max", "kl", "kl_min", "kl_max"]  # fmt: skip
    assert exported["loss_max"].iloc[-1] == 2500.0
    assert resolution == (UPDATE_BINS, 2500, "binned")
    assert len(bins) == len(rows) == 1000 and bins["bin_size"].sum() == 2500
    assert sorted(set(bins["bin_size"])) == [2, 3]  # 2500 updates in 1000 runs of (nearly) equal length
    # the bins tile the updates: each starts right after the one before, first and last exact
    assert bins["update_first"].iloc[0] == 1 and bins["update_last"].iloc[-1] == 2500 and bins["step_last"].iloc[-1] == 20_000
    assert (bins["update_first"].to_numpy()[1:] == bins["update_last"].to_numpy()[:-1] + 1).all()
    assert (bins["step_first"] == 8 * bins["update_first"]).all() and (bins["step_last"] == 8 * bins["update_last"]).all()
    assert (bins["update_last"] - bins["update_first"] + 1 == bins["bin_size"]).all()
    # bin 0 holds updates 1-2, bin 1 updates 3-5: loss = the update number, kl only on odd updates
    first, second = bins.iloc[0], bins.iloc[1]
    assert (first["loss"], first["loss_min"], first["loss_max"]) == (1.5, 1.0, 2.0)
    assert (first["kl"], first["kl_min"], first["kl_max"]) == (0.5, 0.5, 0.5)
    assert (second["update_first"], second["update_last"], second["loss"]) == (3, 5, 4.0)
    assert (second["kl"], second["kl_min"], second["kl_max"]) == (2.0, 1.5, 2.5)
    # updates(): a bin's last update and step and its means; float32 keeps these small integers exact
    assert rows["update"].tolist() == bins["update_last"].tolist() and rows["loss"].iloc[1] == 4.0
    assert (bins["loss"] * bins["bin_size"]).sum() / 2500 == 1250.5  # the bins' means weigh back to the series' mean


def test_a_bin_where_a_diagnostic_was_never_logged_reads_nan_and_short_trials_are_kept_whole() -> None:
    updates = [{"update": u, "step": u, "a": float(u), **({"b": 1.0} if u > 4 else {})} for u in range(1, 9)]
    binned = bin_update_rows(parse_updates(updates), bins=4)
    assert binned.count.tolist() == [2, 2, 2, 2]
    assert np.isnan(binned.mean[:2, 1]).all() and np.isnan(binned.minimum[:2, 1]).all()
    assert binned.mean[2:, 1].tolist() == [1.0, 1.0] and binned.mean[:, 0].tolist() == [1.5, 3.5, 5.5, 7.5]
    whole = parse_updates(updates)
    assert bin_update_rows(whole, bins=8) is whole  # at most `bins` rows: nothing is binned


def test_full_updates_keeps_every_row_and_migrate_leaves_it(tmp_path: Path) -> None:
    record = make_record(0, updates=long_updates(2500))
    with ResultsStore(tmp_path / "r.db") as store:
        store.save_trial(record, full_updates=True)
        assert store.bin_updates() == (0, 0, 0)
        got = store.get_trial(record["key"])
        assert store._conn.execute("SELECT n, resolution FROM updates").fetchone() == (2500, "full")
    assert len(got["updates"]) == 2500 and got["updates"][2]["loss"] == 3.0 and got["updates"][2]["step"] == 24
    assert np.isnan(got["updates"][1]["kl"]) and got["updates"][2]["kl"] == 1.5


def test_full_updates_option_reaches_the_executor_from_run_and_reproduce() -> None:
    from suite.cli.main import build_parser

    parser = build_parser()
    for argv in (["run", "--full-updates"], ["reproduce", "zoo-benchmark", "--full-updates"]):
        assert exec_options(parser.parse_args(argv), on_finish=None).full_updates is True
    assert exec_options(parser.parse_args(["run"]), on_finish=None).full_updates is False


# ---------------------------------------------------------------------- older files


def test_a_schema_2_database_opens_upgraded_losslessly(tmp_path: Path) -> None:
    db = tmp_path / "v2.db"
    records = [make_record(0, updates=long_updates(2500)), make_record(1)]
    records[1]["evals"][0]["returns"][3] = float("nan")  # stored as NULL by schema 2
    write_schema_2_database(db, records)
    with ResultsStore(db, create=False) as store:
        for record in records:
            got = store.get_trial(record["key"])
            want = dict(record, updates=[{"kl": float("nan"), **u} for u in record["updates"]] if record is records[0]
                        else record["updates"])  # fmt: skip
            assert_records_equal(got, want)  # every update row kept, every value bit for bit
        kept = store._conn.execute("SELECT resolution, n FROM updates ORDER BY key").fetchall()
        assert kept == [("every", 2500), ("every", 20)]
        assert store.study_tiers("quick") == {r["key"]: "quick" for r in records}
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    assert conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0] == "3"
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_a_version_1_file_is_upgraded_in_place_and_keeps_its_trials(tmp_path: Path) -> None:
    """A file of schema version 1 (no attempts/failure_kind/phases/metrics columns) opens, gains the columns and the
    version-3 series tables, keeps every old trial (new fields read back empty), and accepts new records."""
    db = tmp_path / "v1.db"
    old = make_record(0)
    write_schema_2_database(db, [old])
    conn = sqlite3.connect(db)
    for column in ("attempts", "failure_kind", "phases", "metrics"):
        conn.execute(f"ALTER TABLE trials DROP COLUMN {column}")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()

    with ResultsStore(db) as store:
        got = store.get_trial(old["key"])
        assert got["curve"]["step"] == old["curve"]["step"] and got["final_eval_mean"] == 500.0
        assert got["evals"] == old["evals"] and got["updates"] == old["updates"]
        assert got["attempts"] is None and got["failure_kind"] is None
        assert got["phases"] == {} and got["metrics"] == {}
        store.save_trial(make_record(1))
        assert store.get_trial(make_record(1)["key"])["metrics"] == {"sample_diversity": 0.5}
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_suite_migrate_bins_shrinks_keeps_outcomes_and_is_idempotent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "old.db"
    records = [make_record(0, updates=long_updates(20_000)), make_record(1)]
    write_schema_2_database(db, records)
    size_before = db.stat().st_size
    assert main(["migrate", str(db)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith(f"{db}: schema 2 -> 3, 1 trials' update rows binned to at most 1,000 "
                                               "(20,000 -> 1,000 rows), ")  # fmt: skip
    assert db.stat().st_size < size_before / 4
    with ResultsStore(db, create=False) as store:
        trials = store.trials().set_index("key")
        bins = store.update_bins([records[0]["key"]])
        kept = store.get_trial(records[1]["key"])
    for record in records:  # outcomes, curves and evaluations as they were
        row = trials.loc[record["key"]]
        assert (row["status"], row["steps"], row["final_eval_mean"]) == ("ok", record["steps"], 500.0)
    assert bins["bin_size"].tolist() == [20] * 1000 and bins["loss"].iloc[0] == 10.5 and bins["loss_max"].iloc[-1] == 20_000
    assert_records_equal(kept, records[1])  # a trial of 20 updates keeps every row
    assert main(["migrate", str(db)]) == 0  # a second run finds nothing to do
    assert capsys.readouterr().out.startswith(f"{db}: schema 3, no update rows to bin, ")


def test_suite_migrate_bad_path_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", str(tmp_path / "nope.db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"suite: error: no results database at {tmp_path / 'nope.db'}"]
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    assert main(["migrate", str(tmp_path / "junk.db")]) == 2
    assert "is not a rl-suite results database" in capsys.readouterr().err
    with pytest.raises(UserError):
        ResultsStore(tmp_path / "nope.db", create=False)


def test_claim_metrics_count_updates_by_number_on_binned_rows() -> None:
    """``first_update_at_max`` and ``first_eval_at_max`` read update numbers, so binned rows give the bin's last
    update (exact to the bin) where positions would give the bin's index."""
    from suite.claims.metrics import RunData, get_metric

    trial = {"env_id": "TextMatch-v0", "env_kwargs": {"target": "hello"}, "final_eval_mean": 5.0}
    bins = pd.DataFrame({"update": [10, 20, 30], "step": [400, 800, 1200], "loss": [0.3, 0.2, 0.1]})
    run = RunData(
        trial=trial, eval_steps=np.array([500.0, 1000.0]), eval_means=np.array([2.0, 5.0]),
        curve_steps=np.array([300.0, 700.0]), curve_returns=np.array([1.0, 5.0]),
        update_steps=np.array([400.0, 800.0, 1200.0]), updates=bins,
    )  # fmt: skip
    # the 5.0 episode ended at step 700, trained on by an update of the second bin (updates 11-20): its last, 20
    assert get_metric("first_update_at_max").per_run(run, {}) == 20.0
    # the evaluation at step 1000 ran after the bins ending at steps 400 and 800: 20 updates
    assert get_metric("first_eval_at_max").per_run(run, {}) == 20.0
