"""Replication statistics: equivalence (TOST) of a measured-minus-claimed difference, its evidence against a claim,
the seeds that would settle it, censored times, distribution-free prediction intervals and reward lattices.

A claim is judged through the difference ``delta = measured - claimed`` and a band of values that count as "the
same" (the claim's tolerance, ``[lo, hi]`` around zero, or one side of zero for a claimed direction):

* **Equivalence** (two one-sided tests, Schuirmann 1987; Lakens 2017): the difference lies inside the band when
  both one-sided tests reject at ``alpha``, i.e. the ``1 - 2 alpha`` (90%) interval lies inside the band
  (:func:`equivalence_p`).
* **Evidence against** (a minimum-effect test): the difference lies outside the band when the ``1 - alpha`` (95%)
  interval lies entirely outside it (:func:`outside_p`, two-sided convention, so one threshold ``alpha`` serves both).

The difference's standard error carries every source of noise the claim has (:class:`Difference`): a mean over
seeds (Welch, with Satterthwaite's degrees of freedom), a single run (the claim is one draw, so its own between-seed
variance is added: the prediction interval of Patil, Peng & Leek 2016), a single agent's evaluation episodes.
With 3-5 seeds a percentile bootstrap interval is about ``[min, max]`` and covers far less than its nominal level,
so means get t-based intervals here; a bootstrap stays valid for statistics without a t-theory only with many runs
(:data:`MIN_BOOTSTRAP_RUNS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.stats

ALPHA = 0.05
"""Level of both tests: equivalence reads the 90% interval, evidence against the 95% interval."""

POWER = 0.8
"""Target power of the seeds-to-settle estimate (Colas et al. 2018)."""

MAX_SEEDS = 1_000
"""Search limit of :func:`seeds_to_settle`."""

MIN_BOOTSTRAP_RUNS = 20
"""Fewest runs for which a percentile bootstrap interval of a statistic without a t-theory (the IQM) is reported:
below it the bootstrap's interval is about the sample's range and covers too little (Efron & Tibshirani 1993,
ch. 13; with 5 runs a 95% percentile interval of the mean covers roughly 80%)."""


@dataclass(frozen=True)
class Component:
    """One independent source of variance of a difference: its variance and its degrees of freedom."""

    variance: float
    """Contribution to the difference's variance."""
    df: float
    """Degrees of freedom of its estimate (``inf``: known exactly)."""


@dataclass(frozen=True)
class Difference:
    """An estimated difference ``measured - claimed`` with a t-based sampling distribution."""

    point: float
    """Point estimate."""
    components: tuple[Component, ...]
    """Variance components (summed; Welch-Satterthwaite degrees of freedom)."""

    @property
    def se(self) -> float:
        """Standard error."""
        return math.sqrt(sum(c.variance for c in self.components))

    @property
    def df(self) -> float:
        """Welch-Satterthwaite degrees of freedom ``(sum v)^2 / sum(v^2 / df)`` (``inf`` with no estimated part)."""
        total = sum(c.variance for c in self.components)
        denom = sum(c.variance**2 / c.df for c in self.components if math.isfinite(c.df) and c.df > 0)
        if total == 0 or denom == 0:
            return math.inf
        return total**2 / denom

    def interval(self, level: float) -> tuple[float, float]:
        """Two-sided ``level`` interval: ``point +- t_{(1+level)/2, df} se``."""
        half = _t_quantile((1 + level) / 2, self.df) * self.se
        return self.point - half, self.point + half


def _t_quantile(q: float, df: float) -> float:
    return float(scipy.stats.norm.ppf(q) if not math.isfinite(df) else scipy.stats.t.ppf(q, df))


def _t_sf(x: float, df: float) -> float:
    return float(scipy.stats.norm.sf(x) if not math.isfinite(df) else scipy.stats.t.sf(x, df))


def welch_components(values: np.ndarray) -> Component:
    """The variance of a mean over runs, ``s^2 / n`` with ``n - 1`` degrees of freedom (``(n,)`` values)."""
    values = np.asarray(values, dtype=float)
    n = values.size
    if n < 2:
        return Component(math.nan, math.nan)
    return Component(float(values.var(ddof=1)) / n, n - 1.0)


def equivalence_p(diff: Difference, lo: float, hi: float) -> float:
    """TOST p-value that the difference lies inside ``[lo, hi]`` (``lo`` may be ``-inf``, ``hi`` ``+inf``): the larger
    of the two one-sided p-values. ``<= alpha`` iff the ``1 - 2 alpha`` interval lies inside the band. With zero
    standard error: 0 strictly inside, 1 otherwise."""
    if diff.se == 0:
        return 0.0 if lo < diff.point < hi else 1.0
    p_lo = 0.0 if lo == -math.inf else _t_sf((diff.point - lo) / diff.se, diff.df)
    p_hi = 0.0 if hi == math.inf else _t_sf((hi - diff.point) / diff.se, diff.df)
    return max(p_lo, p_hi)


def outside_p(diff: Difference, lo: float, hi: float) -> float:
    """Two-sided minimum-effect p-value that the difference lies outside ``[lo, hi]``: twice the one-sided p-value
    against the nearer edge (1 when the point is inside). ``<= alpha`` iff the ``1 - alpha`` interval lies entirely
    outside the band. With zero standard error: 0 outside, 1 inside or on an edge."""
    if lo <= diff.point <= hi:
        return 1.0
    if diff.se == 0:
        return 0.0
    edge = hi if diff.point > hi else lo
    return min(1.0, 2 * _t_sf(abs(diff.point - edge) / diff.se, diff.df))


def power(diff: Difference, lo: float, hi: float, alpha: float = ALPHA) -> float:
    """Power of the test the point estimate points to, taking the point as the truth: equivalence (inside the band;
    the shifted-t approximation ``T((hi - d)/se - t) + T((d - lo)/se - t) - 1``) or evidence against (outside)."""
    se, df, d = diff.se, diff.df, diff.point
    if se == 0:
        return 1.0
    if lo <= d <= hi:
        t = _t_quantile(1 - alpha, df)
        upper = 1.0 if hi == math.inf else 1 - _t_sf((hi - d) / se - t, df)
        lower = 1.0 if lo == -math.inf else 1 - _t_sf((d - lo) / se - t, df)
        return max(0.0, upper + lower - 1)
    t = _t_quantile(1 - alpha / 2, df)
    edge = hi if d > hi else lo
    return 1 - _t_sf(abs(d - edge) / se - t, df)  # P(the far end of the interval clears the edge)


def seeds_to_settle(
    at: Callable[[int], Difference], lo: float, hi: float, *, start: int, target: float = POWER, max_n: int = MAX_SEEDS
) -> int | None:
    """Smallest number of seeds ``n >= start`` at which the difference ``at(n)`` (the same point and spreads, the
    standard error of ``n`` seeds) reaches ``target`` power; None when no ``n <= max_n`` does (e.g. a single run's
    own spread is wider than the tolerance: more seeds cannot remove the claim's own noise)."""
    if power(at(max_n), lo, hi) < target:
        return None
    low, high = start, max_n
    if power(at(low), lo, hi) >= target:
        return low
    while high - low > 1:
        mid = (low + high) // 2
        if power(at(mid), lo, hi) >= target:
            high = mid
        else:
            low = mid
    return high


# ------------------------------------------------------------------------------------------------ censored times


@dataclass(frozen=True)
class Censored:
    """Times to an event (steps or updates to a threshold) of which some runs never saw the event."""

    times: np.ndarray
    """Event time, or the time the run was last observed (its budget) when it never got there, ``(n,)``."""
    observed: np.ndarray
    """Whether the event happened, ``(n,)`` bool."""

    @property
    def reached(self) -> int:
        """Runs that got there."""
        return int(self.observed.sum())

    def km_median(self, level: float = 0.95) -> tuple[float, float, float]:
        """Kaplan-Meier median and its ``level`` confidence interval (statsmodels ``SurvfuncRight``, log-log
        transform): ``inf`` where the estimate or a bound is not reached within the observed times."""
        from statsmodels.duration.survfunc import SurvfuncRight

        if self.reached == 0:
            return math.inf, float(self.times.min()), math.inf  # at least as late as every run was observed
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # log(0) of the transform at a survival of 1
            fit = SurvfuncRight(self.times, self.observed.astype(float))
            median = fit.quantile(0.5)
            lo, hi = fit.quantile_ci(0.5, alpha=1 - level)
        nan_to_inf = [math.inf if x is None or not math.isfinite(float(x)) else float(x) for x in (median, hi)]
        lo_value = float(lo) if lo is not None and math.isfinite(float(lo)) else float(self.times.min())
        return nan_to_inf[0], lo_value, nan_to_inf[1]

    def restricted(self) -> np.ndarray:
        """Each run's time, a run that never got there at the time it was last observed: the terms of the restricted
        mean (Royston & Parmar 2013), exact when every censoring is the run's budget."""
        return self.times.astype(float)


def order_statistic_interval(values: np.ndarray, level: float) -> tuple[float, float] | None:
    """Distribution-free prediction interval for ONE new run from ``n`` runs (Wilks 1941): ``[x_(j), x_(n+1-j)]``
    covers a new draw with probability ``(n + 1 - 2j) / (n + 1)``; the widest ``j`` reaching ``level``. None when
    ``n`` runs are too few for that coverage (19 for 90%, 39 for 95%). Censored runs enter as ``inf``."""
    x = np.sort(np.asarray(values, dtype=float))
    n = x.size
    j = math.floor((n + 1) * (1 - level) / 2 + 1e-12)
    if j < 1:
        return None
    return float(x[j - 1]), float(x[n - j])


def runs_for_order_statistic_interval(level: float) -> int:
    """Fewest runs for which :func:`order_statistic_interval` exists at ``level``."""
    return math.ceil(2 / (1 - level) - 1 - 1e-9)


# ------------------------------------------------------------------------------------------------ reward lattices


@dataclass(frozen=True)
class Lattice:
    """The returns one episode can have when they are evenly spaced: ``start + step * m`` for ``m = 0..count-1``
    (CartPole-v1: 1..500; Pong: -21..21; TextMatch-v0: ``1.1 m - 0.1 L``, ``m`` matching characters)."""

    start: float
    step: float
    count: int

    def mean_values(self, episodes: int) -> np.ndarray:
        """Every mean of ``episodes`` returns, ascending: ``start + step * M / episodes``, ``M = 0..episodes (count-1)``."""
        m = np.arange(episodes * (self.count - 1) + 1)
        return self.start + self.step * m / episodes

    def nearest_means(self, value: float, episodes: int) -> tuple[float, float]:
        """The attainable means of ``episodes`` returns at or just below and at or just above ``value`` (NaN past an end)."""
        means = self.mean_values(episodes)
        below, above = means[means <= value + 1e-12], means[means >= value - 1e-12]
        return (float(below[-1]) if below.size else math.nan, float(above[0]) if above.size else math.nan)

    def attainable(self, value: float, episodes: int, decimals: int) -> bool:
        """Whether some mean of ``episodes`` returns rounds to ``value`` at ``decimals`` places (half a unit of the last
        place either side, and a little for float printing)."""
        half = 0.5 * 10.0**-decimals + 1e-9
        means = self.mean_values(episodes)
        return bool(np.any(np.abs(means - value) <= half))


def decimals_of(text: str) -> int:
    """Decimal places a number was written with (``"4.85"`` -> 2, ``"500"`` -> 0)."""
    _, _, frac = text.strip().partition(".")
    return len(frac.rstrip()) if frac else 0
