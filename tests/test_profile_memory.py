"""Memory per phase (suite.profile.memory): the probe's numbers, the modes, and ``suite profile memory``."""

from __future__ import annotations

import mmap
import time

import numpy as np
import pandas as pd
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


class Touched:
    """``n_bytes`` of fresh anonymous memory, every page written (so resident) until :meth:`free`. A mapping of its
    own, not malloc: whether malloc reuses freed memory depends on what the process did before (a test session)."""

    def __init__(self, n_bytes: int) -> None:
        self._map = mmap.mmap(-1, n_bytes, flags=mmap.MAP_PRIVATE)  # private: anonymous memory, not shmem
        view = np.frombuffer(self._map, dtype=np.uint8)
        view.fill(1)
        del view

    def free(self) -> None:
        self._map.close()


def touched(n_bytes: int) -> Touched:
    return Touched(n_bytes)


# -------------------------------------------------------------------------------------------------- the probe
def test_rss_probe_gives_each_phase_its_own_peak_and_growth():
    probe = pm.MemoryProbe("rss")
    probe.start()
    probe.enter("rollout")
    touched(96 * MIB).free()  # freed before the phase ends: a peak without growth
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
    assert s["update"]["rss_anon_growth_mb"] == pytest.approx(48, abs=4)  # heap, not library pages
    assert s["eval"]["rss_peak_over_entry_mb"] < 4
    assert set(s) == {"setup", "rollout", "update", "eval"}
    assert "alloc_peak_mb" not in s["rollout"] and "rss_interval_ms" not in s["rollout"]
    # The resets also reset getrusage's peak: the probe keeps the trial's peak itself.
    assert probe.peak_mb() == pytest.approx(max(phase["rss_peak_mb"] for phase in s.values()), abs=2)
    assert s["rollout"]["rss_peak_mb"] >= s["rollout"]["rss_peak_over_entry_mb"] + 50
    kept.free()


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
    for block in kept:
        block.free()


def test_sampler_fallback_records_its_interval_and_sees_a_held_peak():
    probe = pm.MemoryProbe("rss", method="sampler", interval_s=0.001)
    probe.start()
    assert probe.method == "sampler"
    probe.enter("update")
    base = probe._proc.rss_kib()
    held = touched(64 * MIB)
    # The sampler sees the peak once it has sampled while the memory is resident.
    assert wait_for(lambda: probe._sampler.peak(0) - base >= 60 * 1024)
    held.free()
    probe.exit("update")
    probe.stop()
    s = probe.summary()["update"]
    assert s["rss_method"] == "sampler" and s["rss_interval_ms"] == 1.0
    assert s["rss_peak_over_entry_mb"] == pytest.approx(64, abs=4)


def test_full_probe_sees_torch_tensors_and_tells_allocated_from_resident():
    probe = pm.MemoryProbe("full")
    probe.start()
    probe.enter("rollout")
    # A fresh anonymous mapping: allocated, not resident until written (what np.zeros of a large buffer usually gets
    # from calloc; but calloc may also serve it from a free heap chunk, which it zeroes by writing, so resident:
    # which one depends on the heap's history, and np.zeros here once read 61 MB resident in the full suite).
    reserved = mmap.mmap(-1, 64 * MIB)
    probe.exit("rollout")
    probe.enter("update")
    filled = torch.frombuffer(reserved, dtype=torch.uint8)
    filled.fill_(1)  # the reserved buffer written: resident now, nothing new allocated
    tensor = torch.ones(16 * MIB // 4 * 4)  # 64 MiB of float32 from torch's allocator (which may reuse resident heap)
    del tensor
    probe.exit("update")
    probe.stop()
    s = probe.summary()
    assert "alloc_error" not in s["rollout"]
    assert s["rollout"]["alloc_growth_mb"] == pytest.approx(64, abs=1)
    assert s["rollout"]["rss_growth_mb"] < 8  # reserved, but hardly resident
    assert s["update"]["alloc_peak_over_entry_mb"] == pytest.approx(64, abs=1)  # the tensor: tracemalloc would say 0
    assert abs(s["update"]["alloc_growth_mb"]) < 1
    assert s["update"]["rss_growth_mb"] >= 60  # the reserved buffer, resident once written
    assert s["update"]["rss_peak_over_entry_mb"] >= 60
    assert s["update"]["alloc_peak_mb"] >= s["rollout"]["alloc_growth_mb"] + 63  # totals since the trial started
    del filled
    reserved.close()


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


def test_sb3_replay_buffer_option_pair_is_checked_before_anything_runs():
    spec = TrialSpec("sb3-dqn", "CartPole-v1", 0, 100, overrides={"optimize_memory_usage": True})
    with pytest.raises(UserError, match="optimize_memory_usage = true needs handle_timeout_termination = false"):
        spec.resolve()
    ok = TrialSpec("sb3-dqn", "CartPole-v1", 0, 100, overrides={"optimize_memory_usage": True,
                                                                   "handle_timeout_termination": False})  # fmt: skip
    assert ok.resolve().config.handle_timeout_termination is False


# ------------------------------------------------------------------------------------------ suite profile memory
def test_plan_has_the_baseline_each_toggle_and_all_together():
    plan = pm.plan_profile("ppo", "CartPole-v1", toggles=["n_steps=64", "batch_size=128"], overrides={"n_epochs": 5},
                           steps=512, repeats=2, mode="rss")  # fmt: skip
    assert [v.name for v in plan.variants] == ["baseline", "n_steps=64", "batch_size=128", "all toggles"]
    assert [v.changes for v in plan.variants] == [{}, {"n_steps": 64}, {"batch_size": 128}, {"n_steps": 64, "batch_size": 128}]
    for v in plan.variants:
        assert v.spec.overrides == {"n_epochs": 5, **v.changes}
        assert (v.spec.total_timesteps, v.spec.eval_freq, v.spec.memory_profile) == (512, 512, "rss")
    assert len({v.spec.resolve().key for v in plan.variants}) == 4
    assert [(r, v.name) for r, v in plan.runs()][:5] == [
        (0, "baseline"), (0, "n_steps=64"), (0, "batch_size=128"), (0, "all toggles"), (1, "baseline")]  # fmt: skip


def test_default_slice_covers_two_rollouts_of_on_policy_configs():
    assert pm.plan_profile("ppo", "LunarLander-v3", mode="rss").steps == 2 * 16 * 1024
    assert pm.plan_profile("ppo", "CartPole-v1", mode="rss").steps == 3072
    assert pm.plan_profile("sb3-dqn", "CartPole-v1", mode="rss").steps == 3072  # its n_steps is n-step returns
    short = pm.plan_profile("ppo", "LunarLander-v3", steps=1000, mode="rss")
    assert short.notes and "shorter than one rollout (16,384" in short.notes[0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"toggles": ["nonsense=1"]}, "--toggle nonsense: ppo has no config field 'nonsense'; fields: "),
        (
            {"toggles": ["n_steps=32"]},
            r"--toggle n_steps=32: the baseline already has n_steps = 32; set the baseline "
            r"with --set n_steps=OTHER",
        ),  # fmt: skip
        ({"toggles": ["n_steps"]}, "--toggle expects NAME=VALUE, got 'n_steps'"),
        ({"toggles": ["n_steps=8", "n_steps=16"]}, "--toggle n_steps is given twice"),
        ({"toggles": ["n_steps=abc"]}, "n_steps: expected an integer, got 'abc'"),
        ({"repeats": 0}, "--repeats must be >= 1, got 0"),
        ({"steps": 0}, "--steps must be >= 1, got 0"),
        ({"mode": "off"}, "unknown profile mode 'off'; allowed: rss, full"),
    ],
)
def test_profile_mistakes_are_user_errors(kwargs, message):
    with pytest.raises(UserError, match=message):
        pm.plan_profile("ppo", "CartPole-v1", **kwargs)


def test_sb3_dqn_optimize_memory_usage_toggle_explains_the_fix():
    with pytest.raises(UserError, match="needs handle_timeout_termination = false"):
        pm.plan_profile("sb3-dqn", "CartPole-v1", toggles=["optimize_memory_usage=true"], mode="rss")
    plan = pm.plan_profile("sb3-dqn", "CartPole-v1", toggles=["optimize_memory_usage=true"],
                           overrides={"handle_timeout_termination": False}, mode="rss")  # fmt: skip
    assert [v.name for v in plan.variants] == ["baseline", "optimize_memory_usage=true"]


def fake_run(variant: str, repeat: int, update_peak: float, *, status: str = "ok", alloc: float | None = None):
    phase = {"rss_peak_mb": update_peak, "rss_peak_over_entry_mb": update_peak - 300, "rss_growth_mb": 0.5}
    if alloc is not None:
        phase.update(alloc_peak_mb=alloc, alloc_peak_over_entry_mb=alloc / 2, alloc_growth_mb=0.0)
    return pm.ProfileRun(variant=variant, repeat=repeat, key="k", status=status, error=None, steps=100, wall_time_s=1.0,
                         baseline_rss_mb=200.0, peak_rss_mb=update_peak + 1, phases={"update": phase})  # fmt: skip


def test_summary_pairs_ratios_by_repeat_and_leaves_out_failures_and_tiny_baselines():
    plan = pm.plan_profile("ppo", "CartPole-v1", toggles=["n_steps=64"], steps=100, repeats=3, mode="rss")
    runs = [
        fake_run("baseline", 0, 400.0, alloc=0.5), fake_run("n_steps=64", 0, 300.0, alloc=0.9),
        fake_run("baseline", 1, 500.0, alloc=0.5), fake_run("n_steps=64", 1, 350.0, alloc=0.9),
        fake_run("baseline", 2, 450.0), fake_run("n_steps=64", 2, 1.0, status="failed"),
    ]  # fmt: skip
    s = pm.summarise(runs, plan).set_index(["variant", "row", "measure"])
    base = s.loc[("baseline", "update", "rss_peak_mb")]
    assert (base["n"], base["median"], base["min"], base["max"]) == (3, 450.0, 400.0, 500.0)
    toggled = s.loc[("n_steps=64", "update", "rss_peak_mb")]
    assert (toggled["n"], toggled["median"]) == (2, 325.0)
    # Paired by repeat: 300/400 and 350/500, not 325/450.
    assert (toggled["ratio_min"], toggled["ratio_max"]) == (0.7, 0.75)
    assert toggled["ratio_median"] == pytest.approx(0.725)
    above = s.loc[("n_steps=64", "update", "rss_above_start_mb")]
    assert above["median"] == 125.0 and above["ratio_min"] == pytest.approx(100 / 200)
    assert s.loc[("n_steps=64", "trial", "rss_peak_mb")]["median"] == 326.0
    assert np.isnan(s.loc[("n_steps=64", "update", "alloc_peak_mb")]["ratio_median"])  # 0.5 MB baseline: noise
    assert np.isnan(s.loc[("baseline", "update", "rss_peak_mb")]["ratio_median"])
    assert pm.format_ratio(0.725, 0.7, 0.75) == "0.72 [0.70, 0.75]" and pm.format_ratio(1.0, 1.0, 1.0) == "1.00"


def test_profile_command_runs_fresh_processes_writes_its_report_and_resumes(tmp_path, capsys, monkeypatch):
    from suite.cli import main

    out = tmp_path / "profile"
    argv = ["profile", "memory", "--algo", "ppo", "--env", "CartPole-v1", "--toggle", "n_steps=64", "--steps", "512",
            "--repeats", "1", "--mode", "rss", "--eval-episodes", "1", "-o", str(out), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "ppo on CartPole-v1, 512 steps from seed 0, 1 repeat(s)" in table and "2/2 runs ok" in table
    lines = [line for line in table.splitlines() if line.startswith(("setup", "rollout", "update", "trial"))]
    assert [line.split()[:2] for line in lines] == [["setup", "baseline"], ["rollout", "baseline"],
                                                     ["update", "baseline"], ["trial", "baseline"]]  # fmt: skip
    runs = (out / pm.RUNS_FILE).read_text().splitlines()
    assert len(runs) == 2
    plan = pm.plan_profile("ppo", "CartPole-v1", toggles=["n_steps=64"], steps=512, repeats=1, mode="rss",
                           n_eval_episodes=1)  # fmt: skip
    done = pm.load_runs(out, plan)
    assert sorted(done) == [("baseline", 0), ("n_steps=64", 0)]
    for run in done.values():
        assert run.status == "ok" and run.steps == 512
        assert set(run.phases) == {*PHASES, "setup"}
        assert run.phases["update"]["rss_method"] == "vmhwm"
        # A fresh process: the trial started from an interpreter that had not trained before.
        assert run.baseline_rss_mb < run.peak_rss_mb
    summary = pd.read_csv(out / "tables" / "profile_summary.csv")
    assert set(summary["variant"]) == {"baseline", "n_steps=64"}
    assert (out / "figures" / "profile_rss_above_start_mb.png").read_bytes().startswith(b"\x89PNG")
    assert "Memory per phase, side by side" in (out / "index.html").read_text()

    # The same command again resumes: nothing left to run, no process started.
    def no_process(*args, **kwargs):
        raise AssertionError("a finished run was run again")

    monkeypatch.setattr(pm, "_run_in_fresh_process", no_process)
    assert main(argv) == 0
    assert "2 of 2 runs already in" in capsys.readouterr().err


def test_profile_interrupted_says_how_to_resume(tmp_path, capsys, monkeypatch):
    from suite.cli import EXIT_INTERRUPTED, main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pm, "run_profile", interrupted)
    code = main(["profile", "memory", "--algo", "ppo", "--env", "CartPole-v1", "-o", str(tmp_path), "--quiet"])
    assert code == EXIT_INTERRUPTED
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"suite: interrupted; finished runs are saved in {tmp_path / pm.RUNS_FILE}. Run the same command "
                       "again to complete the rest.")  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["profile"], "suite: error: suite profile needs a profiler: speed, memory"),
        (["profile", "memory", "--algo", "nope", "--env", "CartPole-v1"], "suite: error: unknown algorithm 'nope'"),
        (
            ["profile", "memory", "--algo", "ppo", "--env", "CartPole-v1", "--toggle", "zzz=1"],
            "suite: error: --toggle zzz: ppo has no config field 'zzz'",
        ),  # fmt: skip
    ],
)
def test_profile_cli_mistakes_are_one_line(argv, message, capsys):
    from suite.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message)


# ----------------------------------------------------------------------------------------- seed000-memory
def test_rollout_weight_counts_every_array_of_the_rollout():
    w = pm.rollout_weight(128, 8, (4, 84, 84), 4)
    assert w["observations"] == 128 * 8 * 4 * 84 * 84 * 4 == 115_605_504
    assert w["actions"] == 128 * 8 * 8 and w["per_step_floats"] == 6 * 128 * 8 * 4
    assert w["total"] == w["observations"] + w["actions"] + w["per_step_floats"]
    assert pm.rollout_weight(128, 8, (4, 84, 84), 1)["observations"] * 4 == w["observations"]


def test_seed000_memory_claim_states_the_computed_rollout_weights():
    import tomllib
    from pathlib import Path

    data = tomllib.loads((Path(__file__).parents[1] / "suite/claims/sets/seed000-memory.toml").read_text())
    notes = " ".join(data["notes"])
    mib, gib = 2**20, 2**30
    pong32, pong8 = pm.rollout_weight(128, 8, (4, 84, 84), 4), pm.rollout_weight(128, 8, (4, 84, 84), 1)
    assert f"{pong32['total'] / mib:.2f} MiB as float32" in notes and f"{pong8['total'] / mib:.2f} MiB as uint8" in notes
    document = pm.rollout_weight(128, 256, (512 + 128,), 8)  # 256 queries x 128 response tokens, int64 context
    assert f"= {document['total'] / mib:.2f} MiB ({document['total'] / gib:.3f} GiB)" in notes
    assert f"float32 = {128 * 256 * 50_257 * 4 / gib:.3f} GiB" in notes
    cell = data["rows"][0]["cells"][0]
    assert (data["kind"], data["metric"], data["rows"][0]["env"]) == ("ratio", "peak_rss_over_baseline_mb", "ALE/Pong-v5")
    assert cell["claimed_a"] / cell["claimed_b"] == pytest.approx(0.695, abs=0.001)
    arms = data["arms"]
    assert set(arms["original"]["overrides"]) == set(arms["optimised"]["overrides"]) == {
        "rollout_storage", "gae_chunk", "grad_accumulation"}  # fmt: skip


# ------------------------------------------------------------------------------------------------ reports
def _run_spec(spec: TrialSpec) -> dict:
    import torch._dynamo  # noqa: F401  (SB3's Adam imports it lazily: ~70 MB that would land in sb3-dqn's setup)

    return run_trial(spec.resolve())


def _in_fresh_process(spec: TrialSpec) -> dict:
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(_run_spec, (spec,))


def test_study_report_has_a_memory_section_with_allocated_vs_resident(tmp_path):
    import torch._dynamo  # noqa: F401  (SB3's Adam imports it lazily: ~70 MB that would land in sb3-dqn's setup)

    from suite.report import write_report
    from suite.report.memory import phase_memory_frame
    from suite.store import ResultsStore

    db = tmp_path / "suite.db"
    with ResultsStore(db) as store:
        for algo, overrides, mode in (("ppo", {}, "rss"), ("sb3-dqn", {"buffer_size": 1_000_000}, "full")):
            spec = TrialSpec(algo, "CartPole-v1", 0, 600, overrides=overrides, n_eval_episodes=1, study="mem",
                             memory_profile=mode)  # fmt: skip
            # sb3-dqn in a fresh interpreter: whether np.zeros of a 16 MB buffer column is resident at once depends on
            # the process's history (glibc raises its mmap threshold after large frees: then calloc zeroes heap pages)
            record = _in_fresh_process(spec) if algo == "sb3-dqn" else run_trial(spec.resolve())
            assert record["status"] == "ok", record["error"]
            store.save_trial(record)
        trials = store.trials(study="mem")
    out = tmp_path / "report"
    write_report(study="mem", db=db, out_dir=out, reps=50, poi_reps=20)
    frame = phase_memory_frame(trials)
    written = pd.read_csv(out / "tables" / "memory_phases.csv")
    assert written[["algo", "row"]].values.tolist() == frame[["algo", "row"]].values.tolist()
    np.testing.assert_allclose(written["rss_above_start_mb"], frame["rss_above_start_mb"])
    dqn = frame[frame["algo"] == "sb3-dqn"].set_index("row")
    # SB3's replay buffer (1M x (2 x 4 float32 obs + int64 action + 3 float32)) is made with np.zeros in setup:
    # ~48 MB allocated there, resident only as it fills (600 steps).
    assert dqn.loc["setup", "alloc_growth_mb"] == pytest.approx(1_000_000 * (2 * 16 + 8 + 3 * 4) / MIB, rel=0.1)
    assert dqn.loc["setup", "rss_growth_mb"] < 16
    assert np.isnan(frame[frame["algo"] == "ppo"]["alloc_peak_mb"]).all()  # rss mode: no allocations
    html = (out / "index.html").read_text()
    assert 'id="memory-phases"' in html and "Memory per phase" in html
    assert "sb3-dqn on CartPole-v1, setup:" in html and "allocated but only" in html
    assert (out / "figures" / "memory_phases.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "figures" / "memory_phases_alloc.png").is_file()
    sections = [line for line in (out / "report.md").read_text().splitlines() if line.startswith("## ")]
    assert sections.index("## Memory per phase") == sections.index("## Speed and memory") + 1
