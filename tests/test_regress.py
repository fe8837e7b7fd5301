"""`suite regress`: the decisions (exact numbers on tiny frames), the plan, revisions, records, the reference, the CLI's
mistakes, and planted regressions in throwaway commits of a temporary copy of the repository.

The planted-regression tests build real revisions (over this venv's packages: ``--deps-env``) and run them through
their own ``suite run``; they are CI-sized (a few trials each). The full detection targets (each plant caught in 3 of
3 runs on the shipped studies, identical revisions passing in 3 of 3) are ``benchmarks/regress_targets.py``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import torch

from suite.cli import main
from suite.errors import UserError
from suite.regress.compare import (
    GroupResult,
    RatioResult,
    Thresholds,
    compare,
    memory_verdict,
    pooled_ratio_intervals,
    rule_text,
    speed_verdict,
    undecided,
    welch_one_sided,
)
from suite.regress.plan import DEFAULT_STUDIES, make_plan, make_plans, study_toml, toml_value
from suite.regress.plants import PLANTS, make_planted_repo
from suite.regress.plants import git as plant_git
from suite.regress.records import BASE_COLUMNS, param_hash, result_hash
from suite.regress.reference import Reference, write_reference
from suite.regress.revisions import extract, resolve_commit, working_tree, working_tree_files
from suite.regress.runner import Slot, Unit, batches, interleaved
from suite.study import load_study

REPO = Path(__file__).resolve().parents[1]
STUDIES = REPO / "tests" / "studies"
"""The CI-sized studies of the planted-regression tests."""


# -- statistics: exact answers on tiny inputs -----------------------------------------------------------------
def test_pooled_ratio_intervals_pool_the_variance_over_comparisons():
    a, b = np.log([0.80, 0.90]), np.log([1.00, 1.04, 0.98])
    out = pooled_ratio_intervals({"a": a, "b": b}, alpha=0.05)
    df = 1 + 2
    pooled = math.sqrt((((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / df)
    t = scipy.stats.t.ppf(0.975, df)
    # a's own sd (0.083) is above the pooled one (0.058): its interval uses its own
    for key, x, s in (("a", a, max(pooled, a.std(ddof=1))), ("b", b, max(pooled, b.std(ddof=1)))):
        ratio, lo, hi, n = out[key]
        half = t * s / math.sqrt(x.size)
        assert n == x.size and ratio == pytest.approx(math.exp(x.mean()))
        assert (lo, hi) == pytest.approx((math.exp(x.mean() - half), math.exp(x.mean() + half)))


def test_pooled_ratio_intervals_edge_cases():
    out = pooled_ratio_intervals({"x": [math.log(0.5)] * 3, "one": [math.log(2.0)], "none": []}, 0.05)
    assert out["x"] == pytest.approx((0.5, 0.5, 0.5, 3))  # no spread: the point
    ratio, lo, hi, n = out["one"]  # one repeat: the pooled sd from the others gives it an interval
    assert ratio == pytest.approx(2.0) and lo == pytest.approx(2.0) and n == 1
    assert math.isnan(out["none"][0])
    ratio, lo, hi, n = pooled_ratio_intervals({"only": [0.1]}, 0.05)["only"]  # no degrees of freedom at all
    assert ratio == pytest.approx(math.exp(0.1)) and math.isnan(lo) and math.isnan(hi)


def test_welch_one_sided_matches_scipy_and_handles_constant_samples():
    head, base = [9.0, 9.5, 9.2], [320.0, 250.0, 280.0]
    lower, higher = welch_one_sided(head, base)
    assert lower == pytest.approx(scipy.stats.ttest_ind(head, base, equal_var=False, alternative="less").pvalue)
    assert lower + higher == pytest.approx(1.0)
    assert welch_one_sided([9.0, 9.0], [500.0, 500.0]) == (0.0, 1.0)  # exact difference, no spread
    assert welch_one_sided([500.0, 500.0], [500.0, 500.0]) == (1.0, 1.0)
    assert all(math.isnan(p) for p in welch_one_sided([1.0], [2.0, 3.0]))


@pytest.mark.parametrize(
    ("ratio", "lo", "hi", "verdict"),
    [
        (0.80, 0.75, 0.85, "slower"),  # the whole interval below 1/1.1 = 0.909
        (0.85, 0.78, 0.93, "same"),  # significant, the estimate beyond the factor, but not the whole interval
        (0.95, 0.92, 0.98, "same"),  # significant but within the factor
        (0.80, 0.60, 1.05, "same"),
        (1.30, 1.20, 1.40, "faster"),
        (1.00, math.nan, math.nan, "n/a"),
    ],
)
def test_speed_verdict_needs_the_whole_interval_beyond_the_factor(ratio, lo, hi, verdict):
    assert speed_verdict(ratio, lo, hi, 1.1) == verdict


@pytest.mark.parametrize(
    ("ratio", "lo", "hi", "increase", "verdict"),
    [
        (1.20, 1.19, 1.21, 115.0, "hungrier"),
        (1.20, 1.19, 1.21, 4.0, "same"),  # a 20% rise of a 20 MB phase peak is below the 8 MB floor
        (1.05, 1.04, 1.06, 30.0, "same"),
        (1.20, 1.05, 1.35, 115.0, "same"),  # the interval reaches below the factor
        (0.70, 0.69, 0.71, -100.0, "leaner"),
    ],
)
def test_memory_verdict_needs_the_whole_interval_beyond_the_factor_and_the_floor(ratio, lo, hi, increase, verdict):
    assert memory_verdict(ratio, lo, hi, increase, 1.1, 8.0) == verdict


def test_thresholds_refuse_nonsense():
    for kwargs in ({"speed": 0.9}, {"memory": 0.5}, {"return_margin": -1}, {"alpha": 0.0}):
        with pytest.raises(UserError):
            Thresholds(**kwargs)


def test_rule_text_states_every_threshold():
    text = " ".join(rule_text(Thresholds(speed=1.2, memory=1.3, return_margin=0.2, alpha=0.01)))
    for needle in ("p < 0.01", "drop > 0.2", "below 1/1.2", "above 1.3", "99%", "8 MB"):
        assert needle in text


# -- decisions on synthetic runs frames -----------------------------------------------------------------------
def _runs(
    side: str,
    *,
    finals=(300.0, 250.0, 280.0),
    sps=1000.0,
    rss=500.0,
    repeats=2,
    version="1.0",
    result="r",
    status="ok",
    extra=None,
):
    rows = []
    for r in range(repeats):
        for seed, final in enumerate(finals):
            row = dict.fromkeys(BASE_COLUMNS)
            row.update(
                side=side, repeat=r, key=f"k{seed}-{version}", algo="ppo", algo_version=version, env_id="CartPole-v1",
                env_kwargs="{}", env_label="CartPole-v1", seed=seed, budget=5000, config_hash="c", status=status,
                final_return=final, auc=final / 2, steps_per_second=sps * (1 + 0.01 * ((seed + r) % 3)),
                peak_rss_mb=rss + 0.5 * seed, result_hash=f"{result}{seed}{final}", param_hash=f"p{result}{seed}",
            )  # fmt: skip
            row.update(extra or {})
            rows.append(row)
    return pd.DataFrame(rows)


def _decide(base, head, **kwargs):
    (result,) = compare(pd.concat([base, head], ignore_index=True), Thresholds(), **kwargs)
    return result


def test_identical_outcomes_are_identical_and_pass():
    g = _decide(_runs("base"), _runs("head"))
    assert g.returns == "identical" and g.identical_seeds == 3
    assert g.speed_verdict == "same" and g.memory_verdict == "same" and g.verdict == "pass"
    assert (g.speed[0].pairs, g.speed[0].repeats) == (6, 2) and g.speed[0].ratio == pytest.approx(1.0)


def test_collapsed_returns_are_worse():
    g = _decide(_runs("base"), _runs("head", finals=(9.4, 9.1, 9.6), result="h"))
    assert g.returns == "worse" and g.failures == ["worse"] and g.p_final < 0.01
    assert g.verdict == "FAIL: worse"


def test_a_small_change_of_returns_is_the_same_and_a_new_version_is_noted():
    g = _decide(_runs("base"), _runs("head", finals=(290.0, 260.0, 270.0), result="h", version="1.1"))
    assert g.returns == "same" and g.identical_seeds == 0
    assert any("version 1.0 -> 1.1" in n for n in g.notes)


def test_results_changed_without_a_version_bump_are_noted():
    g = _decide(_runs("base"), _runs("head", finals=(290.0, 260.0, 270.0), result="h"))
    assert any("version not bumped" in n for n in g.notes)


def test_more_failures_in_head_are_worse():
    head = _runs("head", result="h")
    head.loc[head["seed"] == 1, ["status", "final_return", "auc"]] = ["failed", math.nan, math.nan]
    g = _decide(_runs("base"), head)
    assert g.returns == "worse" and "failed/diverged" in g.returns_detail


def test_slower_and_hungrier_are_caught_and_a_phase_field_counts():
    base = _runs("base", extra={"mem:rollout:rss_peak_over_entry_mb": 30.0})
    head = _runs("head", sps=780.0, rss=505.0, extra={"mem:rollout:rss_peak_over_entry_mb": 145.0})
    g = _decide(base, head)
    assert g.speed_verdict == "slower" and g.speed[0].ratio == pytest.approx(0.78, rel=1e-3)
    assert g.memory[0].verdict == "same"  # peak RSS +1%
    assert g.memory[1].measure == "mem:rollout:rss_peak_over_entry_mb" and g.memory[1].verdict == "hungrier"
    assert g.failures == ["slower", "hungrier"]


def test_speed_against_a_reference_is_shown_but_does_not_gate():
    g = _decide(_runs("base"), _runs("head", sps=500.0), paired_speed=False)
    assert g.speed_verdict == "info" and g.speed[0].ratio < 0.6 and g.failures == []


def test_the_cpu_clock_catches_what_load_hides_on_the_wall_clock():
    base = _runs("base", extra={"cpu_steps_per_second": 2000.0})
    head = _runs("head", extra={"cpu_steps_per_second": 1600.0})  # same wall-clock speed, 20% more CPU per step
    head.loc[head["repeat"] == 1, "steps_per_second"] *= 1.3  # a load change between the runs
    g = _decide(base, head)
    assert [s.measure for s in g.speed] == ["steps_per_second", "cpu_steps_per_second"]
    assert g.speed[0].verdict == "same" and g.speed[1].verdict == "slower" and g.failures == ["slower"]


def _clocks(side, *, wall=1000.0, cpu=2000.0, unstarved=1100.0, **kwargs):
    """Runs with all three clocks (unstarved=None: records without the run-queue wait, as older builds wrote them)."""
    runs = _runs(side, sps=wall, extra={"cpu_steps_per_second": cpu, "unstarved_steps_per_second": unstarved}, **kwargs)
    runs["cpu_steps_per_second"] = runs["steps_per_second"] * cpu / wall  # each clock with the same per-trial spread
    if unstarved is not None:
        runs["unstarved_steps_per_second"] = runs["steps_per_second"] * unstarved / wall
    return runs


def test_a_load_that_swings_slows_the_wall_clock_alone_and_passes():
    # the false alarm of results/regress-targets (identical revisions, wall 0.59x, CPU 0.98x): the run-queue wait
    # takes the other processes' load out of the wall clock, so only the raw wall clock moves, and it does not gate
    g = _decide(_clocks("base"), _clocks("head", wall=600.0, cpu=2000.0, unstarved=1100.0))
    assert [s.measure for s in g.speed] == ["steps_per_second", "cpu_steps_per_second", "unstarved_steps_per_second"]
    wall, cpu, unstarved = g.speed
    assert wall.ratio == pytest.approx(0.6) and wall.hi < 1 / 1.1 and wall.verdict == "info"
    assert cpu.verdict == unstarved.verdict == "same" and unstarved.ratio == pytest.approx(1.0)
    assert g.speed_rule == "cpu + unstarved wall" and g.speed_verdict == "same" and g.verdict == "pass"
    assert undecided(g, Thresholds()) == []  # the raw wall clock never asks for more repeats either


def test_a_change_that_waits_is_slower_on_the_unstarved_wall_clock():
    # a sleep in the update: the CPU clock does not see it, the unstarved wall clock does
    g = _decide(_clocks("base"), _clocks("head", wall=700.0, cpu=2000.0, unstarved=770.0))
    assert g.speed[1].verdict == "same" and g.speed[2].verdict == "slower"
    assert g.speed[2].ratio == pytest.approx(0.7) and g.failures == ["slower"] and g.speed_rule == "cpu + unstarved wall"


def test_records_without_the_run_queue_wait_keep_the_older_rule():
    old_base, old_head = _clocks("base", unstarved=None), _clocks("head", wall=600.0, unstarved=None)
    g = _decide(old_base, old_head)
    assert [s.measure for s in g.speed] == ["steps_per_second", "cpu_steps_per_second"]
    assert g.speed_rule == "wall + cpu" and g.speed[0].verdict == "slower" and g.failures == ["slower"]
    # one revision with it, one without (an older BASE): the older rule as well
    g = _decide(old_base, _clocks("head", wall=600.0, unstarved=1100.0))
    assert g.speed_rule == "wall + cpu" and g.failures == ["slower"]


def test_the_verdict_table_names_the_rule_and_every_clock():
    from suite.regress.output import verdict_frame

    new = _decide(_clocks("base"), _clocks("head", wall=600.0))
    old = _decide(_clocks("base", unstarved=None), _clocks("head", unstarved=None))
    (row_new, row_old) = verdict_frame([new, old]).to_dict("records")
    assert row_new["speed_rule"] == "cpu + unstarved wall" and row_new["wall_speed_verdict"] == "info"
    assert row_new["unstarved_speed_ratio"] == pytest.approx(1.0) and row_new["speed_verdict"] == "same"
    assert row_new["speed_cell"].startswith("0.600 [") and "; unstarved wall 1.000 [" in row_new["speed_cell"]
    assert row_old["speed_rule"] == "wall + cpu" and math.isnan(row_old["unstarved_speed_ratio"])
    assert "unstarved" not in row_old["speed_cell"]


def test_a_nondeterministic_head_fails():
    head = _runs("head")
    head.loc[(head["repeat"] == 1) & (head["seed"] == 2), "result_hash"] = "other"
    g = _decide(_runs("base"), head)
    assert g.returns == "nondeterministic" and g.failures == ["nondeterministic"]


def test_a_group_only_one_side_ran_is_missing_not_failing():
    runs = pd.concat([_runs("base"), _runs("head").assign(algo="grpo")], ignore_index=True)
    results = {g.algo: g for g in compare(runs, Thresholds())}
    assert results["grpo"].returns == "missing" and results["grpo"].failures == []


# -- the plan: one explicit study file that every revision reads the same way --------------------------------
def _caps(algos=("ppo", "grpo", "sb3-ppo"), envs=("CartPole-v1", "TextMatch-v0", "ALE/Pong-v5")):
    kinds = {
        "CartPole-v1": ("discrete", "vector"),
        "TextMatch-v0": ("discrete", "vector"),
        "ALE/Pong-v5": ("discrete", "image"),
    }
    return {
        "algorithms": [{"id": a, "action_spaces": ["discrete", "box"], "observations": ["vector", "image"]} for a in algos],
        "envs": [{"id": e, "action_space": kinds[e][0], "observation": kinds[e][1]} for e in envs],
    }


def test_toml_values_round_trip():
    data = {"a": 'x"y', "b": [1, 2.5, True], "c": {"d": {"schedule": "linear", "start": 1e-3}}, "CartPole-v1": 3}
    text = "".join(f"{k} = {toml_value(v)}\n" if k.isidentifier() else f'"{k}" = {toml_value(v)}\n' for k, v in data.items())
    assert tomllib.loads(text) == data


def test_the_written_study_gives_the_same_trials_as_the_shipped_one(tmp_path):
    plan = make_plan("regression", tier=None, seeds=None, threads=None, capabilities=[_caps(
        ("ppo", "ppo-adaptive-clip", "ppo-rlvr-prm", "grpo", "grpo-pairwise", "sb3-ppo"))])  # fmt: skip
    (tmp_path / "s.toml").write_text(plan.toml)
    keys = sorted(s.resolve().key for s in load_study(str(tmp_path / "s.toml")).trials())
    assert keys == sorted(s.resolve().key for s in load_study("regression").trials())
    assert plan.n_trials == len(keys) == 6 and plan.skipped == ()


def test_the_plan_leaves_out_what_a_revision_lacks():
    plan = make_plan("regression", tier=None, seeds="0-1", threads=None,
                     capabilities=[_caps(), _caps(algos=("ppo", "grpo"))])  # fmt: skip
    assert [g.algo for g in plan.groups] == ["ppo", "grpo"] and plan.seeds == (0, 1)
    assert any("sb3-ppo" in s and "every revision" in s for s in plan.skipped)
    with pytest.raises(UserError, match="no \\(algorithm, env\\) that every revision can run"):
        make_plan("regression-memory", tier=None, seeds=None, threads=None, capabilities=[_caps(envs=("CartPole-v1",))])


def _ratio(measure, ratio, lo, hi, verdict, base=100.0, head=None):
    return RatioResult(measure, ratio, lo, hi, 2, 2, base, base * ratio if head is None else head, verdict)


@pytest.mark.parametrize(
    ("speed", "memory", "expected"),
    [
        ((0.82, 0.57, 1.19, "same"), (1.0, 0.99, 1.01, "same"), ["steps_per_second"]),  # beyond 1/1.1, interval not
        ((0.95, 0.70, 1.30, "same"), (1.0, 0.99, 1.01, "same"), []),  # inside the threshold: more runs cannot fail it
        ((0.80, 0.70, 0.88, "slower"), (1.0, 0.99, 1.01, "same"), []),  # decided: slower
        ((1.0, 0.9, 1.1, "same"), (1.25, 1.05, 1.45, "same"), ["peak_rss_mb"]),  # hungrier by the estimate only
        ((1.0, 0.9, 1.1, "same"), (1.25, 1.05, 1.45, "same", 20.0, 24.0), []),  # below the MB floor: never counts
    ],
)
def test_a_comparison_is_undecided_when_its_estimate_is_beyond_a_threshold_and_its_interval_is_not(speed, memory, expected):
    group = GroupResult("ppo", "CartPole-v1", "CartPole-v1", [0], "identical", "", budget=2048)
    group.speed = [_ratio("steps_per_second", *speed)]
    group.memory = [_ratio("peak_rss_mb", *memory[:4], *memory[4:])]
    assert undecided(group, Thresholds()) == expected


def test_an_undecided_comparison_asks_for_repeats_on_its_gating_clocks_only():
    group = GroupResult("ppo", "CartPole-v1", "CartPole-v1", [0], "identical", "", budget=2048)
    group.speed = [_ratio("steps_per_second", 0.6, 0.4, 0.9, "info"), _ratio("cpu_steps_per_second", 1.0, 0.9, 1.1, "same"),
                   _ratio("unstarved_steps_per_second", 0.82, 0.57, 1.19, "same")]  # fmt: skip
    assert undecided(group, Thresholds()) == ["unstarved_steps_per_second"]
    group.speed[2] = _ratio("unstarved_steps_per_second", 0.98, 0.9, 1.07, "same")
    assert undecided(group, Thresholds()) == []  # the raw wall clock's 0.6 is shown only


def test_only_the_units_of_undecided_comparisons_run_again():
    from suite.regress.gate import _undecided_units

    plans = make_plans(["regression", str(STUDIES / "regress-speed.toml")], tier=None, seeds=None, threads=None,
                       capabilities=[_caps(("ppo", "grpo", "sb3-ppo"), ("CartPole-v1",))])  # fmt: skip
    slow = GroupResult("ppo", "CartPole-v1", "CartPole-v1", [0, 1], "identical", "", budget=4096)
    slow.speed = [_ratio("cpu_steps_per_second", 0.82, 0.57, 1.19, "same")]
    fine = GroupResult("grpo", "CartPole-v1", "CartPole-v1", [0], "identical", "", budget=2048)
    fine.speed = [_ratio("cpu_steps_per_second", 0.97, 0.80, 1.17, "same")]
    units = _undecided_units([slow, fine], plans, Thresholds())
    assert units == [Unit("regress-speed", "ppo", "CartPole-v1")]  # the 4,096-step ppo, not the 2,048-step one
    assert _undecided_units([fine], plans, Thresholds()) == []


def test_default_studies_are_shipped_and_distinct():
    plans = make_plans([], tier=None, seeds=None, threads=None, capabilities=[_caps(
        ("ppo", "ppo-adaptive-clip", "ppo-rlvr-prm", "grpo", "grpo-pairwise", "sb3-ppo"))])  # fmt: skip
    assert [p.study.name for p in plans] == list(DEFAULT_STUDIES)
    every = ("ppo", "ppo-adaptive-clip", "ppo-rlvr-prm", "grpo", "grpo-pairwise", "sb3-ppo")
    assert {g.algo for g in plans[0].groups} == {g.algo for g in plans[1].groups} == set(every)  # learning guarded
    budgets = {"ppo-rlvr-prm": 20000, "grpo": 20000, "grpo-pairwise": 20000}
    assert [(g.algo, g.env.id, g.budget, p.seeds) for p in plans[1:] for g in p.groups] == [
        *((a, "TextMatch-v0", budgets.get(a, 10000), (0, 1, 2)) for a in every),
        ("ppo", "ALE/Pong-v5", 1024, (0,)),
    ]
    assert study_toml(plans[2].study, "smoke", [0], 1, plans[2].groups) == plans[2].toml


def test_a_written_study_read_back_gives_the_same_file(tmp_path):
    """The reference keeps the studies as written; --against-reference compares them with a rewrite of themselves,
    which must be the same text (it once tagged the description a second time and said 'the study file differs')."""
    caps = [_caps(("ppo", "ppo-adaptive-clip", "ppo-rlvr-prm", "grpo", "grpo-pairwise", "sb3-ppo"))]
    for plan in make_plans([], tier=None, seeds=None, threads=None, capabilities=caps):
        written = tmp_path / f"{plan.study.name}.toml"
        written.write_text(plan.toml)
        (again,) = make_plans([str(written)], tier=None, seeds=None, threads=None, capabilities=caps)
        assert again.toml == plan.toml


def test_interleaved_order_alternates_every_repeat():
    a, b = Unit("s", "ppo", "CartPole-v1"), Unit("s", "grpo", "CartPole-v1")
    order = [(s.side, s.repeat, s.unit.algo) for s in interleaved(["base", "head"], 3, [a, b])]
    assert order == [
        ("base", 0, "ppo"), ("head", 0, "ppo"), ("base", 0, "grpo"), ("head", 0, "grpo"),
        ("head", 1, "ppo"), ("base", 1, "ppo"), ("head", 1, "grpo"), ("base", 1, "grpo"),
        ("base", 2, "ppo"), ("head", 2, "ppo"), ("base", 2, "grpo"), ("head", 2, "grpo"),
    ]  # fmt: skip
    slot = Slot("head", 1, Unit("regression-memory", "ppo", "ALE/Pong-v5"))
    assert slot.marker(Path("/run")) == Path("/run/head/r1/done-regression-memory.ppo.ALE_Pong-v5")
    assert slot.unit.args() == ["--algo", "ppo", "--env", "ALE/Pong-v5"]


def test_concurrent_batches_run_the_revisions_of_a_repeat_and_unit_together():
    slots = interleaved(["base", "head"], 2, [Unit("s", "ppo"), Unit("s", "grpo")])
    assert batches(slots, "interleaved") == [[s] for s in slots]
    together = [[(s.side, s.repeat, s.unit.algo) for s in b] for b in batches(slots, "concurrent")]
    assert together == [[("base", 0, "ppo"), ("head", 0, "ppo")], [("base", 0, "grpo"), ("head", 0, "grpo")],
                        [("head", 1, "ppo"), ("base", 1, "ppo")], [("head", 1, "grpo"), ("base", 1, "grpo")]]  # fmt: skip


def test_units_split_a_study_by_algorithm_and_env():
    plan = make_plan("regression", tier=None, seeds="0-2", threads=None, capabilities=[_caps(
        ("ppo", "ppo-adaptive-clip", "ppo-rlvr-prm", "grpo", "grpo-pairwise", "sb3-ppo"))])  # fmt: skip
    assert plan.units[:2] == [("ppo", "CartPole-v1"), ("ppo-adaptive-clip", "CartPole-v1")] and len(plan.units) == 6
    assert plan.unit_trials("ppo", "CartPole-v1") == 3 and plan.n_trials == 18


# -- revisions: content keys and extraction, without writing to the repository -----------------------------------
@pytest.fixture
def tiny_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    plant_git(repo, "init", "-q")
    (repo / ".gitignore").write_text("ignored/\n")
    (repo / "a.py").write_text("x = 1\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    plant_git(repo, "add", "-A")
    plant_git(repo, "commit", "-q", "-m", "base")
    return repo


def test_a_clean_tree_is_its_commit_and_edits_change_the_key(tiny_repo):
    head = resolve_commit(tiny_repo, "HEAD")
    clean = working_tree(tiny_repo)
    assert not clean.dirty and clean.key == head.key and clean.commit == head.commit
    (tiny_repo / "ignored").mkdir()
    (tiny_repo / "ignored" / "big.bin").write_text("not part of the build")
    assert working_tree(tiny_repo).key == head.key  # ignored files do not count
    (tiny_repo / "new.py").write_text("y = 2\n")
    dirty = working_tree(tiny_repo)
    assert dirty.dirty and dirty.key != head.key and "uncommitted" in dirty.describe()
    (tiny_repo / "new.py").unlink()
    (tiny_repo / "a.py").write_text("x = 1\n")
    assert working_tree(tiny_repo).key == head.key


def test_a_dirty_key_equals_the_commit_of_the_same_files(tiny_repo):
    (tiny_repo / "a.py").write_text("x = 2\n")
    dirty = working_tree(tiny_repo)
    plant_git(tiny_repo, "commit", "-q", "-am", "two")
    assert resolve_commit(tiny_repo, "HEAD").key == dirty.key  # blob ids computed in Python match git's


def test_extract_writes_the_commit_or_the_working_tree(tiny_repo, tmp_path):
    (tiny_repo / "a.py").write_text("x = 3\n")
    (tiny_repo / "b.py").write_text("z = 4\n")
    extract(tiny_repo, resolve_commit(tiny_repo, "HEAD"), tmp_path / "commit")
    extract(tiny_repo, working_tree(tiny_repo), tmp_path / "tree")
    assert (tmp_path / "commit" / "a.py").read_text() == "x = 1\n" and not (tmp_path / "commit" / "b.py").exists()
    assert (tmp_path / "tree" / "a.py").read_text() == "x = 3\n" and (tmp_path / "tree" / "b.py").exists()
    assert (tmp_path / "commit" / "run.sh").stat().st_mode & 0o100
    assert sorted(working_tree_files(tiny_repo)) == [".gitignore", "a.py", "b.py", "run.sh"]


def test_unknown_revision_is_a_user_error(tiny_repo):
    with pytest.raises(UserError, match="unknown revision 'nope'"):
        resolve_commit(tiny_repo, "nope")


# -- records: hashes of what must not move ------------------------------------------------------------------------
def test_result_hash_ignores_clocks_and_sees_every_return():
    row = {"status": "ok", "steps": 100, "final_eval_mean": 9.5, "final_eval_std": 0.5}
    curve = pd.DataFrame({"step": [10, 30], "return": [10.0, 20.0], "length": [10, 20]})
    evals = pd.DataFrame({"step": [100, 100], "final": [True, True], "episode": [0, 1], "return": [9.0, 10.0],
                          "length": [9.0, 10.0], "wall_time_s": [1.0, 1.0]})  # fmt: skip
    h = result_hash(row, curve, evals)
    assert result_hash(row, curve, evals.assign(wall_time_s=5.0)) == h
    assert result_hash(row, curve.assign(**{"return": [10.0, 20.5]}), evals) != h
    assert result_hash({**row, "final_eval_mean": 9.6}, curve, evals) != h


def test_param_hash_of_a_saved_policy(tmp_path):
    state = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.zeros(2)}
    torch.save({"state_dict": state, "config": {}}, tmp_path / "a.pt")
    torch.save({"state_dict": {k: v.clone() for k, v in state.items()}, "config": {"other": 1}}, tmp_path / "b.pt")
    torch.save({"state_dict": {**state, "b": torch.tensor([0.0, 1e-7])}}, tmp_path / "c.pt")
    a = param_hash(tmp_path / "a.pt")
    assert a is not None and a == param_hash(tmp_path / "b.pt") != param_hash(tmp_path / "c.pt")
    assert param_hash(tmp_path / "missing.pt") is None


# -- the reference folder ----------------------------------------------------------------------------------------
def test_reference_round_trip_and_machine_check(tmp_path):
    runs = _runs("base", version="1.10").assign(config_hash="0123", param_hash=None)  # text that looks like numbers
    machine = {"cpu_model": "X", "cpu_count_usable": 2}
    write_reference(tmp_path / "ref", runs=runs, studies={"regression": "name = 'regression'\n"}, commit="c" * 40,
                    key="k" * 64, repeats=2, machine=machine, packages={"torch": "2"}, suite_version="0.1.0")  # fmt: skip
    ref = Reference(tmp_path / "ref")
    assert ref.repeats == 2 and ref.study_files == [tmp_path / "ref" / "studies" / "regression.toml"]
    pd.testing.assert_frame_equal(ref.runs[runs.columns].fillna("-"), runs.fillna("-"), check_dtype=False)
    assert ref.machine_mismatch(machine) is None
    assert "another machine" in str(ref.machine_mismatch({"cpu_model": "Y", "cpu_count_usable": 2}))
    # the instruction set counts where both sides recorded it (a reference made before it was recorded has none)
    assert ref.machine_mismatch({**machine, "cpu_capability": "AVX512"}) is None
    write_reference(tmp_path / "ref2", runs=runs, studies={"regression": "name = 'regression'\n"}, commit="c" * 40,
                    key="k" * 64, repeats=2, machine={**machine, "cpu_capability": "AVX2"}, packages={"torch": "2"},
                    suite_version="0.1.0")  # fmt: skip
    mismatch = Reference(tmp_path / "ref2").machine_mismatch({**machine, "cpu_capability": "AVX512"})
    assert "cpu_capability: AVX2 vs AVX512" in str(mismatch)
    assert "suite regress --write-reference" in (tmp_path / "ref" / "README.md").read_text()
    with pytest.raises(UserError, match="--write-reference"):
        Reference(tmp_path / "nothing")


# -- the command line: mistakes are one line and exit 2 -------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["regress"], "give a BASE revision"),
        (["regress", "no-such-rev-xyz"], "unknown revision 'no-such-rev-xyz'"),
        (["regress", "HEAD", "--repeats", "0"], "--repeats must be >= 1"),
        (["regress", "HEAD", "--max-repeats", "0"], "--max-repeats must be >= 1"),
        (["regress", "HEAD", "--speed-threshold", "0.9"], "--speed-threshold must be a factor >= 1"),
        (["regress", "--against-reference", "--write-reference"], "exclude each other"),
        (["regress", "--against-reference", "--seeds", "0-3"], "runs the reference's own study"),
        (["regress", "--against-reference", "--reference", "/nonexistent/ref"], "no reference run in /nonexistent/ref"),
        (["regress", "HEAD", "--deps-env", "/nonexistent/venv"], "--deps-env /nonexistent/venv: no bin/python"),
        (["regress", "HEAD", "--schedule", "sideways"], "invalid choice: 'sideways'"),
    ],
)
def test_regress_mistakes_are_one_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    code = main([*argv, "--cache", str(tmp_path / "cache"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("suite: error: ") and message in err[0], err


def test_the_command_line_leaves_the_schedule_to_the_gate(monkeypatch):
    """Without --schedule the gate picks concurrent twins where the machine has a CPU per revision (an explicit
    'interleaved' default on the command line overrode that once, and missed a 30% slower update under load)."""
    from suite.cli import build_parser
    from suite.regress.gate import RegressOptions, _validate, default_schedule

    args = build_parser().parse_args(["regress", "HEAD"])
    assert args.schedule is None
    opts = RegressOptions(base="HEAD", schedule=args.schedule)
    _validate(opts)
    assert opts.schedule == default_schedule(1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert default_schedule(1) == "concurrent" and default_schedule(2) == "interleaved"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert default_schedule(1) == "interleaved"


def test_outside_a_git_checkout_is_a_user_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["regress", "HEAD", "--quiet"]) == 2
    assert "not inside a git checkout" in capsys.readouterr().err


# -- planted regressions in throwaway commits of a temporary copy of the repository ------------------------------
# The plants (suite/regress/plants.py) wrap stable interfaces (the trial's phases and envs, the PPO trainer's loss).
# CI runs the gate's detection at the default thresholds on the CI-sized studies of tests/studies/: identical code
# passes with the speed gate on, a twice-as-long update is slower, a 128 MB allocation is hungrier, a flipped loss
# is worse. The Pong frame copy and the shipped studies run as slow tests; benchmarks/regress_targets.py measures
# every plant's detection rate with the shipped studies.
@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    repo = make_planted_repo(REPO, root / "repo")
    return repo, root


def _gate(planted, head: str, studies: list[str], repeats: int = 2, schedule: str | None = None,
          max_repeats: int | None = None, **extra: Any) -> tuple[int, dict[str, dict]]:  # fmt: skip
    """A gate run of ``base`` against ``head`` with the defaults but for what is given (``schedule`` None: the gate's
    own choice); ``max_repeats=repeats`` where a test counts the slots (undecided comparisons would add some);
    ``extra``: further :class:`RegressOptions` fields."""
    from suite.regress import RegressOptions, regress

    repo, root = planted
    out = root / f"run-{head}-{schedule}-{len(list(root.glob('run-*')))}"
    opts = RegressOptions(
        base="base", head=head, studies=studies, repeats=repeats, max_repeats=max_repeats, repo=repo,
        cache=root / "cache", schedule=schedule,
        deps_env=Path(sys.prefix), output=out, report=False, quiet=True, **extra,
    )  # fmt: skip
    code = regress(opts, say=lambda line: None)
    verdicts = pd.read_csv(out / "verdicts.csv", dtype={"algo": str, "env_label": str})
    return code, {f"{r['algo']}/{r['env_label']}": r for r in verdicts.to_dict("records")}


def test_the_plants_apply_to_a_copy_and_leave_the_original_alone(planted):
    repo, _ = planted
    assert plant_git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "base"
    for name, (path, code) in PLANTS.items():
        assert code.strip() in plant_git(repo, "show", f"{name}:{path}")
        assert code.strip() not in (REPO / path).read_text()
    assert plant_git(repo, "diff", "--stat", "base", "same").endswith("1 file changed, 2 insertions(+)")


NO_SPEED_GATE = 10.0
"""A speed threshold no run reaches, for the tests about slots and resuming on the 512-step smoke study, whose
trials (~0.15 CPU s) are too short for a steady speed; the speed gate itself is tested on tests/studies/regress-speed.toml."""


def test_identical_revisions_pass_with_every_gate_on(planted):
    code, verdicts = _gate(planted, "same", [str(STUDIES / "regress-speed.toml")])
    assert set(verdicts) == {"ppo/CartPole-v1", "ppo-adaptive-clip/CartPole-v1"}
    for v in verdicts.values():
        assert v["returns"] == "identical" and v["identical_seeds"] == 2, v
        assert v["speed_verdict"] != "slower" and v["memory_verdict"] != "hungrier", v
        assert v["speed_rule"] == "cpu + unstarved wall" and v["wall_speed_verdict"] == "info", v
        assert v["verdict"].startswith("pass"), v
    assert code == 0


def test_a_twice_as_long_update_is_slower(planted):
    # the update is over half of ppo's training time on CartPole: twice as long, ~0.55-0.6x its CPU-time steps/s
    # (measured at load 21: 0.57 [0.49, 0.67] after 2 repeats), far past the 1/1.1 threshold
    code, verdicts = _gate(planted, "slow-update-2x", [str(STUDIES / "regress-speed.toml")])
    for v in verdicts.values():
        assert v["returns"] == "identical"  # a slower update changes no result
        assert v["speed_verdict"] == "slower" and 0.3 < v["cpu_speed_ratio"] < 0.85, v
    assert code == 1


def test_an_update_that_waits_is_slower_on_the_unstarved_wall_clock(planted):
    # the update sleeps as long again as it computed: the sleep itself takes no CPU time, though the computation after
    # it may run on colder caches (on a quiet machine the CPU clock has read 0.80-0.94x); the unstarved wall clock
    # (wall minus the run-queue wait) keeps the sleep and sees ~0.45-0.6x (the update is most of ppo's time): far
    # beyond what the CPU clock sees, whatever the load
    code, verdicts = _gate(planted, "wait-update-2x", [str(STUDIES / "regress-speed.toml")])
    for v in verdicts.values():
        assert v["returns"] == "identical" and v["speed_rule"] == "cpu + unstarved wall", v
        assert v["unstarved_speed_hi"] < v["cpu_speed_lo"], v  # the wait is seen by the unstarved clock alone
        assert v["unstarved_speed_verdict"] == "slower" and 0.3 < v["unstarved_speed_ratio"] < 0.85, v
        assert v["speed_verdict"] == "slower" and v["verdict"].startswith("FAIL"), v
    assert code == 1


def test_a_128_mb_allocation_is_hungrier(planted):
    code, verdicts = _gate(planted, "alloc-128mb", [str(STUDIES / "regress-speed.toml")])
    for v in verdicts.values():
        assert v["returns"] == "identical" and v["memory_verdict"] == "hungrier", v
        assert 100 < v["peak_rss_mb_head"] - v["peak_rss_mb_base"] < 160, v
    assert code == 1


def test_identical_revisions_pass_smoke(planted):
    code, verdicts = _gate(planted, "same", [str(STUDIES / "regress-smoke.toml")], repeats=2, schedule="interleaved",
                           max_repeats=2, thresholds=Thresholds(speed=NO_SPEED_GATE))  # fmt: skip
    (v,) = verdicts.values()
    assert code == 0 and v["returns"] == "identical" and v["identical_seeds"] == 2
    assert v["speed_verdict"] in ("same", "faster") and v["speed_pairs"] == 4  # measured, not gated
    assert v["memory_verdict"] != "hungrier" and v["verdict"].startswith("pass")
    (run,) = planted[1].glob("run-same-interleaved-*")
    order = [(e["side"], e["repeat"]) for e in map(json.loads, (run / "slots.jsonl").read_text().splitlines())]
    assert order == [("base", 0), ("head", 0), ("head", 1), ("base", 1)]
    assert {"regression.html", "regression.md", "verdicts.csv", "measures.csv", "runs.csv"} <= {p.name for p in run.iterdir()}


def test_a_flipped_loss_is_worse(planted):
    code, verdicts = _gate(planted, "flipped-loss", [str(STUDIES / "regress-returns.toml")], repeats=1)
    v = verdicts["ppo/TextMatch-v0"]
    assert code == 1 and v["returns"] == "worse" and v["verdict"].startswith("FAIL")
    assert v["final_head"] < v["final_base"] / 2


@pytest.mark.slow
def test_a_slower_update_is_slower_on_the_shipped_study(planted):
    # The 30% plant (0.85-0.89x, near the 1/1.1 threshold) needs the gate's undecided repeats to be caught every time
    # (benchmarks/regress_targets.py): 2 repeats alone called it "same" on a quiet machine.
    code, verdicts = _gate(planted, "slow-update-2x", ["regression"], repeats=2)
    v = verdicts["ppo/CartPole-v1"]
    assert v["returns"] == "identical"  # a slower update changes no result
    assert code == 1 and v["speed_verdict"] == "slower", v
    assert 0.4 < v["cpu_speed_ratio"] < 0.8, v


@pytest.mark.slow
def test_an_extra_copy_of_the_observations_is_hungrier(planted):
    code, verdicts = _gate(planted, "obs-copy", ["regression-memory", str(STUDIES / "regress-controls.toml")], repeats=2)
    assert all(verdicts[f"{a}/CartPole-v1"]["memory_verdict"] == "same" for a in ("ppo", "grpo", "sb3-ppo"))  # KBs there
    v = verdicts["ppo/ALE/Pong-v5"]
    assert v["returns"] == "identical"
    # 8 envs x 128 steps of 4x84x84 float32 frames: 115.6 MB more at the peak
    assert code == 1 and v["memory_verdict"] == "hungrier"
    assert 90 < v["peak_rss_mb_head"] - v["peak_rss_mb_base"] < 140, v


def test_a_trial_records_cpu_and_wait_seconds_per_phase_and_the_runs_frame_reads_them():
    from suite.regress.records import summarise
    from suite.trial import TrialSpec, run_trial

    rec = run_trial(TrialSpec(algo="ppo", env_id="TextMatch-v0", seed=0, total_timesteps=256, n_eval_episodes=1).resolve())
    phases = rec["phases"]
    timed = {name: p for name, p in phases.items() if p["calls"]}  # not the memory-only setup entry (0 calls)
    assert set(timed) >= {"rollout", "update", "eval"}
    assert all(0 <= p["cpu_s"] <= 2 * p["time_s"] + 0.05 for p in timed.values())
    waits = Path("/proc/thread-self/schedstat").exists()
    assert all(("wait_s" in p) == waits for p in timed.values())
    assert all(0 <= p.get("wait_s", 0) <= p["time_s"] + 0.001 for p in timed.values())  # a part of the wall time
    trials = pd.DataFrame([{k: v for k, v in rec.items() if k not in ("curve", "evals", "updates")}])
    (row,) = summarise(trials, pd.DataFrame(), pd.DataFrame(), side="head", repeat=0, models=None).to_dict("records")
    cpu = sum(p["cpu_s"] for name, p in timed.items() if name != "eval")
    assert row["cpu_steps_per_second"] == pytest.approx(rec["steps"] / cpu)
    if waits:
        unstarved = sum(p["time_s"] - p["wait_s"] for name, p in timed.items() if name != "eval")
        assert row["unstarved_steps_per_second"] == pytest.approx(rec["steps"] / unstarved)
        assert row["unstarved_steps_per_second"] >= rec["steps_per_second"] * (1 - 1e-9)
    assert row["time:update"] == phases["update"]["time_s"]


def test_a_reference_run_is_written_and_compared_against_smoke(planted, monkeypatch):
    from suite.regress import RegressOptions, regress

    repo, root = planted
    monkeypatch.chdir(root)  # relative run folders work (each revision's suite runs in its slot folder)
    ref = root / "reference"
    common = {"repo": repo, "cache": root / "cache", "deps_env": Path(sys.prefix), "report": False, "quiet": True}
    smoke = [str(STUDIES / "regress-smoke.toml")]
    assert regress(RegressOptions(write_reference=True, studies=smoke, repeats=1, reference=ref, output=root / "ref-run",
                                  **common), say=lambda line: None) == 0  # fmt: skip
    provenance = json.loads((ref / "provenance.json").read_text())
    assert provenance["commit"] == plant_git(repo, "rev-parse", "base") and provenance["studies"] == ["regress-smoke"]
    assert provenance["command"] == "suite regress --write-reference" and provenance["repeats"] == 1
    assert sum(f.stat().st_size for f in ref.rglob("*") if f.is_file()) < 64 * 1024  # small enough to commit
    code = regress(RegressOptions(base="same", against_reference=True, reference=ref, output=Path("against"), **common),
                   say=lambda line: None)  # fmt: skip
    (v,) = pd.read_csv(root / "against" / "verdicts.csv").to_dict("records")
    assert code == 0 and v["returns"] == "identical" and v["speed_verdict"] in ("info", "n/a")
    assert "Not gating here" in (root / "against" / "regression.md").read_text()


def test_ctrl_c_stops_the_gate_and_the_same_command_resumes_smoke(planted):
    repo, root = planted
    out = root / "interrupted"
    argv = [sys.executable, "-m", "suite.cli", "regress", "base", "same", "--study", str(STUDIES / "regress-smoke.toml"),
            "--repeats", "2", "--max-repeats", "2", "--schedule", "interleaved", "--deps-env", sys.prefix, "--cache",
            str(root / "cache"), "-o", str(out), "--quiet", "--no-report",
            "--speed-threshold", str(NO_SPEED_GATE)]  # fmt: skip
    # its own session: Ctrl-C goes to the gate and the revisions' runs (its process group), not to pytest
    proc = subprocess.Popen(argv, cwd=repo, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 600
    while not list(out.glob("base/r0/done-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)  # a condition, not a fixed wait: the first run has finished
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "Run the same command again to resume" in err and "Traceback" not in err
    done_before = len(list(out.glob("*/r*/done-*")))
    assert 1 <= done_before < 4
    again = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr
    assert f"{done_before} already done" in again.stderr and len(list(out.glob("*/r*/done-*"))) == 4
