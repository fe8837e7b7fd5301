"""Metrics over learning curves and per-update traces: sample efficiency, stability, speed.

Stability metrics follow Chan, Fishman, Canny, Korattikara and Guadarrama 2020, "Measuring the Reliability
of Reinforcement Learning Algorithms" (ICLR, arXiv 1912.05663), and its library
google-research/rl-reliability-metrics (``metrics/metrics_online.py``, ``metrics/metric_utils.py``):

- Dispersion across Time (DT): IQR within a sliding window along the detrended curve (``IqrWithinRuns``).
- Short-term Risk across Time (SRT): CVaR of the detrended curve, lower tail (``LowerCVaROnDiffs``).
- Long-term Risk across Time (LRT): CVaR of the drawdown (``*CVaROnDrawdown``).
- Dispersion across Runs (DR): IQR across runs at each evaluation point (``IqrAcrossRuns``).
- Risk across Runs (RR): CVaR across runs of final performance, lower tail (``LowerCVaROnAcross``).

Detrending is first differencing (paper Sec. 3.1). The library divides each difference by the step between
its points (``metric_utils.differences``) so that uneven spacing does not distort it; here the rate is
multiplied back by the median step, which keeps return units ("change per evaluation interval") and equals
plain first differences on a regular grid. Windows count points, not env steps (the library's windows are in
time units; the two agree on a regular grid). The library's optional low-pass filter and curve-range
normalisation are not applied.

Missing values: NaN in gives NaN out (a NaN evaluation is an unknown result, never a low or a high one), except
:func:`eval_steps_to_threshold`, whose NaN already means "never reached" and which therefore refuses a NaN
input with a ValueError, and :func:`trace_summary`, whose NaN entries are updates that did not log the metric.

Curve shapes: ``values (num_points,)`` with matching ``steps (num_points,)``, steps increasing; across runs,
``values (num_runs, num_points)`` on shared steps.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import scipy.stats

Tail = Literal["lower", "upper"]


def eval_steps_to_threshold(steps: np.ndarray, means: np.ndarray, threshold: float) -> float:
    """First evaluation step whose mean evaluation return is >= ``threshold``.

    Args:
        steps: Env steps of the evaluations, shape ``(num_evals,)``, increasing.
        means: Mean evaluation return at each step, shape ``(num_evals,)``.
        threshold: Target return.

    Returns:
        That step, or NaN if the threshold is never reached.

    Raises:
        ValueError: ``means`` or ``steps`` holds a NaN (the answer would read as "never reached").
    """
    steps, means = np.asarray(steps, dtype=float), np.asarray(means, dtype=float)
    if np.isnan(means).any() or np.isnan(steps).any():
        raise ValueError("eval_steps_to_threshold: the evaluation curve holds NaN; a NaN evaluation is not 'below'")
    hits = np.flatnonzero(means >= threshold)
    return float(steps[hits[0]]) if hits.size else float("nan")


def area_under_curve(steps: np.ndarray, values: np.ndarray) -> float:
    """Trapezoid area under an evaluation curve divided by its step span: the curve's average return.

    Args:
        steps: Shape ``(num_points,)``, increasing.
        values: Shape ``(num_points,)``.

    Returns:
        ``trapezoid(values, steps) / (steps[-1] - steps[0])``; the value itself for a single point; NaN if empty.
    """
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if values.size == 0:
        return float("nan")
    if values.size == 1 or steps[-1] == steps[0]:
        return float(values.mean())
    return float(np.trapezoid(values, steps) / (steps[-1] - steps[0]))


def detrend(values: np.ndarray, steps: np.ndarray | None = None) -> np.ndarray:
    """First differences of a curve (Chan et al. 2020, Sec. 3.1), rescaled for uneven spacing.

    Args:
        values: Shape ``(num_points,)``.
        steps: Shape ``(num_points,)`` or None (evenly spaced). If given, each difference is divided by its step
            gap and multiplied by the median gap.

    Returns:
        Shape ``(num_points - 1,)``.
    """
    diffs = np.diff(np.asarray(values, dtype=float))
    if steps is None or diffs.size == 0:
        return diffs
    gaps = np.diff(np.asarray(steps, dtype=float))
    return diffs / gaps * np.median(gaps)


def cvar(values: np.ndarray, alpha: float = 0.05, tail: Tail = "lower") -> float:
    """Conditional value at risk (expected shortfall), as in rl-reliability-metrics ``compute_cvar``.

    The value at risk is the ``alpha`` quantile (lower tail) or ``1 - alpha`` quantile (upper tail), linearly
    interpolated; CVaR is the mean of the values at or beyond it.

    Args:
        values: Shape ``(n,)``.
        alpha: Tail fraction.
        tail: ``"lower"`` (bad outcomes are small values) or ``"upper"`` (bad outcomes are large values).

    Returns:
        The CVaR, or NaN for an empty array or one holding a NaN.
    """
    values = np.asarray(values, dtype=float).reshape(-1)
    if values.size == 0 or np.isnan(values).any():
        return float("nan")
    if tail == "lower":
        var = np.percentile(values, 100 * alpha)
        return float(values[values <= var].mean())
    var = np.percentile(values, 100 * (1 - alpha))
    return float(values[values >= var].mean())


def drawdown(values: np.ndarray) -> np.ndarray:
    """Drop from the running maximum: ``max(values[:t+1]) - values[t]`` (>= 0), shape ``(num_points,)``."""
    values = np.asarray(values, dtype=float)
    return np.maximum.accumulate(values) - values


def dispersion_across_time(values: np.ndarray, steps: np.ndarray | None = None, window: int = 5) -> float:
    """Dispersion across Time (Chan et al. 2020): IQR of the detrended curve within a sliding window.

    The IQR is taken in every window of ``window`` consecutive detrended points and summarised by the median
    over windows. A curve with fewer detrended points than ``window`` uses one window over all of them
    (the library's ``window_size=None``).

    Args:
        values: Curve, shape ``(num_points,)``.
        steps: Its steps, shape ``(num_points,)``, or None if evenly spaced.
        window: Window length in detrended points.

    Returns:
        Median windowed IQR (lower is more stable); NaN with fewer than 2 points.
    """
    diffs = detrend(values, steps)
    if diffs.size == 0:
        return float("nan")
    width = min(max(int(window), 1), diffs.size)
    windows = np.lib.stride_tricks.sliding_window_view(diffs, width)
    return float(np.median(scipy.stats.iqr(windows, axis=1)))


def short_term_risk(values: np.ndarray, steps: np.ndarray | None = None, alpha: float = 0.05) -> float:
    """Short-term Risk across Time (Chan et al. 2020): lower-tail CVaR of the detrended curve.

    Args:
        values: Curve, shape ``(num_points,)``.
        steps: Its steps or None.
        alpha: Tail fraction.

    Returns:
        Mean of the worst ``alpha`` fraction of step-to-step changes (negative = drops; higher is better).
    """
    return cvar(detrend(values, steps), alpha, "lower")


def long_term_risk(values: np.ndarray, alpha: float = 0.05) -> float:
    """Long-term Risk across Time (Chan et al. 2020): CVaR of the drawdown, worst (largest) tail.

    The paper defines LRT on the worst drawdowns; the library's ``LowerCVaROnDrawdown`` takes the lower tail of
    the non-negative drawdown, which mostly measures zeros, so the upper tail is used here.

    Args:
        values: Curve, shape ``(num_points,)``.
        alpha: Tail fraction.

    Returns:
        Mean of the largest ``alpha`` fraction of drawdowns (>= 0; lower is better).
    """
    return cvar(drawdown(values), alpha, "upper")


def dispersion_across_runs(values: np.ndarray) -> float:
    """Dispersion across Runs (Chan et al. 2020): IQR across runs at each evaluation point, averaged over points.

    Args:
        values: Shape ``(num_runs, num_points)``, runs evaluated at the same steps.

    Returns:
        Mean over points of the IQR across runs; NaN without data.
    """
    values = np.asarray(values, dtype=float)
    if values.ndim != 2 or values.size == 0:
        return float("nan")
    return float(np.mean(scipy.stats.iqr(values, axis=0)))


def risk_across_runs(final_scores: np.ndarray, alpha: float = 0.05) -> float:
    """Risk across Runs (Chan et al. 2020): lower-tail CVaR across runs of final performance.

    Args:
        final_scores: Shape ``(num_runs,)``.
        alpha: Tail fraction; with fewer than ``1 / alpha`` runs this is the worst run.

    Returns:
        Expected final score of the worst ``alpha`` fraction of runs (higher is better).
    """
    return cvar(final_scores, alpha, "lower")


def trace_summary(trace: np.ndarray) -> tuple[float, float]:
    """Mean and last-quartile mean of a per-update trace (gradient variance, approximate KL, entropy).

    Args:
        trace: Shape ``(num_updates,)`` in update order; NaN entries are ignored.

    Returns:
        ``(mean over all updates, mean over the last ceil(25%) of updates)``; NaN for an empty trace.
    """
    trace = np.asarray(trace, dtype=float).reshape(-1)
    trace = trace[~np.isnan(trace)]
    if trace.size == 0:
        return float("nan"), float("nan")
    last = trace[-int(np.ceil(trace.size / 4)) :]
    return float(trace.mean()), float(last.mean())


def wall_time_to_threshold(
    step: float,
    *,
    steps: np.ndarray | None = None,
    wall_times: np.ndarray | None = None,
    steps_per_second: float | None = None,
) -> float:
    """Wall-clock seconds until a run reached ``step`` (e.g. its steps to threshold).

    Args:
        step: Env step reached (NaN if never).
        steps: Steps of a (step, wall time) curve, shape ``(num_points,)``, increasing. Preferred when given.
        wall_times: Seconds since the trial started at those steps, shape ``(num_points,)``.
        steps_per_second: Average throughput, used when no curve is given: ``step / steps_per_second``.

    Returns:
        Seconds (linear interpolation on the curve), or NaN if ``step`` is NaN, the curve holds a NaN, or
        nothing can be computed.
    """
    if not np.isfinite(step):
        return float("nan")
    if steps is not None and wall_times is not None and np.size(steps) > 0:
        if np.isnan(np.asarray(steps, dtype=float)).any() or np.isnan(np.asarray(wall_times, dtype=float)).any():
            return float("nan")
        return float(np.interp(step, np.asarray(steps, dtype=float), np.asarray(wall_times, dtype=float)))
    if steps_per_second is not None and np.isfinite(steps_per_second) and steps_per_second > 0:
        return float(step / steps_per_second)
    return float("nan")
