"""The metrics a claim can name, and the comparisons (value, improvement, ratio) with bootstrap CIs.

A metric maps one recorded trial to one number (a run's score on that metric); a cell aggregates its runs with
the source's statistic (mean, median or IQM) and a 95% percentile bootstrap CI over runs (rliable, as
:func:`suite.stats.score_intervals`). Comparisons of two arms resample each arm's runs independently.

Named metrics (``metric = "<name>"`` in a claim set; parameters in parentheses):

==========================  ======================================================================  ========
name                        one run's value                                                         better
==========================  ======================================================================  ========
``final_return``            mean return of the final evaluation (deterministic policy)              higher
``final_train_return``      mean return of the last ``last_episodes`` (100) training episodes        higher
                            (CleanRL's reported number; sampled actions)
``steps_to_threshold``      first evaluation step whose mean return >= ``threshold`` (default: the   lower
                            env's, ``suite/data/envs.toml``); never = inf
``first_update_at_max``     update number of the first training episode whose return reaches        lower
                            ``target`` (default: the env's maximum, e.g. TextMatch ``len(target)``);
                            never = inf
``stability``               Chan et al. 2020 long-term risk across time: CVaR (worst ``alpha`` =     lower
                            5%) of the drawdown of the training curve from its running maximum,
                            episodes in the order they ended (:func:`suite.stats.long_term_risk`)
``sample_diversity``        fraction of distinct strings among sampled (not greedy) generations     higher
                            (TextMatch-v0; recorded by the trial, ``record["metrics"]``)
``peak_rss_mb``             peak resident memory of the trial process (MB)                          lower
``steps_per_second``        training env steps per second                                           higher
``wall_time_s``             wall time of the trial (s)                                              lower
``metrics.<name>``          any trial-level scalar in ``record["metrics"]``                         higher
``phases.<phase>.<field>``  any per-phase number in ``record["phases"]`` (e.g. a memory probe's)    lower
==========================  ======================================================================  ========

Ratio metrics are generic: any metric above compared as ``comparison = "ratio"`` gives A / B with a bootstrap
CI (e.g. peak RSS of an optimised arm over its baseline: document 000 claims 5.7 / 8.2 = 0.70), and
``comparison = "improvement"`` gives A - B (``relative = true``: in percent of B).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from suite.errors import UserError
from suite.stats import curves as cm
from suite.stats.references import env_reference
from suite.stats.scores import CONFIDENCE, derive_seed, interval_estimate

Better = Literal["higher", "lower"]

NEVER = 1e18
"""Stand-in for "never" (inf) inside the bootstrap, mapped back to inf afterwards (percentiles of inf are NaN)."""


@dataclass(frozen=True)
class RunData:
    """One trial as a metric sees it."""

    trial: Mapping[str, Any]
    """Its row of :meth:`ResultsStore.trials` (``final_eval_mean``, ``steps_per_second``, ``metrics``, ...)."""
    eval_steps: np.ndarray
    """Evaluation steps, ``(num_evals,)``, increasing."""
    eval_means: np.ndarray
    """Mean evaluation return at each, ``(num_evals,)``."""
    curve_steps: np.ndarray
    """Env step at which each training episode ended, ``(num_episodes,)``."""
    curve_returns: np.ndarray
    """Raw return of each training episode, ``(num_episodes,)``."""
    update_steps: np.ndarray
    """Env step of each update, ``(num_updates,)``."""


@dataclass(frozen=True)
class Metric:
    """A named metric: how one run is scored, and which way is better."""

    name: str
    """Name in claim sets."""
    description: str
    """One line for tables."""
    better: Better
    """Direction."""
    params: frozenset[str]
    """Parameters it reads."""
    per_run: Callable[[RunData, Mapping[str, Any]], float]
    """One run's value (NaN: not measurable for this run; inf: never reached)."""
    training_curve: bool = False
    """Computed from training episodes (so a capped-episode curve must be labelled)."""


def _env_max(run: RunData) -> float:
    """The env's maximum return where it has one (TextMatch: ``len(target)``; CartPole-v1: 500)."""
    trial = run.trial
    kwargs = trial.get("env_kwargs") or {}
    ref = env_reference(str(trial["env_id"]), kwargs if isinstance(kwargs, Mapping) else {})
    return float(ref.reference_score)


def _final_return(run: RunData, params: Mapping[str, Any]) -> float:
    value = run.trial.get("final_eval_mean")
    return float("nan") if value is None or pd.isna(value) else float(value)


def _final_train_return(run: RunData, params: Mapping[str, Any]) -> float:
    n = int(params.get("last_episodes", 100))
    tail = run.curve_returns[-n:]
    return float(tail.mean()) if tail.size else float("nan")


def _steps_to_threshold(run: RunData, params: Mapping[str, Any]) -> float:
    if "threshold" in params:
        threshold = float(params["threshold"])
    else:
        kwargs = run.trial.get("env_kwargs") or {}
        threshold = env_reference(str(run.trial["env_id"]), kwargs).threshold
    step = cm.eval_steps_to_threshold(run.eval_steps, run.eval_means, threshold)
    return math.inf if math.isnan(step) else step


def _first_update_at_max(run: RunData, params: Mapping[str, Any]) -> float:
    target = float(params["target"]) if "target" in params else _env_max(run)
    hits = np.flatnonzero(run.curve_returns >= target - 1e-9)
    if not hits.size:
        return math.inf
    step = run.curve_steps[hits[0]]
    # The episode ended at env step `step`; it was trained on by the first update at or after that step.
    return float(np.searchsorted(run.update_steps, step, side="left") + 1)


def _stability(run: RunData, params: Mapping[str, Any]) -> float:
    # Long-term risk rather than dispersion across time: a run that converges early has a flat curve for most of
    # training, so the median windowed IQR is 0 for every algorithm (measured on TextMatch-v0 at 30k steps), while
    # the worst drawdowns still tell a stable learner from an unstable one. Episodes are taken in the order they
    # ended (a vector env ends several at one step).
    if run.curve_returns.size == 0:
        return float("nan")
    return cm.long_term_risk(run.curve_returns, float(params.get("alpha", 0.05)))


def _column(name: str) -> Callable[[RunData, Mapping[str, Any]], float]:
    def value(run: RunData, params: Mapping[str, Any]) -> float:
        v = run.trial.get(name)
        return float("nan") if v is None or pd.isna(v) else float(v)

    return value


def _record_metric(name: str) -> Callable[[RunData, Mapping[str, Any]], float]:
    def value(run: RunData, params: Mapping[str, Any]) -> float:
        metrics = run.trial.get("metrics")
        v = metrics.get(name) if isinstance(metrics, Mapping) else None
        return float("nan") if v is None else float(v)

    return value


def _phase_field(phase: str, name: str) -> Callable[[RunData, Mapping[str, Any]], float]:
    def value(run: RunData, params: Mapping[str, Any]) -> float:
        phases = run.trial.get("phases")
        entry = phases.get(phase) if isinstance(phases, Mapping) else None
        v = entry.get(name) if isinstance(entry, Mapping) else None
        return float("nan") if v is None else float(v)

    return value


METRICS: Mapping[str, Metric] = {
    m.name: m
    for m in (
        Metric("final_return", "final evaluation return", "higher", frozenset(), _final_return),
        Metric("final_train_return", "mean return of the last training episodes", "higher",
               frozenset({"last_episodes"}), _final_train_return, training_curve=True),
        Metric("steps_to_threshold", "env steps until the evaluation return reached the threshold", "lower",
               frozenset({"threshold"}), _steps_to_threshold),
        Metric("first_update_at_max", "update of the first training episode at the maximum return", "lower",
               frozenset({"target"}), _first_update_at_max, training_curve=True),
        Metric("stability", "long-term risk of the training curve: CVaR of its drawdowns (Chan et al. 2020)",
               "lower", frozenset({"alpha"}), _stability, training_curve=True),
        Metric("sample_diversity", "fraction of distinct strings among sampled generations", "higher", frozenset(),
               _record_metric("sample_diversity")),
        Metric("peak_rss_mb", "peak resident memory of the trial process (MB)", "lower", frozenset(),
               _column("peak_rss_mb")),
        Metric("steps_per_second", "training env steps per second", "higher", frozenset(), _column("steps_per_second")),
        Metric("wall_time_s", "wall time of the trial (s)", "lower", frozenset(), _column("wall_time_s")),
    )
}  # fmt: skip
"""The named metrics (see the module docstring); ``metrics.<name>`` and ``phases.<phase>.<field>`` are generic."""


def get_metric(name: str) -> Metric:
    """The metric called ``name`` (named, ``metrics.<name>`` or ``phases.<phase>.<field>``).

    Raises:
        UserError: unknown name (the allowed ones are listed).
    """
    if name in METRICS:
        return METRICS[name]
    head, _, rest = name.partition(".")
    if head == "metrics" and rest:
        return Metric(name, f"trial metric {rest}", "higher", frozenset(), _record_metric(rest))
    if head == "phases" and rest.count(".") == 1 and all(rest.split(".")):
        phase, fld = rest.split(".")
        return Metric(name, f"{fld} of phase {phase}", "lower", frozenset(), _phase_field(phase, fld))
    raise UserError(f"unknown metric {name!r}; allowed: {', '.join(METRICS)}, metrics.<name>, phases.<phase>.<field>")


def check_metric(name: str, params: Mapping[str, Any]) -> None:
    """Raise UserError for an unknown metric or a parameter it does not read."""
    metric = get_metric(name)
    extra = sorted(set(params) - metric.params)
    if extra:
        allowed = ", ".join(sorted(metric.params)) or "none"
        raise UserError(f"metric {name!r} takes no parameter {extra}; its parameters: {allowed}")
    for key, value in params.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UserError(f"metric parameter {key} must be a number, got {value!r}")


def run_values(metric: Metric, runs: list[RunData], params: Mapping[str, Any]) -> np.ndarray:
    """The metric of every run, ``(num_runs,)``."""
    return np.array([metric.per_run(r, params) for r in runs], dtype=float)


def _statistic(values: np.ndarray, statistic: str) -> float:
    if values.size == 0:
        return float("nan")
    if statistic == "mean":
        return float(values.mean())
    if statistic == "median":
        return float(np.median(values))
    ordered = np.sort(values)
    cut = int(0.25 * ordered.size)
    return float(ordered[cut : ordered.size - cut].mean())


def statistic_of(values: np.ndarray, statistic: str) -> float:
    """``mean``, ``median`` or ``iqm`` (rliable's 25% trimmed mean) of run values; inf kept as "never"."""
    finite = np.where(np.isinf(values), NEVER, values)
    return _unnever(_statistic(finite, statistic))


def _unnever(x: float) -> float:
    """Map the bootstrap's stand-in for "never" (and anything computed from it) back to +-inf."""
    if x >= NEVER / 10:
        return math.inf
    return -math.inf if x <= -NEVER / 10 else x


Interval = tuple[float, float, float]


def _combine(sa: float, sb: float, comparison: str, relative: bool) -> float:
    """A - B, 100 (A - B) / |B| or A / B of two statistics, where "never" (>= NEVER / 10) is infinitely large: never
    against never is undefined (NaN); otherwise the limit, written as +-NEVER so bootstrap percentiles stay finite
    (e.g. B never converged and A did: a relative change of -100%)."""
    a_never, b_never = sa >= NEVER / 10, sb >= NEVER / 10
    if a_never and b_never:
        return float("nan")
    if comparison == "ratio":
        if a_never:
            return NEVER
        return 0.0 if b_never else (sa / sb if sb != 0 else float("nan"))
    if a_never:
        return NEVER
    if b_never:
        return -100.0 if relative else -NEVER
    if relative:
        return 100.0 * (sa - sb) / abs(sb) if sb != 0 else float("nan")
    return sa - sb


def compare(
    a: np.ndarray,
    b: np.ndarray | None,
    *,
    comparison: str,
    statistic: str,
    relative: bool = False,
    reps: int = 2_000,
    seed: int = 0,
    identity: str = "",
    confidence: float = CONFIDENCE,
) -> Interval:
    """Point estimate and percentile bootstrap CI of a cell's measured quantity.

    Args:
        a: Run values of arm A, ``(n_a,)`` (NaN runs dropped by the caller).
        b: Run values of arm B, ``(n_b,)``, for ``improvement`` / ``ratio``; None for ``value``.
        comparison: ``value`` (statistic of A), ``improvement`` (stat(A) - stat(B); percent of |stat(B)| with
            ``relative``) or ``ratio`` (stat(A) / stat(B)).
        statistic: ``mean``, ``median`` or ``iqm``.
        relative: See ``comparison``.
        reps: Bootstrap replications (each arm's runs resampled independently: rliable's stratified bootstrap
            with the arms as strata).
        seed: Base seed; with ``identity`` it seeds numpy's global RNG (rliable draws from it).
        identity: Distinguishes cells so one cell's interval does not depend on the others.
        confidence: CI coverage.

    Returns:
        ``(point, lo, hi)``; NaN when an arm has no run; with one run per arm the interval is the point.
    """
    arrays = [np.where(np.isinf(a), NEVER, a)] + ([] if b is None else [np.where(np.isinf(b), NEVER, b)])
    if any(x.size == 0 for x in arrays):
        return (float("nan"),) * 3  # type: ignore[return-value]

    def func(*xs: np.ndarray) -> np.ndarray:
        sa = _statistic(xs[0], statistic)
        if comparison == "value":
            return np.array([sa])
        return np.array([_combine(sa, _statistic(xs[1], statistic), comparison, relative)])

    points, lows, highs = interval_estimate(arrays, func, reps=reps, seed=derive_seed(seed, identity), confidence=confidence)
    point, lo, hi = float(points[0]), float(lows[0]), float(highs[0])
    return _unnever(point), _unnever(lo), _unnever(hi)
