"""Two-sample significance tests, Holm correction, and the number of seeds a comparison needs.

Colas, Sigaud and Oudeyer 2018, "How Many Random Seeds? Statistical Power Analysis in Deep Reinforcement
Learning Experiments" (arXiv 1806.08295): compare two algorithms with Welch's t-test at alpha 0.05, run a
pilot study, and choose the number of seeds so that the test has power 0.8 for the effect of interest.
Welch's t-test and the Mann-Whitney U test come from scipy; Holm's step-down correction (Holm 1979,
"A Simple Sequentially Rejective Multiple Test Procedure") is implemented here (it matches statsmodels'
``multipletests(method="holm")``, which the tests check).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import scipy.stats

Alternative = Literal["two-sided", "larger"]
"""``"two-sided"``: H1 is mean_a != mean_b. ``"larger"``: H1 is mean_a > mean_b (Colas et al.'s one-sided form)."""

MAX_SEEDS = 10_000
"""Search limit of :func:`seeds_needed`."""


def welch_test(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Welch's unequal-variance t-test, two-sided (``scipy.stats.ttest_ind(equal_var=False)``).

    Args:
        a: Scores of algorithm A, shape ``(n_a,)``.
        b: Scores of algorithm B, shape ``(n_b,)``.

    Returns:
        ``(t, p)``; NaN when either sample has fewer than 2 values or both have zero variance.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size < 2 or b.size < 2 or (np.ptp(a) == 0 and np.ptp(b) == 0):
        return float("nan"), float("nan")
    result = scipy.stats.ttest_ind(a, b, equal_var=False)
    return float(result.statistic), float(result.pvalue)


def mann_whitney_test(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Mann-Whitney U test, two-sided (``scipy.stats.mannwhitneyu``, exact for small samples without ties).

    Args:
        a: Scores of algorithm A, shape ``(n_a,)``.
        b: Scores of algorithm B, shape ``(n_b,)``.

    Returns:
        ``(U of a, p)``; NaN when either sample is empty.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size == 0 or b.size == 0:
        return float("nan"), float("nan")
    result = scipy.stats.mannwhitneyu(a, b, alternative="two-sided")
    return float(result.statistic), float(result.pvalue)


def holm_adjust(pvalues: np.ndarray) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (family-wise error control; Holm 1979).

    Sort the m p-values ascending; the i-th smallest (i = 0..m-1) becomes ``min(1, (m - i) * p_(i))``, made
    non-decreasing by a running maximum. Reject H_i at level alpha iff its adjusted p-value is <= alpha.

    Args:
        pvalues: Shape ``(m,)``. NaN entries (tests that could not run) stay NaN and do not count in m.

    Returns:
        Adjusted p-values, shape ``(m,)``, in the input order.
    """
    p = np.asarray(pvalues, dtype=float).reshape(-1)
    adjusted = np.full(p.shape, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    m = valid.size
    if m == 0:
        return adjusted
    order = valid[np.argsort(p[valid], kind="stable")]
    stepped = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted[order] = np.maximum.accumulate(stepped)
    return adjusted


def cohens_d(a: np.ndarray, b: np.ndarray) -> float:
    """Standardised mean difference ``(mean_a - mean_b) / sqrt((s_a^2 + s_b^2) / 2)`` (sample stds, ddof 1).

    Returns NaN with fewer than 2 values in a sample or zero spread in both.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size < 2 or b.size < 2:
        return float("nan")
    spread = math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2.0)
    return float((a.mean() - b.mean()) / spread) if spread > 0 else float("nan")


def welch_power(
    n: int, effect: float, std_a: float, std_b: float, *, alpha: float = 0.05, alternative: Alternative = "two-sided"
) -> float:
    """Power of Welch's t-test with ``n`` runs per algorithm, from the noncentral t distribution.

    With ``v = (s_a^2 + s_b^2) / n`` the test statistic follows a noncentral t with noncentrality
    ``effect / sqrt(v)`` and Welch-Satterthwaite degrees of freedom
    ``(n - 1) (s_a^2 + s_b^2)^2 / (s_a^4 + s_b^4)`` (Colas et al. 2018, Sec. 4). With ``s_a = s_b`` this is the
    pooled two-sample t-test's power (statsmodels ``TTestIndPower``).

    Args:
        n: Runs per algorithm (>= 2).
        effect: True difference of means ``mean_a - mean_b`` to detect, in score units.
        std_a: Standard deviation of A's scores (from a pilot).
        std_b: Standard deviation of B's scores.
        alpha: Significance level.
        alternative: ``"two-sided"`` or ``"larger"`` (one-sided, H1: A > B).

    Returns:
        Probability of rejecting H0 when the difference is ``effect``.
    """
    if n < 2:
        return float("nan")
    var_sum = std_a**2 + std_b**2
    if var_sum == 0:
        return 1.0 if effect != 0 else alpha
    df = (n - 1) * var_sum**2 / (std_a**4 + std_b**4)
    noncentrality = effect / math.sqrt(var_sum / n)
    if alternative == "larger":
        return float(scipy.stats.nct.sf(scipy.stats.t.ppf(1 - alpha, df), df, noncentrality))
    crit = scipy.stats.t.ppf(1 - alpha / 2, df)
    return float(scipy.stats.nct.sf(crit, df, noncentrality) + scipy.stats.nct.cdf(-crit, df, noncentrality))


def seeds_needed(
    effect: float,
    std_a: float,
    std_b: float,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    alternative: Alternative = "two-sided",
    max_n: int = MAX_SEEDS,
) -> int | None:
    """Smallest number of runs per algorithm for which Welch's t-test reaches ``power`` (Colas et al. 2018).

    Searches n >= 2 over :func:`welch_power` (doubling, then bisection: power increases with n), taking the
    pilot standard deviations as the true ones.

    Args:
        effect: Difference of means to detect (``mean_a - mean_b``; its sign matters only for ``"larger"``).
        std_a: Pilot standard deviation of A.
        std_b: Pilot standard deviation of B.
        alpha: Significance level.
        power: Target power (1 - type-II error).
        alternative: ``"two-sided"`` or ``"larger"``.
        max_n: Give up above this many runs.

    Returns:
        The number of runs per algorithm, or None when no n <= ``max_n`` reaches the power (e.g. effect 0).
    """
    if not (np.isfinite(effect) and np.isfinite(std_a) and np.isfinite(std_b)) or effect == 0:
        return None
    n = 2
    if welch_power(n, effect, std_a, std_b, alpha=alpha, alternative=alternative) >= power:
        return n
    low, high = n, n
    while welch_power(high, effect, std_a, std_b, alpha=alpha, alternative=alternative) < power:
        if high >= max_n:
            return None
        low, high = high, min(2 * high, max_n)
    while high - low > 1:
        mid = (low + high) // 2
        if welch_power(mid, effect, std_a, std_b, alpha=alpha, alternative=alternative) >= power:
            high = mid
        else:
            low = mid
    return high
