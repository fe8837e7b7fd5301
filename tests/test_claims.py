"""Claim sets: loading and validation, the metrics a claim names, comparisons with bootstrap CIs, the verdict rule."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import suite.algorithms  # noqa: F401  (registers every algorithm)
from suite.claims import list_claim_sets, load_claim_set, load_published, parse_claim_set
from suite.claims.metrics import METRICS, RunData, get_metric, run_values, statistic_of
from suite.config import config_to_dict
from suite.errors import UserError
from suite.registry import get_algorithm
from suite.stats import long_term_risk
from suite.stats.references import env_reference
from suite.study import TIERS
from suite.textmatch import sample_diversity

SHIPPED = (
    "cleanrl-benchmark", "ppo-rlvr-prm-ablation", "seed000-memory", "seed000-text", "seed003-textmatch", "seed004-curves",
    "seed004-table", "zoo-benchmark",
)  # fmt: skip


def minimal(**cell: Any) -> dict[str, Any]:
    """A one-cell claim set table; ``cell`` entries replace the defaults of the only cell."""
    base = {"column": "PPO", "arm": "ppo", "claimed": 498.2}
    base.update(cell)
    return {
        "name": "t",
        "arms": {"ppo": {"algo": "ppo"}, "grpo": {"algo": "grpo"}},
        "rows": [{"label": "CartPole", "env": "CartPole-v1", "budget": 100_000, "cells": [base]}],
    }


# ------------------------------------------------------------------------------------------------ loading


def test_every_shipped_claim_set_loads_and_expands_at_every_tier() -> None:
    assert tuple(list_claim_sets()) == SHIPPED
    for name in SHIPPED:
        claims = load_claim_set(name)
        for tier in TIERS:
            expansion = claims.expand(tier)
            assert len(expansion.cell_keys) == len(claims.cells)
            for i, cell in enumerate(claims.cells):
                points = [max(len(arm.sweep_values), 1) for arm in cell.arms]  # a sweep runs every point per seed
                assert [len(keys) for keys in expansion.cell_keys[i].values()] == [len(cell.seeds) * p for p in points]


def test_seed004_table_has_the_documents_four_rows_and_budgets() -> None:
    claims = load_claim_set("seed004-table")
    assert claims.rows == ["CartPole-v1", "LunarLander", "Atari Pong", "MuJoCo Hopper"]
    assert claims.columns == ["PPO", "GRPO", "canonical GRPO", "gain"]
    by = {(c.row, c.column): c for c in claims.cells}
    assert by[("LunarLander", "GRPO")].claimed == 315.2 and by[("LunarLander", "GRPO")].arm.algo == "ppo-rlvr-prm"
    assert by[("Atari Pong", "canonical GRPO")].arm.algo == "grpo"
    gain = by[("MuJoCo Hopper", "gain")]
    assert (gain.comparison, gain.relative, gain.claimed, gain.versus.algo if gain.versus else None) == (
        "improvement",
        True,
        6.4,
        "ppo",
    )
    # Zoo budgets for CartPole and LunarLander at the standard tier; Hopper at the standard tier; Pong reduced.
    runs = {c.row: claims.run_budget(c, c.arm, "standard") for c in claims.cells if c.column == "PPO"}
    assert runs == {"CartPole-v1": 100_000, "LunarLander": 1_000_000, "Atari Pong": 40_000, "MuJoCo Hopper": 300_000}
    assert {c.row: claims.run_budget(c, c.arm, "paper") for c in claims.cells} == {
        "CartPole-v1": 100_000, "LunarLander": 1_000_000, "Atari Pong": 10_000_000, "MuJoCo Hopper": 1_000_000}  # fmt: skip


def test_published_cells_read_the_published_csv() -> None:
    table = load_published()
    for name, source in (("zoo-benchmark", "rl-baselines3-zoo"), ("cleanrl-benchmark", "CleanRL")):
        claims = load_claim_set(name)
        rows = table[table["source"] == source]
        covered = {(c.claimed, c.claimed_pm, c.budget, c.env_id) for c in claims.cells}
        assert covered == {(r.mean, r.std, r.n_timesteps, r.suite_env_id) for r in rows.itertuples()}
    zoo = load_claim_set("zoo-benchmark")
    assert {c.arm.algo for c in zoo.cells} == {"sb3-ppo", "ppo", "sb3-a2c", "sb3-dqn", "sb3-sac", "sb3-td3"}


def test_seed000_text_is_a_labelled_stand_in_with_both_clip_readings() -> None:
    claims = load_claim_set("seed000-text")
    assert "stand-in" in claims.stand_in.lower() or "CNN/DailyMail" in claims.stand_in
    rules = {
        c.row.split("clip_rule = ")[1]: c.arm.overrides_for(c.env_id)["clip_rule"]
        for c in claims.cells
        if "clip_rule =" in c.row
    }
    assert rules == {"ratio": "ratio", "tracking": "tracking"}
    assert {c.metric for c in claims.cells} == {"steps_to_threshold", "final_return", "sample_diversity", "stability"}
    swept = {c.arm.name: (c.arm.sweep_key, c.arm.sweep_values) for c in claims.cells if c.arm.sweep_key}
    assert swept == {"ratio_lr": ("learning_rate", (1e-4, 3e-4, 1e-3, 3e-3)), "ratio_clip": ("clip_range", (0.1, 0.2, 0.3))}


def test_ablation_switches_each_difference_on_alone_over_ppos_hyperparameters() -> None:
    claims = load_claim_set("ppo-rlvr-prm-ablation")
    ppo = config_to_dict(get_algorithm("ppo").make_config("LunarLander-v3"))
    configs = {
        c.arm.name: config_to_dict(get_algorithm(c.arm.algo).make_config(c.env_id, c.arm.overrides_for(c.env_id)))
        for c in claims.cells
        if c.env_id == "LunarLander-v3"
    }
    shipped = config_to_dict(get_algorithm("ppo-rlvr-prm").make_config("LunarLander-v3"))

    def differences(cfg: dict[str, Any]) -> set[str]:
        out = {k for k in ("learning_rate", "gae_lambda") if cfg[k] != ppo[k]}
        if cfg["variance_weighting"]:
            out.add("variance weighting")
        if cfg["js_coef"] or cfg["smooth_coef"]:
            out.add("regulariser")
        return out

    assert {name: differences(cfg) for name, cfg in configs.items()} == {
        "none": set(), "vw": {"variance weighting"}, "reg": {"regulariser"}, "cosine": {"learning_rate"},
        "lam": {"gae_lambda"}, "all": differences(shipped),
    }  # fmt: skip
    assert differences(shipped) == {"variance weighting", "regulariser", "learning_rate", "gae_lambda"}
    assert configs["vw"]["ent_coef"] == ppo["ent_coef"] and configs["vw"]["n_steps"] == ppo["n_steps"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"arm": "nope"}, "unknown arm 'nope'"),
        ({"metric": "return"}, "unknown metric 'return'"),
        ({"statistic": "max"}, "statistic: unknown value 'max'"),
        ({"kind": "improvement"}, "needs versus"),
        ({"versus": "grpo", "kind": "single_run"}, "takes no versus"),
        ({"threshold": 400}, "metric 'final_return' takes no parameter ['threshold']"),
        ({"env": "CartPole-v9"}, "unknown env id 'CartPole-v9'"),
        ({"claimed": "high"}, "expected a number, got 'high'"),
        ({"colour": 1}, "unknown keys ['colour']"),
        (
            {"published": {"source": "CleanRL", "algo": "dqn", "env_id": "CartPole-v1"}},
            "no published row CleanRL:dqn:CartPole-v1",
        ),
    ],
)
def test_a_bad_cell_is_one_clear_error(change: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        parse_claim_set(minimal(**change))


def test_a_claim_budget_may_name_a_tier() -> None:
    claims = parse_claim_set(minimal(budget="standard", env="LunarLander-v3"))
    assert claims.cells[0].budget == 1_000_000
    assert claims.run_budget(claims.cells[0], claims.cells[0].arm, "quick") == 100_000
    with pytest.raises(UserError, match="'huge' is neither a step count nor a tier"):
        parse_claim_set(minimal(budget="huge"))


def test_bad_names_outside_cells_are_errors_before_anything_runs() -> None:
    data = minimal()
    data["arms"]["ppo"] = {"algo": "ppo-9000"}
    with pytest.raises(UserError, match="unknown algorithm 'ppo-9000'"):
        parse_claim_set(data)
    data = minimal()
    data["tier"] = "huge"
    with pytest.raises(UserError, match="unknown tier 'huge'"):
        parse_claim_set(data)
    data = minimal()
    data["arms"]["ppo"] = {"algo": "ppo", "overrides": {"n_epochs": "ten"}}
    with pytest.raises(UserError, match="n_epochs"):
        parse_claim_set(data)  # the trial's own validation (TrialSpec.resolve), at load time
    data = minimal(arm="grpo")
    data["rows"][0]["env"] = "Hopper-v5"
    data["arms"]["grpo"] = {"algo": "sb3-dqn"}
    with pytest.raises(UserError, match="sb3-dqn"):
        parse_claim_set(data)  # DQN cannot act in a Box action space
    with pytest.raises(UserError, match="unknown claim set 'seed999'; shipped: cleanrl-benchmark"):
        load_claim_set("seed999")


# ------------------------------------------------------------------------------------------------ metrics


def run(**fields: Any) -> RunData:
    trial = {"env_id": "TextMatch-v0", "env_kwargs": {"language": "english", "target": "hello"}, "metrics": {}}
    trial.update(fields.pop("trial", {}))
    defaults: dict[str, Any] = {
        "eval_steps": np.array([100.0, 200.0, 300.0]),
        "eval_means": np.array([1.0, 4.6, 5.0]),
        "curve_steps": np.array([40.0, 40.0, 80.0, 120.0, 160.0]),
        "curve_returns": np.array([0.6, 1.7, 5.0, 2.8, 5.0]),
        "update_steps": np.array([40.0, 80.0, 120.0, 160.0]),
    }
    defaults.update(fields)
    return RunData(trial=trial, **defaults)


def test_metrics_score_one_run_exactly() -> None:
    r = run(trial={"final_eval_mean": 3.9, "steps_per_second": 1234.0, "metrics": {"sample_diversity": 0.25},
                   "phases": {"update": {"peak_rss_mb": 512.0}}})  # fmt: skip
    assert get_metric("final_return").per_run(r, {}) == 3.9
    assert get_metric("final_train_return").per_run(r, {"last_episodes": 2}) == pytest.approx(3.9)
    # TextMatch threshold: maximum 5 - 0.5 = 4.5, first reached at the second evaluation.
    assert get_metric("steps_to_threshold").per_run(r, {}) == 200.0
    assert get_metric("steps_to_threshold").per_run(r, {"threshold": 5.5}) == math.inf
    # The first 5.0 episode ended at step 80, trained on by the second update (updates at steps 40, 80, ...).
    assert get_metric("first_update_at_max").per_run(r, {}) == 2.0
    assert get_metric("first_update_at_max").per_run(r, {"target": 6.0}) == math.inf
    assert get_metric("sample_diversity").per_run(r, {}) == 0.25
    assert get_metric("steps_per_second").per_run(r, {}) == 1234.0
    assert get_metric("metrics.sample_diversity").per_run(r, {}) == 0.25
    assert get_metric("phases.update.peak_rss_mb").per_run(r, {}) == 512.0
    assert math.isnan(get_metric("metrics.absent").per_run(r, {}))
    # Chan et al.'s long-term risk: drawdowns from the running max 0.6, 1.7, 5.0, 5.0, 5.0 are 0, 0, 0, 2.2, 0;
    # the worst 5% tail (values >= the 95th percentile, 1.76) is the 2.2 drop.
    assert get_metric("stability").per_run(r, {}) == pytest.approx(2.2)
    assert get_metric("stability").per_run(r, {"alpha": 0.5}) == long_term_risk(r.curve_returns, 0.5)
    rising = run(curve_steps=np.arange(1.0, 6.0), curve_returns=np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert get_metric("stability").per_run(rising, {}) == 0.0  # never below its best so far
    with pytest.raises(UserError, match="unknown metric 'speed'"):
        get_metric("speed")
    assert set(METRICS) >= {"final_return", "steps_to_threshold", "first_update_at_max", "stability", "sample_diversity",
                            "peak_rss_mb", "steps_per_second"}  # fmt: skip


def test_cartpole_first_update_uses_the_env_maximum() -> None:
    r = run(trial={"env_id": "CartPole-v1", "env_kwargs": {}}, curve_returns=np.array([20.0, 500.0, 30.0, 500.0, 9.0]))
    assert get_metric("first_update_at_max").per_run(r, {}) == 1.0  # step 40 -> the update at step 40


def test_sample_diversity_is_the_fraction_of_distinct_strings() -> None:
    assert sample_diversity(["hello", "hello", "hallo", "hellp"]) == 0.75
    assert sample_diversity(["aaaaa"] * 10) == 0.1
    with pytest.raises(ValueError):
        sample_diversity([])


def test_statistics_and_never() -> None:
    values = np.array([1.0, 2.0, 3.0, 4.0, 100.0])
    assert statistic_of(values, "mean") == 22.0
    assert statistic_of(values, "median") == 3.0
    assert statistic_of(np.array([1.0, math.inf, math.inf]), "median") == math.inf
    assert statistic_of(np.array([1.0, 2.0, math.inf]), "median") == 2.0
    assert run_values(get_metric("final_return"), [run(trial={"final_eval_mean": 2.0})], {}).tolist() == [2.0]


# ------------------------------------------------------------------------------------------------ verdicts


def test_attainable_ranges_live_with_the_env_reference_data() -> None:
    """One source of truth (suite/data/envs.toml): the range and reward lattice of each env, with sources."""
    pong, cart = env_reference("ALE/Pong-v5"), env_reference("CartPole-v1")
    assert (pong.min_return, pong.max_return, cart.min_return, cart.max_return) == (-21.0, 21.0, 1.0, 500.0)
    code = env_reference("TextMatch-v0", {"language": "code", "target": "1234567"})
    assert (code.min_return, code.max_return) == pytest.approx((-0.7, 7.0))
    assert not env_reference("LunarLander-v3").bounded and "21 points" in pong.range_source


def test_a_budget_short_cell_with_missing_trials_names_what_its_core_hours_are_for():
    """A cell run below its claim's budget with trials still missing: the hours shown are the settling tier's (the
    whole cell at the claim's budget), so the reason says so rather than reading as the missing trials' cost."""
    from types import SimpleNamespace

    from suite.claims.tables import _why

    short = SimpleNamespace(reason="3 trial(s) not run yet", core_hours=3.59, settle_tier="paper")
    assert _why(short) == "3 trial(s) not run yet (--tier paper settles it: about 3.59 core-hours from the recorded speeds)"
    seeds = SimpleNamespace(reason="seeds per arm for power 0.8: 26", core_hours=0.5, settle_tier=None)
    assert _why(seeds) == "seeds per arm for power 0.8: 26 (about 0.500 core-hours)"


def test_core_hours_are_not_extrapolated_from_runs_that_ended_inside_the_warm_up():
    """SB3's SAC on Hopper collects without training for its first 10,000 steps (~1,000 steps/s here, against
    ~25-60 once it trains): a 1,024-step smoke run's speed put the zoo's 1M-step cell at 0.65 core-hours instead of
    days. Runs that ended inside the warm-up give no training speed (and the reason says so); runs past it do."""
    import pandas as pd

    from suite.throughput import throughput_of

    sac = {"learning_starts": 10_000, "batch_size": 256}
    smoke = pd.DataFrame({"config": [sac, sac], "steps": pd.array([1_024, 1_024], dtype="Int64"),
                          "steps_per_second": [990.0, 961.0]})  # fmt: skip
    tp = throughput_of(smoke)
    assert not tp.known and math.isnan(tp.seconds(1_000_000)) and "learning_starts 10,000" in tp.note
    assert tp.warmup_sps == pytest.approx(975.5)
    ppo = pd.DataFrame({"config": [{"n_steps": 2048}] * 2, "steps": pd.array([2_048, 2_048], dtype="Int64"),
                        "steps_per_second": [2_000.0, 2_400.0]})  # fmt: skip
    tp = throughput_of(ppo)
    assert tp.known and tp.warmup == 0 and tp.note == "" and tp.seconds(1_100_000) == pytest.approx(500.0)


def test_a_run_across_its_warm_up_is_timed_phase_by_phase():
    """A 15,000-step SAC run (measured: collection at ~1,000 steps/s to 10,000, then ~22 steps/s) averages 66 steps/s
    over its whole clock, which would put a 1M-step run at 4.2 h instead of 12. The evaluations' training-clock
    stamps split the run: the warm-up's speed from the last stamp inside it, training's from the first stamp past it
    to the end."""
    import pandas as pd

    from suite.throughput import throughput_of

    sac = json.dumps({"learning_starts": 10_000})
    runs = pd.DataFrame({"key": ["a"], "config": [sac], "steps": pd.array([15_000], dtype="Int64"),
                         "steps_per_second": [15_000 / 225.4]})  # fmt: skip
    stamps = [1_500, 3_000, 4_500, 6_000, 7_500, 9_000, 10_500, 12_000, 13_500, 15_000]
    clock = [1.5, 2.9, 4.4, 6.0, 7.5, 9.0, 31.2, 95.2, 159.2, 225.4]
    evals = pd.DataFrame({"key": "a", "step": stamps, "wall_time_s": clock})
    tp = throughput_of(runs, evals)
    assert tp.warmup == 10_000 and tp.warmup_sps == pytest.approx(9_000 / 9.0)
    assert tp.train_sps == pytest.approx(4_500 / (225.4 - 31.2))
    assert tp.seconds(1_000_000) == pytest.approx(10.0 + 990_000 / tp.train_sps)
    assert tp.seconds(5_000) == pytest.approx(5.0)  # a budget inside the warm-up runs at its speed
    # Without stamps past the warm-up, the end and the warm-up speed still split it.
    tp = throughput_of(runs, evals[evals["step"] <= 9_000])
    assert tp.train_sps == pytest.approx(5_000 / (225.4 - 10.0))
    # Without any stamp: the whole run's speed (all that is known).
    assert throughput_of(runs).train_sps == pytest.approx(15_000 / 225.4)


def test_runs_inside_the_warm_up_borrow_the_training_speed_of_a_longer_run_of_the_same_settings(tmp_path: Path):
    """A smoke cell of SB3's DQN on Pong (learning_starts 100,000) cannot time training; one ``suite run --steps``
    past the warm-up at the same algorithm version, config and threads can, and the table says it used it. Runs of
    other settings are not used."""
    from suite.claims.reproduce import _from_other_runs
    from suite.store import ResultsStore
    from suite.throughput import throughput_of
    from tests.test_store import make_record

    cfg = {"learning_starts": 100_000, "buffer_size": 10_000}
    stamps = [{"step": s, "final": s == 110_000, "returns": [-21.0], "lengths": [800], "wall_time_s": t}
              for s, t in ((50_000, 50.0), (100_000, 100.0), (105_000, 150.0), (110_000, 200.0))]  # fmt: skip
    common = {"algo": "sb3-dqn", "env_id": "ALE/Pong-v5", "env_label": "ALE/Pong-v5", "config": cfg}
    smoke = [make_record(i, steps=1_024, steps_per_second=1_024 / 1.1, **common) for i in (0, 1)]
    longer = make_record(2, steps=110_000, steps_per_second=110_000 / 200.0, evals=stamps, **common)
    other = make_record(3, steps=110_000, steps_per_second=5_000.0, config_hash="another", evals=stamps, **common)
    with ResultsStore(tmp_path / "r.db") as store:
        for rec in (*smoke, longer, other):
            store.save_trial(rec)
        own_rows = store.trials(keys=[r["key"] for r in smoke])
        own = throughput_of(own_rows, store.evals(own_rows["key"].tolist()))
        assert not own.known and own.warmup == 100_000
        tp = _from_other_runs(store, own_rows, own)
    assert tp.known and tp.keys == (longer["key"],)
    assert tp.train_sps == pytest.approx(10_000 / 100.0) and tp.warmup_sps == pytest.approx(1_024 / 1.1)
    assert tp.note == "training speed from 1 other recorded run of the same settings past the warm-up (110,000 steps)"
    assert tp.seconds(10_000_000) == pytest.approx(100_000 / (1_024 / 1.1) + 9_900_000 / 100.0)


def _committed_tables() -> list[Path]:
    return sorted((Path(__file__).resolve().parents[1] / "reports" / "claims").rglob("verdicts.json"))


def test_every_shipped_claim_set_has_a_committed_table() -> None:
    """reports/claims/<set>/ holds a regenerated table (the whole set, or its rows) for every shipped claim set."""
    committed = {json.loads(p.read_text())["claim_set"] for p in _committed_tables()}
    assert set(list_claim_sets()) <= committed, sorted(set(list_claim_sets()) - committed)


@pytest.mark.parametrize("path", _committed_tables(), ids=lambda p: str(p.parent.relative_to(p.parents[2])))
def test_committed_claim_tables_match_the_algorithm_versions(path: Path) -> None:
    """A version bump changes trial keys, so `suite reproduce` re-runs those trials: a committed table made at an older
    version no longer matches the code and must be regenerated with the bump (issue 9)."""
    stale = set()
    for cell in json.loads(path.read_text())["cells"]:
        for part in filter(None, cell["algo_versions"].split(", ")):
            algo, version = part.rsplit(" ", 1)
            if get_algorithm(algo).version != version:
                stale.add(f"{algo} {version} (now {get_algorithm(algo).version})")
    assert not stale, f"{path}: regenerate with `suite reproduce`: {sorted(stale)}"
