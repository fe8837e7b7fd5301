"""The verdict rule on hand-made measurements: one case per way the earlier rule ("the claim inside the 95% bootstrap
CI of the mean; a gain reproduced on its sign") misjudged a committed cell (issue 53). Each asserts the verdict and
the number behind it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import scipy.stats

import suite.algorithms  # noqa: F401  (registers every algorithm)
from suite.claims import parse_claim_set
from suite.claims.claimset import ClaimSet
from suite.claims.verdict import (
    CONSISTENT,
    IMPOSSIBLE,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REFERENCE,
    REPRODUCED,
    STAND_IN_INCONCLUSIVE,
    ArmValues,
    Judgement,
    control_multiplicity,
    judge,
)
from suite.errors import UserError
from suite.stats.equivalence import Censored, Component, Difference, equivalence_p, order_statistic_interval, outside_p
from suite.stats.references import env_reference

ZOO_LUNAR_PPO = np.array([269.29, 249.14, 231.70, 258.35, 261.89])
"""The suite's ppo on LunarLander-v3 at 1M steps, seeds 0-4, native records (zoo-benchmark's standard tier at 83a2785)."""


def one_cell(env: str = "LunarLander-v3", *, stand_in: str = "", arms: dict[str, Any] | None = None, **cell: Any) -> ClaimSet:
    """A claim set holding one cell; ``cell`` entries are the cell's keys."""
    entry = {"column": "c", "arm": "a", **cell}
    data = {
        "name": "t",
        "stand_in": stand_in,
        "arms": arms or {"a": {"algo": "ppo"}, "b": {"algo": "ppo", "overrides": {"ent_coef": 0.01}}},
        "rows": [{"label": "r", "env": env, "budget": 100_000, "cells": [entry]}],
    }
    return parse_claim_set(data)


def verdict_of(claims: ClaimSet, *values: np.ndarray, observed: list[np.ndarray] | None = None) -> Judgement:
    arms = [
        ArmValues(np.asarray(v, float), np.asarray(observed[i], float) if observed else np.full(len(v), np.nan))
        for i, v in enumerate(values)
    ]
    return judge(claims, claims.cells[0], arms)


# ------------------------------------------------------------------------------------------------ the statistics


def test_tost_and_minimum_effect_p_values_match_statsmodels_and_their_intervals() -> None:
    """The equivalence p-value equals statsmodels' ttost_ind (Welch) on the same two samples, and each p-value is
    below 0.05 exactly when its interval (90% inside, 95% outside) says so."""
    from statsmodels.stats.weightstats import ttost_ind

    a, b = np.array([1.0, 2.0, 3.0, 4.0]), np.array([2.0, 3.0, 4.0, 5.5])
    diff = Difference(float(a.mean() - b.mean()), (Component(a.var(ddof=1) / 4, 3), Component(b.var(ddof=1) / 4, 3)))
    assert equivalence_p(diff, -2.0, 2.0) == pytest.approx(ttost_ind(a, b, -2.0, 2.0, usevar="unequal")[0], rel=1e-9)
    lo90, hi90 = diff.interval(0.90)
    for margin in (1.0, 2.0, 3.0, 4.0):
        assert (equivalence_p(diff, -margin, margin) <= 0.05) == (-margin <= lo90 and hi90 <= margin)
    far = Difference(10.0, (Component(4.0, 5),))
    lo95, _ = far.interval(0.95)
    assert outside_p(far, -2.0, 2.0) == pytest.approx(2 * scipy.stats.t.sf(8.0 / 2.0, 5))
    assert (outside_p(far, -2.0, 2.0) <= 0.05) == (lo95 > 2.0)


def test_kaplan_meier_median_of_the_suites_fix_row() -> None:
    """seed003's 'suite's fix' runs: hello first written at updates 113, 224 and 181; two seeds never in 500."""
    km = Censored(np.array([113.0, 224.0, 181.0, 500.0, 500.0]), np.array([True, True, True, False, False]))
    median, lo, hi = km.km_median(0.95)
    assert (median, lo, hi) == (224.0, 113.0, math.inf)
    assert order_statistic_interval(np.array([1.0, 2, 3, 4, 5]), 0.90) is None  # 19 runs needed
    assert order_statistic_interval(np.arange(19.0), 0.90) == (0.0, 18.0)


def test_the_text_env_reward_lattice_rules_out_every_batch_mean_of_document_003() -> None:
    """A 'hello' return is 1.1 m - 0.5; a mean of 8 is (1.1 M - 4) / 8. None of the log's means prints that way."""
    lattice = env_reference("TextMatch-v0", {"language": "english", "target": "hello"}).lattice
    assert lattice is not None and (lattice.start, lattice.step, lattice.count) == (-0.5, pytest.approx(1.1), 6)
    for logged, near in ((-0.40, (-0.5, -0.3625)), (2.60, (2.525, 2.6625)), (4.20, (4.175, 4.3125)), (4.85, (4.725, 4.8625))):
        assert not lattice.attainable(logged, 8, 2)
        assert lattice.nearest_means(logged, 8) == pytest.approx(near)
    assert lattice.attainable(4.86, 8, 2) and lattice.attainable(5.0, 8, 2)
    pong = env_reference("ALE/Pong-v5").lattice
    assert pong is not None and pong.attainable(20.989, 90, 3) and pong.attainable(17.3, 65, 1)  # the zoo's Pong rows


# ------------------------------------------------------------------------------------------------ the cases


def test_censored_never_reached_bound_never_lets_a_single_run_claim_in() -> None:
    """The old rule reproduced '120' from [113, not reached]. Now: the Kaplan-Meier median 224 [113, not reached] is
    shown, and one run's outcome cannot be pinned by 5 runs of which 2 never got there: inconclusive."""
    claims = one_cell("TextMatch-v0", metric="first_update_at_max", statistic="median", claimed=120, tolerance=25)
    j = verdict_of(claims, np.array([113.0, 224.0, 181.0, math.inf, math.inf]), observed=[np.full(5, 500.0)])
    assert (j.verdict, j.code, j.reached) == (INCONCLUSIVE, "censored", "3 of 5 reached it")
    assert j.measured == (224.0, 113.0, math.inf)
    assert j.seeds_needed == 19 and "19 runs" in j.reason


def test_a_claim_at_the_cap_saturates_and_does_not_flip_on_one_seed() -> None:
    """Document 004's PPO 498.2 on CartPole against five seeds at 500: the old rule said not reproduced (a
    zero-width CI at the cap), and flipped when one seed read 492.9. Now it is saturated either way."""
    claims = one_cell("CartPole-v1", claimed=498.2)
    at_cap = verdict_of(claims, np.full(5, 500.0))
    one_off = verdict_of(claims, np.array([500.0, 500.0, 500.0, 500.0, 492.9]))
    for j in (at_cap, one_off):
        assert (j.verdict, j.code) == (INCONCLUSIVE, "saturated")
        assert j.tolerance == pytest.approx(0.1 * (500.0 - 22.55))
    gain = one_cell("CartPole-v1", arm="a", versus="b", kind="improvement", relative=True, claimed=0.4, claimed_a=500.0,
                    claimed_b=498.2)  # fmt: skip
    j = verdict_of(gain, np.full(5, 500.0), np.full(5, 500.0))
    assert (j.verdict, j.code) == (INCONCLUSIVE, "saturated") and j.tolerance == pytest.approx(0.9)  # half the +1.8


def test_a_single_agent_claim_inside_its_prediction_interval_is_not_refuted() -> None:
    """The zoo's PPO LunarLander-v2 242.1 (one agent, ±31.8 over its 369 episodes) against the suite's five seeds
    (254.1, 4 of 5 at or above 242.1): the old rule said not reproduced from the mean's CI. The claim is one draw:
    its interval includes one run's spread and the agent's episode noise, so the cell is inconclusive."""
    claims = one_cell(claimed=242.1, kind="single_agent", claimed_pm=31.8, claim_episodes=369)
    j = verdict_of(claims, ZOO_LUNAR_PPO)
    s2 = ZOO_LUNAR_PPO.var(ddof=1)
    se = math.sqrt(s2 / 5 + s2 + 31.8**2 / 369)
    assert j.verdict == INCONCLUSIVE and j.code == "wide"
    assert j.interval95 is not None and j.interval95[1] - j.interval95[0] > 2 * 2.0 * se  # t with ~4-5 df, > 2 se
    assert j.band == pytest.approx((242.1 - 42.683, 242.1 + 42.683))
    assert "no number of seeds settles it" in j.reason


def test_a_single_run_claim_outside_its_prediction_interval_is_not_reproduced() -> None:
    """Document 004's GRPO 315.2 on LunarLander against ppo-rlvr-prm's -109.0: outside even the prediction interval
    of one run, whose width (not the mean's CI) is what the verdict reports."""
    values = np.array([-103.58, -131.16, -97.05, -97.93, -115.28])
    j = verdict_of(one_cell(claimed=315.2), values)
    s = values.std(ddof=1)
    half = scipy.stats.t.ppf(0.975, 4) * s * math.sqrt(1 + 1 / 5)
    assert j.verdict == NOT_REPRODUCED
    assert j.interval95 == pytest.approx((values.mean() - half, values.mean() + half))


def test_an_interval_too_wide_for_the_tolerance_is_inconclusive_with_the_seeds_that_settle_it() -> None:
    """A CleanRL-style mean over 3 seeds whose runs spread widely: the old rule reproduced it (the claim inside a
    wide CI); now the 90% interval is wider than the band, and the seeds for power 0.8 are given."""
    claims = one_cell(claimed=250.0, kind="mean_over_seeds", claimed_pm=5.0, claim_n=3, seeds="0-2")
    j = verdict_of(claims, np.array([200.0, 260.0, 300.0]))
    assert j.verdict == INCONCLUSIVE and j.code == "wide"
    assert j.interval90 is not None and j.band is not None
    assert j.interval90[0] < j.band[0] and j.seeds_needed is not None and 3 < j.seeds_needed < 1000


def test_an_improvement_by_sign_only_is_not_reproduced() -> None:
    """+0.1% [0.05, 0.2] against a claimed +8.8% (289.7 -> 315.2): the old rule reproduced it because its CI
    excluded zero. The gain is judged as 315.2 - 289.7 = +25.5 with a tolerance of half of it."""
    claims = one_cell(arm="a", versus="b", kind="improvement", relative=True, claimed=8.8, claimed_a=315.2, claimed_b=289.7)
    b = np.array([289.0, 290.0, 291.0, 289.5, 290.5])
    j = verdict_of(claims, b + 0.29, b)
    assert j.measured[0] == pytest.approx(0.29) and j.tolerance == pytest.approx(12.75)
    assert j.band == pytest.approx((25.5 - 12.75, 25.5 + 12.75))
    assert j.verdict == NOT_REPRODUCED and j.normalised is not None
    assert j.normalised[0] == pytest.approx(0.29 / (242.1 + 184.73) * 100)


def test_a_gain_whose_endpoint_the_env_cannot_produce_is_impossible() -> None:
    """Pong's +7% is 20.1 -> 21.5, above the 21 a game allows: the old rule checked value cells only."""
    claims = one_cell("ALE/Pong-v5", arm="a", versus="b", kind="improvement", relative=True, claimed=7.0, claimed_a=21.5,
                      claimed_b=20.1)  # fmt: skip
    j = verdict_of(claims, np.full(5, -21.0), np.full(5, -21.0))
    assert j.verdict == IMPOSSIBLE and "implies A = 21.5" in j.reason and "[-21, 21]" in j.reason


def test_a_claimed_mean_off_the_reward_lattice_is_impossible() -> None:
    claims = one_cell("TextMatch-v0", metric="final_train_return", last_episodes=8, claimed=4.85, decimals=2,
                      claim_episodes=8)  # fmt: skip
    j = verdict_of(claims, np.array([4.8625, 5.0, 3.9, 4.1, 4.0]))
    assert j.verdict == IMPOSSIBLE and j.extra["attainable_means"] == "4.725, 4.8625"


def test_a_reference_column_is_shown_not_judged() -> None:
    """Canonical grpo beside document 004's numbers: the old rule judged and counted it."""
    claims = one_cell(claimed=315.2, role="reference")
    j = verdict_of(claims, np.array([-73.69, -122.77, -47.31, -155.85, -70.75]))
    assert (j.verdict, j.family, j.p) == (REFERENCE, "reference", None)
    assert j.measured[0] == pytest.approx(-94.074)
    assert control_multiplicity([j], "holm")[0].verdict == REFERENCE


def test_a_stand_in_has_words_of_its_own() -> None:
    """A stand-in's cells never read 'reproduced': the old rule gave them the source's words."""
    claims = one_cell("TextMatch-v0", stand_in="a substitute task", arm="a", versus="b", kind="ratio",
                      metric="sample_diversity", claimed_a=0.72, claimed_b=0.67, tolerance=0.1)  # fmt: skip
    j = verdict_of(claims, np.full(5, 0.5) + np.arange(5) * 0.001, np.full(5, 0.5) + np.arange(5) * 0.001)
    assert j.family == "stand-in" and j.verdict in (CONSISTENT, STAND_IN_INCONCLUSIVE)
    assert j.measured[0] == pytest.approx(1.0)
    assert j.band == pytest.approx((math.log(0.72 / 0.67 - 0.1), math.log(0.72 / 0.67 + 0.1)))


def test_holm_turns_a_marginal_decision_inconclusive() -> None:
    """Two decisions at p 0.03 and 0.04 each pass alone; Holm over the two adjusts both to 0.06 (> 0.05)."""
    marginal = [Judgement(REPRODUCED, "x", "equivalent", p=0.03), Judgement(NOT_REPRODUCED, "y", "outside", p=0.04)]
    adjusted = control_multiplicity(marginal, "holm")
    assert [j.verdict for j in adjusted] == [INCONCLUSIVE, INCONCLUSIVE]
    assert [j.p_adjusted for j in adjusted] == pytest.approx([0.06, 0.06]) and adjusted[0].code == "multiplicity"
    strong = control_multiplicity([marginal[0], Judgement(NOT_REPRODUCED, "y", "outside", p=0.001)], "holm")
    assert [j.verdict for j in strong] == [REPRODUCED, NOT_REPRODUCED]
    assert [j.p_adjusted for j in strong] == pytest.approx([0.03, 0.002])
    assert [j.verdict for j in control_multiplicity(marginal, "none")] == [REPRODUCED, NOT_REPRODUCED]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_claimed_nan_or_inf_is_one_error_line(bad: float) -> None:
    with pytest.raises(UserError, match=r"claimed: expected a finite number") as err:
        one_cell(claimed=bad)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ({"claimed": 1.0, "kind": "mean_over_seeds"}, "needs claimed_pm"),
        ({"claimed": 1.0, "claimed_pm": 2.0}, "kind 'single_run' has no claimed_pm"),
        ({"claimed": 8.8, "versus": "b", "relative": True}, "needs its endpoints"),
        ({"claimed": 9.9, "versus": "b", "relative": True, "claimed_a": 315.2, "claimed_b": 289.7}, "endpoints give"),
        ({"claimed": 1.0, "metric": "stability"}, "no default tolerance"),
        ({"claimed": 1.0, "claimed_range": [0, 2]}, "exactly one of"),
        ({"claimed": 1.0, "kind": "sideways"}, "unknown value 'sideways'"),
    ],
)
def test_a_malformed_claim_is_one_clear_error(cell: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match=message):
        one_cell(**cell)
