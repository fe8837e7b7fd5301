"""Memory per phase (suite.profile.memory): the probe's numbers, the modes, and ``suite profile memory``."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from suite.errors import UserError
from suite.profile import memory as pm
from suite.trial import PHASES, TrialSpec, deterministic_view, run_trial

MIB = 2**20


def wait_for(condition, timeout_s: float = 10.0) -> bool:
    """Poll ``condition()`` until it holds (never a fixed sleep)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.001)
    return bool(condition())


def touched(n_bytes: int) -> np.ndarray:
    """An array whose every page is resident."""
    a = np.empty(n_bytes, dtype=np.uint8)
    a.fill(1)
    return a


# -------------------------------------------------------------------------------------------------- the probe
def test_rss_probe_gives_each_phase_its_own_peak_and_growth():
    probe = pm.MemoryProbe("rss")
    probe.start()
    probe.enter("rollout")
    transient = touched(96 * MIB)
    del transient  # freed before the phase ends: a peak without growth
    probe.exit("rollout")
    probe.enter("update")
    kept = touched(48 * MIB)  # still resident when the phase ends: growth
    probe.exit("update")
    probe.enter("eval")
    probe.exit("eval")
    probe.stop()
    s = probe.summary()
    assert probe.method == "vmhwm"
    assert s["rollout"]["rss_peak_over_entry_mb"] == pytest.approx(96, abs=4)
    assert abs(s["rollout"]["rss_growth_mb"]) < 4
    assert s["update"]["rss_peak_over_entry_mb"] == pytest.approx(48, abs=4)
    assert s["update"]["rss_growth_mb"] == pytest.approx(48, abs=4)
    assert s["eval"]["rss_peak_over_entry_mb"] < 4
    assert set(s) == {"setup", "rollout", "update", "eval"}
    assert "alloc_peak_mb" not in s["rollout"] and "rss_interval_ms" not in s["rollout"]
    # The resets also reset getrusage's peak: the probe keeps the process peak itself.
    assert probe.process_peak_mb() >= s["rollout"]["rss_peak_mb"] >= s["rollout"]["rss_peak_over_entry_mb"] + 50
    del kept


def test_rss_probe_sums_growth_and_keeps_the_highest_peak_over_calls():
    probe = pm.MemoryProbe("rss")
    probe.start()
    kept = []
    for size in (16, 64, 16):
        probe.enter("rollout")
        kept.append(touched(size * MIB))
        probe.exit("rollout")
    probe.stop()
    s = probe.summary()["rollout"]
    assert s["rss_growth_mb"] == pytest.approx(96, abs=6)
    assert s["rss_peak_over_entry_mb"] == pytest.approx(64, abs=4)
    del kept


def test_sampler_fallback_records_its_interval_and_sees_a_held_peak():
    probe = pm.MemoryProbe("rss", method="sampler", interval_s=0.001)
    probe.start()
    assert probe.method == "sampler"
    probe.enter("update")
    base = probe._proc.rss_kib()
    held = touched(64 * MIB)
    # The sampler sees the peak once it has sampled while the array is alive.
    assert wait_for(lambda: probe._sampler.peak(0) - base >= 60 * 1024)
    del held
    probe.exit("update")
    probe.stop()
    s = probe.summary()["update"]
    assert s["rss_method"] == "sampler" and s["rss_interval_ms"] == 1.0
    assert s["rss_peak_over_entry_mb"] == pytest.approx(64, abs=4)


def test_full_probe_sees_torch_tensors_and_tells_allocated_from_resident():
    probe = pm.MemoryProbe("full")
    probe.start()
    probe.enter("rollout")
    reserved = np.zeros(64 * MIB, dtype=np.uint8)  # calloc: allocated, not resident until written
    probe.exit("rollout")
    probe.enter("update")
    tensor = torch.ones(16 * MIB // 4 * 4)  # 64 MiB of float32, written: allocated and resident
    del tensor
    probe.exit("update")
    probe.stop()
    s = probe.summary()
    assert "alloc_error" not in s["rollout"]
    assert s["rollout"]["alloc_growth_mb"] == pytest.approx(64, abs=1)
    assert s["rollout"]["rss_growth_mb"] < 8  # reserved, but hardly resident
    assert s["update"]["alloc_peak_over_entry_mb"] == pytest.approx(64, abs=1)  # tracemalloc would say 0
    assert abs(s["update"]["alloc_growth_mb"]) < 1
    assert s["update"]["rss_peak_over_entry_mb"] == pytest.approx(64, abs=4)
    assert s["update"]["alloc_peak_mb"] >= s["rollout"]["alloc_growth_mb"] + 63  # totals since the trial started
    del reserved


def test_full_probe_keeps_the_capture_when_asked(tmp_path):
    capture = tmp_path / "run.bin"
    probe = pm.MemoryProbe("full", capture=capture)
    probe.start()
    probe.enter("rollout")
    probe.exit("rollout")
    probe.stop()
    assert capture.stat().st_size > 0
    assert probe.summary()["rollout"]["alloc_peak_over_entry_mb"] >= 0


def test_check_mode_rejects_unknown_modes():
    assert pm.check_mode("rss") == "rss"
    with pytest.raises(UserError, match="unknown memory profile 'tiny'; allowed: off, rss, full"):
        pm.check_mode("tiny")
    with pytest.raises(UserError, match="unknown memory profile"):
        TrialSpec("ppo", "CartPole-v1", 0, 100, memory_profile="tiny").resolve()


# -------------------------------------------------------------------------------------------------- in trials
def test_memory_mode_is_not_part_of_the_key_and_changes_no_result():
    records = {}
    for mode in pm.MODES:
        spec = TrialSpec("ppo", "CartPole-v1", 0, 1024, n_eval_episodes=1, memory_profile=mode)
        records[mode] = run_trial(spec.resolve())
    assert len({r["key"] for r in records.values()}) == 1
    views = [deterministic_view(r) for r in records.values()]
    assert views[0] == views[1] == views[2]
    off, rss, full = records["off"], records["rss"], records["full"]
    assert all(r["status"] == "ok" for r in records.values())
    assert "rss_peak_mb" not in off["phases"]["update"] and "setup" not in off["phases"]
    for rec in (rss, full):
        assert set(rec["phases"]) == {*PHASES, "setup"}
        assert rec["phases"]["setup"]["time_s"] == 0.0 and rec["phases"]["setup"]["calls"] == 0
        for phase in rec["phases"].values():
            assert phase["rss_method"] == "vmhwm"
            assert rec["baseline_rss_mb"] - 50 < phase["rss_peak_mb"] <= rec["peak_rss_mb"]
    assert "alloc_peak_mb" not in rss["phases"]["update"]
    assert full["phases"]["update"]["alloc_peak_over_entry_mb"] > 0
