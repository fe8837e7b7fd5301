"""The evidence benchmarks' arithmetic and rows: ``benchmarks/evidence_rows.py`` and the rows that
``bench_parallel.py``, ``bench_memory_toggles.py``, ``regress_targets.py`` and ``bench_kernels.py`` append (no
measurement runs here)."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import (  # repository root on path
    bench_kernels,
    bench_memory_toggles,
    bench_parallel,
    evidence_rows,
    regress_targets,
)

CONTEXT = {"machine": "m", "commit": "c", "command": "python x.py", "date": "2026-01-01T00:00:00Z"}


def test_append_rows_writes_the_header_once_and_latest_keeps_the_last_row_per_target(tmp_path: Path) -> None:
    path = tmp_path / "e.csv"
    evidence_rows.append_rows(path, [evidence_rows.row("a", 1.23456789, "x", load="1/2/3", **CONTEXT)])
    evidence_rows.append_rows(path, [evidence_rows.row("b", 2, "s", load="0", **CONTEXT)])
    evidence_rows.append_rows(path, [evidence_rows.row("a", 0.5, "x", load="4/5/6", notes="again", **CONTEXT)])
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == list(evidence_rows.COLUMNS)
    assert len(rows) == 4  # one header, three rows
    assert rows[1][1] == "1.23457"  # floats to 6 significant digits
    latest = evidence_rows.latest(path)
    assert sorted(latest) == ["a", "b"]
    assert (latest["a"]["value"], latest["a"]["load"], latest["a"]["notes"]) == ("0.5", "4/5/6", "again")


def test_row_fills_this_process_context_and_refuses_unknown_columns() -> None:
    r = evidence_rows.row("t", 1, "u", load="0")
    assert r["machine"] and r["commit"] and r["command"].startswith("python ")
    assert r["date"].endswith("Z") and len(r["date"]) == 20
    with pytest.raises(TypeError, match="colour"):
        evidence_rows.row("t", 1, "u", load="0", colour="red")


def _record(start: str, end: str, cpu: float, wall: float) -> dict:
    phases = {"rollout": {"cpu_s": cpu / 2, "time_s": wall / 2}, "update": {"cpu_s": cpu / 2, "time_s": wall / 2}}
    return {"started_at": f"2026-01-01T00:00:{start}+00:00", "ended_at": f"2026-01-01T00:00:{end}+00:00", "phases": phases}


def test_parallel_span_and_cpu_come_from_the_records() -> None:
    records = [_record("10", "20", 8.0, 10.0), _record("12", "30", 9.0, 18.0)]
    assert bench_parallel.span_s(records) == 20.0  # first start 10 s, last end 30 s
    assert [bench_parallel.trial_cpu_s(r) for r in records] == [8.0, 9.0]
    assert [bench_parallel.trial_phase_wall_s(r) for r in records] == [10.0, 18.0]


def test_parallel_row_is_the_throughput_ratio_with_load_and_cpu_noted() -> None:
    def measured(workers: int, span: float, share: float) -> dict:
        return {"executor": "local", "workers": workers, "trials": 4, "steps": 1000, "span_s": span,
                "trials_per_s": 4 / span, "cpu_s": 40.0, "core_share": share, "load_before": "1.00/1.00/1.00",
                "load_after": "2.00/1.00/1.00"}  # fmt: skip

    row = bench_parallel.evidence_row(measured(1, 40.0, 0.98), measured(2, 25.0, 0.8))
    assert row["target"] == "parallel-efficiency-local"
    assert row["value"] == 1.6  # 40 s / 25 s
    assert "1 worker 1.00/1.00/1.00 -> 2.00/1.00/1.00" in row["load"]
    assert "0.80 of a core per trial" in row["notes"] and "span 25.0 s" in row["notes"]


def test_toggle_rows_are_the_baseline_in_mb_and_each_variant_as_its_median_ratio() -> None:
    nan = float("nan")
    entries = [
        ("baseline", "trial", "rss_peak_mb", 3, 300.0, 290.0, 310.0, nan, nan, nan),
        ("baseline", "trial", "rss_above_start_mb", 3, 20.0, 19.0, 21.0, nan, nan, nan),
        ("obs_storage_dtype=float32", "trial", "rss_peak_mb", 3, 390.0, 380.0, 400.0, 1.3, 1.25, 1.35),
        ("obs_storage_dtype=float32", "trial", "rss_above_start_mb", 3, 110.0, 100.0, 120.0, 5.5, 5.0, 6.0),
        ("all toggles", "update", "rss_peak_mb", 3, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0),  # no trial row: no evidence row
    ]
    columns = ["variant", "row", "measure", "n", "median", "min", "max", "ratio_median", "ratio_min", "ratio_max"]
    summary = pd.DataFrame(entries, columns=columns).set_index(["variant", "row", "measure"])
    rows = bench_memory_toggles.evidence("ppo", "ALE/Pong-v5", summary, 3072, 3, "1/1/1")
    assert [(r["target"], r["value"]) for r in rows] == [
        ("memory-ppo-ALE/Pong-v5-baseline-peak-rss", 300.0),
        ("memory-ppo-ALE/Pong-v5-obs_storage_dtype=float32-peak-rss-ratio", 1.3),
    ]
    assert "[1.25, 1.35]" in rows[1]["notes"] and "ratio 5.50" in rows[1]["notes"]


def test_regress_rows_count_the_runs_that_said_what_they_must() -> None:
    frame = pd.DataFrame([
        {"head": "same", "seconds": 100.0, "load_start": 1.0, "load_end": 2.0, "failing": [], "comparisons": 13,
         "caught": True},
        {"head": "flipped-loss", "seconds": 90.0, "load_start": 2.0, "load_end": 3.0,
         "failing": ["ppo/TextMatch-v0@5000: FAIL worse"], "comparisons": 13, "caught": True},
        {"head": "flipped-loss", "seconds": 95.0, "load_start": 3.0, "load_end": 4.0, "failing": [], "comparisons": 13,
         "caught": False},
    ])  # fmt: skip
    rows = {r["target"]: r for r in regress_targets.evidence(frame, dict(CONTEXT))}
    assert (rows["regress-gate-same"]["value"], rows["regress-gate-same"]["unit"]) == (1, "of 1 gate runs as expected")
    flipped = rows["regress-gate-flipped-loss"]
    assert (flipped["value"], flipped["unit"]) == (1, "of 2 gate runs as expected")
    assert flipped["load"] == "2.0 -> 3.0, 3.0 -> 4.0"
    assert "FAIL worse" in flipped["notes"] and "must: worse" in flipped["notes"]


def test_kernel_pools_are_geometric_means_of_the_pairs_with_a_t_interval_and_sb3_apart() -> None:
    import math

    from scipy import stats

    pairs = {("ppo", "E"): [0.5, 2.0], ("grpo", "E"): [1.0, 1.0], ("sb3-ppo", "E"): [0.8, 0.8]}
    pools = {target: (value, notes) for target, value, notes in bench_kernels.pooled(pairs)}
    assert sorted(pools) == [
        "grpo all envs portable/native (pooled)", "ppo all envs portable/native (pooled)",
        "sb3-ppo all envs portable/native (pooled)", "suite algorithms E portable/native (pooled)",
        "suite algorithms all envs portable/native (pooled)",
    ]  # fmt: skip
    assert pools["ppo all envs portable/native (pooled)"][0] == pytest.approx(1.0)  # sqrt(0.5 * 2)
    assert pools["sb3-ppo all envs portable/native (pooled)"][0] == pytest.approx(0.8)  # not in the suite's pools
    value, notes = pools["suite algorithms E portable/native (pooled)"]
    logs = [math.log(0.5), math.log(2.0), 0.0, 0.0]  # mean 0, sd sqrt(2/3) * ln 2
    half = stats.t.ppf(0.975, 3) * math.sqrt(2 / 3) * math.log(2) / 2
    assert value == pytest.approx(1.0) and sum(logs) == pytest.approx(0.0)
    assert f"[{math.exp(-half):.3f}, {math.exp(half):.3f}]" in notes and "of 4 back-to-back pairs" in notes


def test_kernel_pairs_are_read_back_from_the_latest_run_only(tmp_path: Path) -> None:
    path = tmp_path / "k.csv"
    notes = "CPU-time speed (medians); back-to-back pairs 0.800, 0.900 (range 0.800-0.900); wall clock 0.9 (pairs 1, 1)"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(bench_kernels.COLUMNS)
        w.writerow(["ppo E portable/native", "0.85", "ratio", "m", "new", "run", "2026-01-02T00:00:00", "1-2", notes])
        w.writerow(["grpo E portable/native", "0.7", "ratio", "m", "old", "run", "2026-01-01T00:00:00", "", notes])
        w.writerow(["ppo E native", "100", "steps per CPU second", "m", "new", "run", "2026-01-02T00:00:00", "", "x"])
    pairs, run = bench_kernels.pairs_in(path)
    assert pairs == {("ppo", "E"): [0.8, 0.9]}  # the earlier run's row is not pooled with it
    assert (run["commit"], run["load"]) == ("new", "1-2")
