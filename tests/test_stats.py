"""Tests of suite.stats: closed-form answers on tiny arrays, determinism of the bootstrap, failure accounting."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from pandas.testing import assert_frame_equal

from suite import stats as st
from suite.errors import UserError

REPS = 200  # bootstrap replications in tests; the defaults (50,000 / 2,000) are for reports


# ------------------------------------------------------------------------------------------------ fixtures


def make_trials() -> pd.DataFrame:
    """Two algorithms on CartPole-v1 and TextMatch-v0 (code), with one failed and one diverged trial."""
    rows = []
    finals = {
        ("ppo", "CartPole-v1"): [480.0, 500.0, 490.0, 470.0],
        ("a2c", "CartPole-v1"): [300.0, 350.0, 200.0, 250.0],
        ("ppo", "TextMatch-v0[code]"): [5.0, 4.0, 5.0, 3.0],
        ("a2c", "TextMatch-v0[code]"): [1.0, 2.0, 0.5, 1.5],
    }
    for (algo, label), values in finals.items():
        env_id = label.split("[")[0]
        kwargs = {"language": "code"} if env_id == "TextMatch-v0" else None
        for seed, value in enumerate(values):
            rows.append(
                {
                    "key": f"{algo}/{label}/{seed}",
                    "algo": algo,
                    "env_label": label,
                    "env_id": env_id,
                    "env_kwargs": kwargs,
                    "seed": seed,
                    "status": "ok",
                    "final_eval_mean": value,
                    "wall_time_s": 100.0,
                    "rollout_time_s": 50.0,
                    "update_time_s": 30.0,
                    "steps_per_second": 1000.0 * (seed + 1),
                    "peak_rss_mb": 200.0 + seed,
                }
            )
    # Excluded trials: their (absurd) scores must not enter any statistic.
    rows.append(dict(rows[0], key="ppo/CartPole-v1/failed", seed=10, status="failed", final_eval_mean=float("nan")))
    rows.append(dict(rows[0], key="ppo/CartPole-v1/diverged", seed=11, status="diverged", final_eval_mean=-1e9))
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------- env references


def test_env_reference_constants_from_data() -> None:
    ref = st.env_reference("CartPole-v1")
    assert (ref.threshold, ref.reference_score) == (475.0, 500.0)
    assert ref.random_score == pytest.approx(22.55)
    assert "measured by suite" in ref.source
    assert st.env_reference("LunarLander-v3").threshold == 200.0
    assert st.env_reference("ALE/Pong-v5", {"frameskip": 1}).threshold == 18.0
    assert st.env_reference("Hopper-v5").threshold == 3000.0
    assert ref.normalise(np.array([22.55, 500.0])) == pytest.approx([0.0, 1.0])


def test_env_reference_text_match_rules() -> None:
    ref = st.env_reference("TextMatch-v0", {})  # default: english, "hello"
    assert ref.threshold == pytest.approx(4.5)
    assert ref.reference_score == pytest.approx(5.0)
    assert ref.random_score == pytest.approx(5 * (1 / 26 * 1 + 25 / 26 * (-0.1)))
    code = st.env_reference("TextMatch-v0", {"language": "code", "target": "1234567"})
    assert (code.threshold, code.reference_score) == (pytest.approx(6.5), pytest.approx(7.0))
    assert code.random_score == pytest.approx(7 * (0.1 - 0.1 * 0.9))


def test_env_reference_text_match_agrees_with_env_module() -> None:
    textmatch = pytest.importorskip("suite.textmatch")
    for language, charset in textmatch.CHARSETS.items():
        target = textmatch.DEFAULT_TARGETS[language]
        n = len(charset)
        expected = len(target) * (textmatch.MATCH_REWARD / n + textmatch.MISMATCH_REWARD * (n - 1) / n)
        ref = st.env_reference("TextMatch-v0", {"language": language})
        assert ref.random_score == pytest.approx(expected)
        assert ref.reference_score == pytest.approx(len(target) * textmatch.MATCH_REWARD)


def test_env_without_reference_data_is_not_normalised_and_a_bad_language_is_a_user_error() -> None:
    walker = st.env_reference("Walker2d-v5")  # any gymnasium id: spec inferred, no scores anywhere
    assert not walker.normalised and np.isnan(walker.normalise(1000.0))
    assert np.isnan(walker.threshold) and "not normalised: no random and reference scores for Walker2d-v5" in walker.source
    acrobot = st.env_reference("Acrobot-v1")  # not built in, but envs.toml has its numbers
    assert acrobot.normalised and (acrobot.threshold, acrobot.reference_score) == (-100.0, pytest.approx(-73.506))
    assert st.env_reference("MountainCarContinuous-v0").threshold == 90.0  # gymnasium's reward_threshold
    with pytest.raises(UserError, match="language 'klingon'"):
        st.env_reference("TextMatch-v0", {"language": "klingon"})


# ------------------------------------------------------------------------------------- point estimates


def test_iqm_of_known_arrays() -> None:
    # 8 values: floor(8/4) = 2 cut from each end -> mean(3, 4, 5, 6)
    assert st.iqm(np.array([7.0, 1.0, 100.0, 3.0, 5.0, 2.0, 6.0, 4.0])) == pytest.approx(4.5)
    # pooled over a (num_runs=4, num_tasks=2) matrix, as rliable does
    assert st.iqm(np.array([[1.0, 5.0], [2.0, 6.0], [3.0, 7.0], [4.0, 100.0]])) == pytest.approx(4.5)
    # 5 values: one cut from each end
    assert st.iqm(np.array([0.0, 10.0, 20.0, 30.0, 1000.0])) == pytest.approx(20.0)


def test_optimality_gap_of_known_matrix() -> None:
    assert st.optimality_gap(np.array([[0.5, 1.2], [0.8, 1.0]])) == pytest.approx(1 - (0.5 + 1.0 + 0.8 + 1.0) / 4)


def test_probability_of_improvement_exact() -> None:
    # task 1: pairs (1 vs 2) lose, (3 vs 2) win -> 0.5; task 2: X always wins -> 1.0; average 0.75
    x = [np.array([1.0, 3.0]), np.array([10.0, 11.0])]
    y = [np.array([2.0]), np.array([0.0, 1.0, 2.0])]
    assert st.probability_of_improvement(x, y) == pytest.approx(0.75)
    # a tie counts one half
    assert st.probability_of_improvement([np.array([1.0, 2.0])], [np.array([2.0])]) == pytest.approx(0.25)


def test_score_distribution_exact() -> None:
    scores = np.array([0.0, 0.5, 1.0, 1.5])
    assert st.score_distribution(scores, np.array([-1.0, 0.5, 2.0])) == pytest.approx([1.0, 0.5, 0.0])


def test_performance_profile_rectangular_and_ragged_agree_on_points() -> None:
    tasks = [np.array([0.1, 0.6, 0.9]), np.array([0.3, 1.2, 0.4])]
    taus = np.array([0.0, 0.5, 1.0])
    rect, lo, hi = st.performance_profile_intervals(tasks, taus, reps=REPS)  # rliable create_performance_profile
    assert rect == pytest.approx([1.0, 0.5, 1 / 6])
    assert np.all(lo <= rect) and np.all(rect <= hi)
    ragged, _, _ = st.performance_profile_intervals([*tasks, np.array([2.0])], taus, reps=REPS)
    assert ragged == pytest.approx([1.0, 4 / 7, 2 / 7])


# -------------------------------------------------------------------------------------------- bootstrap


def test_score_intervals_bracket_point_and_single_run_collapses() -> None:
    runs = np.array([1.0, 2.0, 3.0, 4.0, 10.0])
    intervals = st.score_intervals(runs, reps=REPS)
    assert intervals["mean"][0] == pytest.approx(4.0)
    assert intervals["median"][0] == pytest.approx(3.0)
    assert intervals["iqm"][0] == pytest.approx(3.0)
    for point, lo, hi in intervals.values():
        assert lo <= point <= hi
    assert st.score_intervals(np.array([7.0]), reps=REPS)["mean"] == pytest.approx((7.0, 7.0, 7.0))
    assert all(math.isnan(v) for v in st.score_intervals(np.empty(0), reps=REPS)["iqm"])


def test_bootstrap_is_deterministic_and_restores_global_rng() -> None:
    runs = np.random.default_rng(1).normal(size=6)
    np.random.seed(123)
    expected_draws = np.random.random(3)
    np.random.seed(123)
    first = st.score_intervals(runs, reps=REPS, seed=7)
    assert np.array_equal(np.random.random(3), expected_draws)  # the caller's global RNG stream is untouched
    np.random.random(5)  # disturb the global RNG: the next call must not care
    assert st.score_intervals(runs, reps=REPS, seed=7) == first
    assert st.score_intervals(runs, reps=REPS, seed=8) != first


def _rliable_interval(args: list[np.ndarray], func, reps: int, seed: int) -> tuple[np.ndarray, ...]:  # type: ignore[no-untyped-def]
    """rliable's own get_interval_estimates (through arch), the reference the vectorised bootstrap must equal."""
    from rliable import library as rly

    with st.seeded_global_rng(seed):
        points, intervals = rly.get_interval_estimates({"x": args}, func, reps=reps, confidence_interval_size=0.95)
    interval = np.asarray(intervals["x"], dtype=float).reshape(2, -1)
    return np.asarray(points["x"], dtype=float).reshape(-1), interval[0], interval[1]


def _same(a: tuple, b: tuple) -> bool:  # type: ignore[type-arg]
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("case", range(12))
def test_vectorised_bootstrap_equals_rliable_bit_for_bit(case: int) -> None:
    """The report's intervals are computed over all replications at once; they must be rliable's to the last bit:
    the same index draws (one block draw of numpy's legacy RNG is the same stream as many), the same statistics,
    arch's percentiles. Ties, single runs and unequal task sizes included."""
    from rliable import library as rly

    from suite.stats import scores as sc

    rng = np.random.default_rng(case)
    ties = case % 3 == 0
    draw = (lambda k: rng.integers(0, 3, k).astype(float)) if ties else (lambda k: rng.normal(size=k) * 10)
    reps, seed = int(rng.integers(50, 300)), int(rng.integers(0, 2**31))
    n = 1 + case % 7
    runs = draw(n)
    got = sc.interval_estimate(
        [runs], sc._run_statistics, reps=reps, seed=seed, confidence=0.95, batched=sc._run_statistics_batched
    )
    assert _same(got, _rliable_interval([runs], sc._run_statistics, reps, seed))
    sizes = [n, n, n] if case % 2 else [n, 1 + (case + 3) % 5]
    tasks = [draw(k) for k in sizes]
    others = [draw(k) for k in sizes] if case % 4 else [draw(1 + (k + 1) % 4) for k in sizes]

    def aggregate(*t: np.ndarray) -> np.ndarray:
        pooled = np.sort(np.concatenate(t))
        return np.array([sc._sorted_iqm(pooled), 1.0 - np.minimum(pooled, 1.0).mean()])

    p, lo, hi = _rliable_interval(tasks, aggregate, reps, seed)
    got_agg = st.aggregate_intervals(tasks, reps=reps, seed=seed)
    assert got_agg == {"iqm": (p[0], lo[0], hi[0]), "optimality_gap": (p[1], lo[1], hi[1])}
    pairs = [a for pair in zip(tasks, others, strict=True) for a in pair]
    p, lo, hi = _rliable_interval(pairs, lambda *a: np.array([st.probability_of_improvement(a[0::2], a[1::2])]), reps, seed)
    assert st.probability_of_improvement_interval(tasks, others, reps=reps, seed=seed) == (p[0], lo[0], hi[0])
    taus = np.linspace(-2.0, 3.0, 21)
    got_profile = st.performance_profile_intervals(tasks, taus, reps=reps, seed=seed)
    if len(set(sizes)) == 1:
        with st.seeded_global_rng(seed):
            profiles, cis = rly.create_performance_profile({"x": np.stack(tasks, axis=1)}, taus, reps=reps)
        ci = np.asarray(cis["x"]).reshape(2, -1)
        assert _same(got_profile, (profiles["x"], ci[0], ci[1]))
    else:
        ref = _rliable_interval(tasks, lambda *t: st.score_distribution(np.concatenate(t), taus), reps, seed)
        assert _same(got_profile, ref)


def test_block_draw_is_the_stream_of_many_draws() -> None:
    """What bootstrap_indices relies on: numpy's legacy RNG gives the same indices in one call as in many."""
    from suite.stats import scores as sc

    for n in range(1, 9):
        np.random.seed(5)
        many = [np.random.choice(n, n, replace=True) for _ in range(40 * 3)]
        np.random.seed(5)
        block = sc.bootstrap_indices([n, n, n], 40)
        assert all(np.array_equal(block[i % 3][i // 3], many[i]) for i in range(120))


def test_tables_are_deterministic_and_seed_sensitive() -> None:
    trials = make_trials()
    a = st.final_score_table(trials, reps=REPS, seed=3)
    b = st.final_score_table(trials, reps=REPS, seed=3)
    c = st.final_score_table(trials, reps=REPS, seed=4)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["mean_lo"], c["mean_lo"])
    pd.testing.assert_frame_equal(st.aggregate_table(trials, reps=REPS), st.aggregate_table(trials, reps=REPS))
    pd.testing.assert_frame_equal(
        st.probability_of_improvement_table(trials, reps=REPS), st.probability_of_improvement_table(trials, reps=REPS)
    )
    # a row's interval does not depend on which other rows are in the table
    only_ppo = st.final_score_table(trials[trials["algo"] == "ppo"], reps=REPS, seed=3)
    pd.testing.assert_frame_equal(only_ppo, a[a["algo"] == "ppo"].reset_index(drop=True))


# ------------------------------------------------------------------------------------------ significance


def test_holm_on_known_pvalues_and_against_statsmodels() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 -> running max 0.06
    assert st.holm_adjust(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    multipletests = pytest.importorskip("statsmodels.stats.multitest").multipletests
    random_p = np.random.default_rng(0).uniform(0, 0.2, size=12)
    assert st.holm_adjust(random_p) == pytest.approx(multipletests(random_p, method="holm")[1])
    with_nan = st.holm_adjust(np.array([0.01, np.nan, 0.02]))
    assert np.isnan(with_nan[1]) and with_nan[[0, 2]] == pytest.approx([0.02, 0.02])


def test_seeds_needed_matches_known_power_values() -> None:
    # Two-sided two-sample t-test, power 0.8, alpha 0.05: d = 0.5 -> 64 per group, d = 0.8 -> 26, d = 1 -> 17
    assert st.seeds_needed(0.5, 1.0, 1.0) == 64
    assert st.seeds_needed(0.8, 1.0, 1.0) == 26
    assert st.seeds_needed(10.0, 10.0, 10.0) == 17  # scale-free
    assert st.seeds_needed(0.0, 1.0, 1.0) is None
    power = pytest.importorskip("statsmodels.stats.power")
    for n, d in [(5, 1.0), (20, 0.5), (64, 0.5)]:
        expected = power.TTestIndPower().power(effect_size=d, nobs1=n, alpha=0.05, ratio=1.0)
        assert st.welch_power(n, d, 1.0, 1.0) == pytest.approx(expected, rel=1e-6)


def test_seeds_needed_decreases_with_effect_size() -> None:
    found = [st.seeds_needed(effect, 30.0, 60.0) for effect in (5.0, 10.0, 20.0, 40.0, 80.0)]
    needed = [n for n in found if n is not None]
    assert len(needed) == len(found)
    assert needed == sorted(needed, reverse=True) and needed[0] > needed[-1]
    one_sided = st.seeds_needed(20.0, 30.0, 60.0, alternative="larger")
    assert one_sided is not None and one_sided < needed[2]


def test_significance_table_values_and_holm() -> None:
    table = st.significance_table(make_trials())
    assert list(table["env_label"]) == ["CartPole-v1", "TextMatch-v0[code]"]
    assert set(zip(table["algo_a"], table["algo_b"], strict=True)) == {("a2c", "ppo")}
    row = table.iloc[0]
    a2c, ppo = np.array([300.0, 350.0, 200.0, 250.0]), np.array([480.0, 500.0, 490.0, 470.0])
    assert row["welch_p"] == pytest.approx(scipy.stats.ttest_ind(a2c, ppo, equal_var=False).pvalue)
    assert row["mwu_p"] == pytest.approx(scipy.stats.mannwhitneyu(a2c, ppo).pvalue)
    assert (row["n_a"], row["n_b"], row["n_excluded_a"], row["n_excluded_b"]) == (4, 4, 0, 2)
    assert row["diff"] == pytest.approx(a2c.mean() - ppo.mean())
    assert table["welch_p_holm"].to_numpy() == pytest.approx(st.holm_adjust(table["welch_p"].to_numpy()))
    assert row["seeds_needed"] == st.seeds_needed(row["diff"], row["std_a"], row["std_b"])
    reversed_pair = st.significance_table(make_trials(), pairs=[("ppo", "a2c")])
    assert reversed_pair["diff"].iloc[0] == pytest.approx(-row["diff"])
    with pytest.raises(UserError, match="unknown algorithm"):
        st.significance_table(make_trials(), pairs=[("ppo", "dqn")])


# ------------------------------------------------------------------------------------ failure accounting


def test_failed_and_diverged_are_counted_and_excluded() -> None:
    trials = make_trials()
    counts = st.count_statuses(trials).set_index(["algo", "env_label"])
    assert counts.loc[("ppo", "CartPole-v1"), ["n_total", "n_ok", "n_failed", "n_diverged"]].tolist() == [6, 4, 1, 1]
    table = st.final_score_table(trials, reps=REPS).set_index(["algo", "env_label"])
    row = table.loc[("ppo", "CartPole-v1")]
    assert (row["n_ok"], row["n_failed"], row["n_diverged"]) == (4, 1, 1)
    assert row["mean"] == pytest.approx(485.0)  # the diverged -1e9 is not in it
    assert row["median"] == pytest.approx(485.0)
    assert row["norm_mean"] == pytest.approx((485.0 - 22.55) / (500.0 - 22.55))
    agg = st.aggregate_table(trials, reps=REPS).set_index("algo")
    assert agg.loc["ppo", ["n_total", "n_ok", "n_failed", "n_diverged"]].tolist() == [10, 8, 1, 1]
    assert agg.loc["ppo", "n_envs"] == 2


def test_group_without_ok_trials_is_reported_with_nan() -> None:
    trials = make_trials()
    trials.loc[trials["algo"] == "a2c", "status"] = "failed"
    table = st.final_score_table(trials, reps=REPS).set_index(["algo", "env_label"])
    assert table.loc[("a2c", "CartPole-v1"), "n_failed"] == 4 and math.isnan(table.loc[("a2c", "CartPole-v1"), "iqm"])
    poi = st.probability_of_improvement_matrix(trials, reps=REPS)
    assert math.isnan(poi.loc["ppo", "a2c"])


def test_bad_inputs_are_user_errors() -> None:
    trials = make_trials()
    with pytest.raises(UserError, match="unknown trial status.*crashed"):
        st.count_statuses(trials.assign(status="crashed"))
    with pytest.raises(UserError, match="lacks column.*final_eval_mean"):
        st.final_score_table(trials.drop(columns="final_eval_mean"), reps=REPS)
    with pytest.raises(UserError, match="without a finite final_eval_mean"):
        st.final_score_table(trials.assign(final_eval_mean=float("nan")), reps=REPS)


def test_an_env_without_scores_is_left_out_of_aggregates_and_has_no_threshold() -> None:
    trials = make_trials()
    walker = trials[trials["env_id"] == "CartPole-v1"].assign(env_id="Walker2d-v5", env_label="Walker2d-v5", env_kwargs=None)
    walker = walker.assign(key=walker["key"] + "/walker")
    both = pd.concat([trials, walker], ignore_index=True)
    pooled = ["algo", "n_envs", "envs", "iqm", "iqm_lo", "iqm_hi", "optimality_gap", "optimality_gap_lo", "optimality_gap_hi"]
    assert_frame_equal(st.aggregate_table(both, reps=REPS)[pooled], st.aggregate_table(trials, reps=REPS)[pooled])
    final = st.final_score_table(both, reps=REPS).set_index(["algo", "env_label"])
    assert final.loc[("ppo", "Walker2d-v5"), "mean"] == final.loc[("ppo", "CartPole-v1"), "mean"]
    assert np.isnan(final.loc[("ppo", "Walker2d-v5"), "norm_mean"])
    evals = pd.DataFrame({"key": walker["key"], "step": 100, "return": walker["final_eval_mean"]})
    efficiency = st.sample_efficiency_table(walker, evals).set_index("algo")
    assert np.isnan(efficiency.loc["ppo", "threshold"]) and np.isnan(efficiency.loc["ppo", "steps_to_threshold_median"])
    with pytest.raises(UserError, match="not normalised: no env of these runs \\(Walker2d-v5\\)"):
        st.aggregate_table(walker, reps=REPS)


def test_aggregate_and_poi_tables() -> None:
    trials = make_trials()
    agg = st.aggregate_table(trials, reps=REPS).set_index("algo")
    for algo in ("a2c", "ppo"):
        ok = trials[(trials["algo"] == algo) & (trials["status"] == "ok")]
        norm = np.concatenate(
            [
                st.env_reference("CartPole-v1").normalise(ok[ok["env_id"] == "CartPole-v1"]["final_eval_mean"]),
                st.env_reference("TextMatch-v0", {"language": "code"}).normalise(
                    ok[ok["env_id"] == "TextMatch-v0"]["final_eval_mean"]
                ),
            ]
        )
        assert agg.loc[algo, "iqm"] == pytest.approx(st.iqm(norm))
        assert agg.loc[algo, "optimality_gap"] == pytest.approx(st.optimality_gap(norm))
        assert agg.loc[algo, "iqm_lo"] <= agg.loc[algo, "iqm"] <= agg.loc[algo, "iqm_hi"]
    matrix = st.probability_of_improvement_matrix(trials, reps=REPS)
    assert matrix.loc["ppo", "a2c"] == pytest.approx(1.0) and matrix.loc["a2c", "ppo"] == pytest.approx(0.0)
    # overlapping scores: P(X > Y) + P(Y > X) = 1 with mirrored intervals
    mixed = trials.copy()
    mixed.loc[(mixed["algo"] == "a2c") & (mixed["env_id"] == "CartPole-v1"), "final_eval_mean"] = [480, 495, 475, 100]
    poi = st.probability_of_improvement_table(mixed, reps=REPS).set_index(["algo_x", "algo_y"])
    forward, backward = poi.loc[("ppo", "a2c")], poi.loc[("a2c", "ppo")]
    # CartPole, ppo (480, 500, 490, 470) against each a2c run: 480 -> 2 wins + 1 tie (half) = 2.5, 495 -> 1,
    # 475 -> 3, 100 -> 4, so 10.5 / 16; TextMatch: 1.0
    assert forward["prob"] == pytest.approx((10.5 / 16 + 1.0) / 2)
    assert backward["prob"] == pytest.approx(1 - forward["prob"])
    assert (backward["prob_lo"], backward["prob_hi"]) == pytest.approx((1 - forward["prob_hi"], 1 - forward["prob_lo"]))
    assert forward["prob_lo"] < forward["prob"] < forward["prob_hi"]
    assert math.isnan(matrix.loc["ppo", "ppo"])
    profile = st.performance_profile(trials, [0.0, 0.9], reps=REPS)
    # normalised ppo scores above 0.9: all 4 on CartPole (>= 470), 5.0 and 5.0 on TextMatch (4.0 -> 0.80)
    assert profile["profiles"]["ppo"] == pytest.approx([1.0, 6 / 8])


# ----------------------------------------------------------------------------------- sample efficiency


def test_steps_to_threshold_and_auc_by_hand() -> None:
    assert st.eval_steps_to_threshold(np.array([0, 10, 20, 30]), np.array([1, 5, 4, 6]), 5.0) == 10.0
    assert math.isnan(st.eval_steps_to_threshold(np.array([0, 10]), np.array([1, 2]), 5.0))
    # trapezoids: 100 * (0 + 10) / 2 + 200 * 10 = 2500 over a span of 300
    assert st.area_under_curve(np.array([0, 100, 300]), np.array([0.0, 10.0, 10.0])) == pytest.approx(2500 / 300)
    assert st.area_under_curve(np.array([5]), np.array([3.0])) == 3.0


def make_evals(trials: pd.DataFrame) -> pd.DataFrame:
    """Hand-made evaluation episodes (two per step); only ppo CartPole seeds 0 and 1 reach 475."""
    curves = {
        "ppo/CartPole-v1/0": {0: (10, 20), 100: (470, 490), 200: (500, 500)},  # means 15, 480, 500 -> 100
        "ppo/CartPole-v1/1": {0: (10, 10), 100: (400, 420), 200: (470, 490)},  # 10, 410, 480 -> 200
        "ppo/CartPole-v1/2": {0: (10, 10), 100: (100, 100), 200: (300, 300)},  # never
    }
    rows = []
    for key in trials["key"]:
        for step, returns in curves.get(key, {0: (0, 0), 100: (1, 1)}).items():
            for episode, ret in enumerate(returns):
                rows.append({"key": key, "step": step, "final": step == 200, "episode": episode, "return": float(ret)})
                rows[-1]["length"] = 10
                rows[-1]["wall_time_s"] = step / 10.0 + episode  # the earliest reading per step counts
    return pd.DataFrame(rows)


def test_sample_efficiency_table_by_hand() -> None:
    trials = make_trials()
    evals = make_evals(trials)
    per_trial = st.sample_efficiency_per_trial(trials, evals).set_index("key")
    assert per_trial.loc["ppo/CartPole-v1/0", "steps_to_threshold"] == 100.0
    assert per_trial.loc["ppo/CartPole-v1/1", "steps_to_threshold"] == 200.0
    assert math.isnan(per_trial.loc["ppo/CartPole-v1/2", "steps_to_threshold"])
    assert "ppo/CartPole-v1/failed" not in per_trial.index
    # (15 + 480) / 2 * 100 + (480 + 500) / 2 * 100 over 200
    assert per_trial.loc["ppo/CartPole-v1/0", "auc"] == pytest.approx((247.5 * 100 + 490 * 100) / 200)
    table = st.sample_efficiency_table(trials, evals).set_index(["algo", "env_label"])
    row = table.loc[("ppo", "CartPole-v1")]
    assert (row["n_ok"], row["n_reached"], row["n_failed"], row["n_diverged"]) == (4, 2, 1, 1)
    assert row["steps_to_threshold_mean"] == pytest.approx(150.0)
    assert math.isinf(row["steps_to_threshold_median"])  # 2 of 4 never reached: median of (100, 200, inf, inf)


# ---------------------------------------------------------------------------------------------- stability


def test_cvar_on_known_arrays() -> None:
    values = np.arange(1.0, 21.0)
    # 10th percentile of 1..20 is 2.9 -> mean(1, 2); 90th is 18.1 -> mean(19, 20)
    assert st.cvar(values, 0.1, "lower") == pytest.approx(1.5)
    assert st.cvar(values, 0.1, "upper") == pytest.approx(19.5)
    assert st.cvar(values, 0.05, "lower") == pytest.approx(1.0)


def test_dispersion_across_time_hand_computed() -> None:
    values = np.array([0.0, 2.0, 1.0, 5.0, 4.0, 10.0])  # differences 2, -1, 4, -1, 6
    # windows of 3: IQR(2, -1, 4) = 3 - 0.5, IQR(-1, 4, -1) = 1.5 - (-1), IQR(4, -1, 6) = 5 - 1.5
    assert st.dispersion_across_time(values, window=3) == pytest.approx(np.median([2.5, 2.5, 3.5]))
    assert st.dispersion_across_time(values, steps=np.arange(6) * 1000.0, window=3) == pytest.approx(2.5)
    assert st.dispersion_across_time(values, window=50) == pytest.approx(scipy.stats.iqr([2, -1, 4, -1, 6]))
    # uneven spacing: differences become rates times the median gap
    assert st.detrend(np.array([0.0, 1.0, 3.0]), np.array([0.0, 1.0, 3.0])) == pytest.approx([1.5, 1.5])


def test_short_and_long_term_risk_hand_computed() -> None:
    values = np.concatenate([[0.0], np.cumsum(np.arange(1.0, 21.0))])  # differences 1..20
    assert st.short_term_risk(values) == pytest.approx(1.0)
    # drawdowns of (0, 10, 4, 8, 12, 2): 0, 0, 6, 2, 0, 10; 80th percentile 6 -> mean(6, 10)
    assert st.drawdown(np.array([0.0, 10, 4, 8, 12, 2])) == pytest.approx([0, 0, 6, 2, 0, 10])
    assert st.long_term_risk(np.array([0.0, 10, 4, 8, 12, 2]), alpha=0.2) == pytest.approx(8.0)


def test_across_runs_metrics_hand_computed() -> None:
    values = np.array([[0.0, 1.0], [1.0, 3.0], [2.0, 5.0], [3.0, 7.0]])
    assert st.dispersion_across_runs(values) == pytest.approx((1.5 + 3.0) / 2)
    assert st.risk_across_runs(np.array([5.0, 1.0, 3.0])) == pytest.approx(1.0)
    assert st.trace_summary(np.arange(1.0, 9.0)) == pytest.approx((4.5, 7.5))


def test_stability_table_uses_ok_runs_and_update_traces() -> None:
    trials = make_trials()
    evals = make_evals(trials)
    keys = trials["key"].tolist()
    updates = pd.DataFrame(
        [{"key": k, "update": u, "step": 10 * u, "approx_kl": float(u), "entropy": 1.0} for k in keys for u in range(8)]
    )
    curves = pd.DataFrame([{"key": k, "step": s, "return": float(s % 3), "length": 5} for k in keys for s in range(30)])
    table = st.stability_table(trials, curves, evals, updates, window=2).set_index(["algo", "env_label"])
    row = table.loc[("ppo", "CartPole-v1")]
    assert (row["n_ok"], row["n_failed"] + row["n_diverged"]) == (4, 2)
    assert row["risk_across_runs"] == pytest.approx(470.0)  # the worst ok run; the diverged one is excluded
    assert row["approx_kl_mean"] == pytest.approx(3.5) and row["approx_kl_last_quartile"] == pytest.approx(6.5)
    assert math.isnan(row["grad_var_mean"])
    # seed 0: curve (15, 480, 500) -> drawdown 0 everywhere
    per_run_ltr = [0.0, 0.0, 0.0, 0.0]
    assert row["long_term_risk"] == pytest.approx(np.median(per_run_ltr))
    # IQR across the 4 ok runs at the steps they all share (0 and 100: seed 3 stops at 100), averaged
    matrix = np.array([[15, 480], [10, 410], [10, 100], [0, 1]], dtype=float)
    assert row["dispersion_across_runs"] == pytest.approx(np.mean(scipy.stats.iqr(matrix, axis=0)))
    # training curve 0,1,2,0,1,2,...: differences 1,1,-2 repeating
    assert row["train_short_term_risk"] == pytest.approx(-2.0)


# ------------------------------------------------------------------------------------------ speed, memory


def test_wall_time_to_threshold() -> None:
    assert st.wall_time_to_threshold(500.0, steps_per_second=100.0) == 5.0
    assert st.wall_time_to_threshold(150.0, steps=np.array([0, 100, 200]), wall_times=np.array([0, 10, 30])) == 20.0
    assert math.isnan(st.wall_time_to_threshold(float("nan"), steps_per_second=100.0))


def test_speed_memory_table() -> None:
    trials = make_trials()
    evals = make_evals(trials)
    row = st.speed_memory_table(trials, evals).set_index(["algo", "env_label"]).loc[("ppo", "CartPole-v1")]
    assert row["steps_per_second_mean"] == pytest.approx(2500.0)  # ok runs only: 1000..4000
    assert (row["rollout_share"], row["update_share"], row["other_share"]) == pytest.approx((0.5, 0.3, 0.2))
    assert (row["peak_rss_mb_mean"], row["peak_rss_mb_max"]) == pytest.approx((201.5, 203.0))
    # wall clock at the threshold step (earliest reading): seed 0 at step 100 -> 10 s, seed 1 at 200 -> 20 s
    assert row["n_reached"] == 2 and math.isinf(row["wall_time_to_threshold_s_median"])
    without_clock = st.speed_memory_table(trials, evals.drop(columns="wall_time_s")).set_index(["algo", "env_label"])
    assert without_clock.loc[("ppo", "CartPole-v1"), "n_reached"] == 2
    one_env = trials[(trials["algo"] == "ppo") & (trials["seed"] < 2)]
    assert st.speed_memory_table(one_env, evals)["wall_time_to_threshold_s_median"].iloc[0] == pytest.approx(15.0)


# --------------------------------------------------------------------------------- numbers that cannot lie


NAN = float("nan")

# Every public scalar statistic, called on inputs holding one NaN: NaN in gives NaN out.
NAN_CASES = {
    "iqm": lambda: st.iqm(np.array([1.0, 2.0, 3.0, NAN])),  # trim_mean alone would give 2.5
    "optimality_gap": lambda: st.optimality_gap(np.array([0.5, NAN])),
    "score_intervals": lambda: st.score_intervals(np.array([1.0, NAN, 3.0]), reps=REPS),
    "aggregate_intervals": lambda: st.aggregate_intervals([np.array([1.0, 2.0]), np.array([NAN, 1.0])], reps=REPS),
    "probability_of_improvement": lambda: st.probability_of_improvement([np.array([1.0, NAN])], [np.array([0.0])]),
    "probability_of_improvement_interval": lambda: st.probability_of_improvement_interval(
        [np.array([1.0, 2.0])], [np.array([NAN, 0.0])], reps=REPS
    ),
    "score_distribution": lambda: st.score_distribution(np.array([0.2, NAN]), np.array([0.0, 0.5])),
    "performance_profile_intervals": lambda: st.performance_profile_intervals(
        [np.array([0.2, NAN])], np.array([0.0, 0.5]), reps=REPS
    ),
    "welch_test": lambda: st.welch_test(np.array([1.0, NAN, 3.0]), np.array([1.0, 2.0])),
    "mann_whitney_test": lambda: st.mann_whitney_test(np.array([1.0, NAN, 3.0]), np.array([1.0, 2.0])),
    "cohens_d": lambda: st.cohens_d(np.array([1.0, NAN, 3.0]), np.array([1.0, 2.0])),
    "area_under_curve": lambda: st.area_under_curve(np.array([0.0, 1.0, 2.0]), np.array([1.0, NAN, 3.0])),
    "cvar": lambda: st.cvar(np.array([1.0, NAN, 3.0])),
    "dispersion_across_time": lambda: st.dispersion_across_time(np.array([1.0, 2.0, NAN, 4.0, 5.0, 6.0, 7.0])),
    "short_term_risk": lambda: st.short_term_risk(np.array([1.0, NAN, 3.0])),
    "long_term_risk": lambda: st.long_term_risk(np.array([1.0, NAN, 3.0])),
    "dispersion_across_runs": lambda: st.dispersion_across_runs(np.array([[1.0, 2.0], [NAN, 3.0], [4.0, 5.0]])),
    "risk_across_runs": lambda: st.risk_across_runs(np.array([1.0, NAN, 3.0])),
    "wall_time_to_threshold": lambda: st.wall_time_to_threshold(
        5.0, steps=np.array([0.0, 10.0]), wall_times=np.array([0.0, NAN])
    ),
}


def _all_nan(value) -> bool:
    if isinstance(value, dict):
        return all(_all_nan(v) for v in value.values())
    return bool(np.all(np.isnan(np.asarray(value, dtype=float))))


@pytest.mark.parametrize("name", sorted(NAN_CASES))
def test_nan_in_gives_nan_out(name) -> None:
    assert _all_nan(NAN_CASES[name]())


def test_score_intervals_of_the_issue_are_nan_not_3() -> None:
    intervals = st.score_intervals(np.array([1.0, NAN, 3.0]), reps=REPS)
    assert all(math.isnan(v) for stat in ("mean", "median", "iqm") for v in intervals[stat])
    assert st.score_intervals(np.array([1.0, 2.0, 3.0]), reps=REPS)["median"][0] == 2.0  # finite input unchanged


def test_steps_to_threshold_refuses_nan_because_nan_means_never() -> None:
    with pytest.raises(ValueError, match="NaN"):
        st.eval_steps_to_threshold(np.array([0, 10, 20]), np.array([1.0, NAN, 9.0]), 5.0)


def test_mann_whitney_is_exact_with_ties_and_few_seeds() -> None:
    u, p = st.mann_whitney_test(np.array([100.0] * 3), np.array([500.0] * 3))
    assert (u, p) == (0.0, pytest.approx(0.1))  # 2 of the C(6, 3) = 20 splits are as extreme; scipy's default: 0.047
    assert scipy.stats.mannwhitneyu([100.0] * 3, [500.0] * 3).pvalue == pytest.approx(0.0469, abs=1e-4)
    # Without ties the exact distribution is scipy's exact one.
    assert st.mann_whitney_test(np.array([1.0, 2.0, 4.0]), np.array([3.0, 5.0, 6.0, 7.0]))[1] == pytest.approx(
        scipy.stats.mannwhitneyu([1.0, 2.0, 4.0], [3.0, 5.0, 6.0, 7.0], method="exact").pvalue
    )


def test_mann_whitney_exact_equals_scipy_full_permutation_on_tied_samples() -> None:
    rng = np.random.default_rng(0)
    for _ in range(25):
        a = rng.integers(0, 4, size=rng.integers(2, 6)).astype(float)
        b = rng.integers(0, 5, size=rng.integers(2, 6)).astype(float)
        ref = scipy.stats.mannwhitneyu(a, b, method=scipy.stats.PermutationMethod(n_resamples=np.inf))
        assert st.mann_whitney_test(a, b) == (ref.statistic, pytest.approx(ref.pvalue, abs=1e-12))


def test_mann_whitney_large_samples_use_the_tie_corrected_normal_approximation() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=40), rng.normal(0.5, size=40)
    assert st.mann_whitney_test(a, b)[1] == pytest.approx(scipy.stats.mannwhitneyu(a, b, method="asymptotic").pvalue)


def test_seeds_needed_is_undefined_for_zero_or_unknown_spread() -> None:
    assert st.seeds_needed(400.0, 0.0, 0.0) == st.UNDEFINED == "undefined"  # was 2
    assert st.seeds_needed(1.0, NAN, 1.0) == "undefined"  # a one-run pilot has no spread estimate
    assert st.seeds_needed(NAN, 1.0, 1.0) == "undefined"
    assert st.seeds_needed(1.0, 0.0, 2.0) == st.seeds_needed(1.0, 2.0, 0.0)  # one spread is enough
    assert [st.seeds_needed_text(v) for v in (17, None, "undefined")] == ["17", "> 10,000", "undefined"]


def test_significance_table_says_undefined_for_identical_runs() -> None:
    trials = make_trials()
    trials.loc[trials["key"].str.startswith("ppo/CartPole-v1/") & (trials["status"] == "ok"), "final_eval_mean"] = 500.0
    trials.loc[trials["key"].str.startswith("a2c/CartPole-v1/"), "final_eval_mean"] = 100.0
    row = st.significance_table(trials).set_index("env_label").loc["CartPole-v1"]
    assert row["seeds_needed_text"] == "undefined" and pd.isna(row["seeds_needed"])
    assert row["mwu_p"] == pytest.approx(2 / math.comb(8, 4))  # 4 vs 4 all tied within groups: exact
