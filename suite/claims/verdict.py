"""Verdict rules: one of ``reproduced``, ``not reproduced``, ``inconclusive``, ``impossible`` per cell.

The rule (:data:`RULE`, printed with every table) is applied in order:

1. ``impossible``: a claimed return outside the env's attainable range (``suite/claims/ranges.toml``: Pong
   -21..21, CartPole-v1 0..500, TextMatch-v0 -0.1 L..L), whatever is measured.
2. ``inconclusive``: a trial of the cell was not run, or none of an arm's trials finished ok; a run budget below
   the claim's (the table says which tier settles it and the core-hours it takes, from the recorded speeds);
   fewer ok seeds than the claim asks for, or fewer than :data:`MIN_SEEDS`.
3. A value or ratio: ``reproduced`` when the claimed value lies inside the measured 95% CI, else
   ``not reproduced``.
4. An improvement of A over B: ``reproduced`` when the improvement's CI excludes zero in the claimed direction;
   ``not reproduced`` when it excludes zero in the other direction, or contains zero but excludes the claimed
   improvement; otherwise ``inconclusive``, with the seeds per arm that Welch's t-test needs to detect the
   claimed improvement with power 0.8 at alpha 0.05 (Colas et al. 2018), taking the measured standard
   deviations as the true ones (:func:`suite.stats.seeds_needed`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from suite.config import load_toml
from suite.envs import resolve_env_kwargs
from suite.stats.significance import seeds_needed

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
IMPOSSIBLE = "impossible"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, IMPOSSIBLE)

MIN_SEEDS = 3
"""Fewest ok seeds per arm for a verdict other than inconclusive (a bootstrap CI over two runs means little)."""

POWER = 0.8
"""Target power of the seeds-needed estimate."""

ALPHA = 0.05
"""Significance level of the seeds-needed estimate."""

RETURN_METRICS = frozenset({"final_return", "final_train_return"})
"""Metrics measured in episode return, to which the attainable range applies."""

RULE = (
    "Verdict rule: impossible = the claimed return lies outside the env's attainable range (checked first, whatever "
    "is measured); inconclusive = a trial not run or none ok, a run budget below the claim's (the tier that "
    "settles it and its core-hours are given), fewer ok seeds than the claim asks for or fewer than "
    f"{MIN_SEEDS}, or an improvement whose 95% CI contains both zero and the claimed improvement (seeds per arm "
    f"for power {POWER} with Welch's t-test at alpha {ALPHA}, Colas et al. 2018, from the measured standard "
    "deviations); reproduced = the claimed value lies inside the measured 95% CI, or for an improvement the CI "
    "excludes zero in the claimed direction; not reproduced = the CI excludes the claimed value, or the "
    "improvement's CI excludes zero in the other direction or excludes the claimed improvement."
)
"""The rule, in one paragraph, as every table prints it."""


@dataclass(frozen=True)
class Judgement:
    """A verdict and why."""

    verdict: str
    """One of :data:`VERDICTS`."""
    reason: str
    """One sentence."""
    seeds_needed: int | None = None
    """Seeds per arm for power 0.8 (improvements left inconclusive by their CI; value cells with too few seeds)."""


@cache
def _ranges() -> dict[str, Any]:
    return load_toml(resources.files("suite.claims") / "ranges.toml")  # type: ignore[arg-type]


def attainable_range(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> tuple[float, float] | None:
    """``(min, max)`` episode return of the env, or None when it is unbounded (``ranges.toml``)."""
    entry = _ranges().get(env_id)
    if entry is None:
        return None
    if "per_character" in entry:
        from suite.textmatch import MATCH_REWARD, MISMATCH_REWARD

        length = len(resolve_env_kwargs(env_id, dict(env_kwargs or {}))["target"])
        return length * MISMATCH_REWARD, length * MATCH_REWARD
    return float(entry["min"]), float(entry["max"])


def std(values: np.ndarray) -> float:
    """Sample standard deviation (ddof 1); NaN below two values or with a "never" (inf) value."""
    values = np.asarray(values, dtype=float)
    if values.size < 2 or not np.isfinite(values).all():
        return float("nan")
    return float(values.std(ddof=1))


def _seeds_for(effect: float, std_a: float, std_b: float) -> int | None:
    if not all(math.isfinite(x) for x in (effect, std_a, std_b)):
        return None
    need = seeds_needed(effect, std_a, std_b, alpha=ALPHA, power=POWER)
    return None if need == "undefined" else need  # no spread: no seed count can be estimated (the verdict says so)


def judge(
    *,
    comparison: str,
    claimed: float,
    interval: tuple[float, float, float],
    a: np.ndarray,
    b: np.ndarray | None,
    b_point: float | None = None,
    relative: bool = False,
    metric: str,
    env_id: str,
    env_kwargs: Mapping[str, Any] | None = None,
    seeds_required: int,
    missing: int = 0,
    failed: int = 0,
    budget_short: str | None = None,
) -> Judgement:
    """The verdict of one cell (see the module docstring for the order of the rules).

    Args:
        comparison: ``value``, ``improvement`` or ``ratio``.
        claimed: The claimed number in the comparison's units (percent for a relative improvement).
        interval: ``(point, lo, hi)`` measured.
        a: Run values of arm A (ok runs, NaN dropped), ``(n_a,)``.
        b: Run values of arm B, ``(n_b,)``, or None.
        b_point: B's statistic (turns a relative improvement into score units for the power estimate).
        relative: The improvement is in percent of B.
        metric: Metric name (for the attainable range).
        env_id: Env id.
        env_kwargs: Env options.
        seeds_required: Seeds the claim asks for.
        missing: Trials of the cell not in the database.
        failed: Trials of the cell that finished failed or diverged.
        budget_short: When the run budget is below the claim's: the sentence saying so (which tier settles it).

    Returns:
        The :class:`Judgement`.
    """
    if comparison == "value" and metric in RETURN_METRICS:
        bounds = attainable_range(env_id, env_kwargs)
        if bounds is not None and not bounds[0] <= claimed <= bounds[1]:
            return Judgement(IMPOSSIBLE, f"{claimed:g} is outside the attainable return range [{bounds[0]:g}, {bounds[1]:g}]")
    if missing:
        return Judgement(INCONCLUSIVE, f"{missing} trial(s) not run yet")
    if budget_short:
        return Judgement(INCONCLUSIVE, budget_short)
    arms = [a] if b is None else [a, b]
    if any(x.size == 0 for x in arms):
        if failed:
            return Judgement(INCONCLUSIVE, f"no ok trial with a value to measure ({failed} failed or diverged)")
        return Judgement(INCONCLUSIVE, f"no trial has a value for {metric} (e.g. no finished training episode)")
    n_min = min(x.size for x in arms)
    point, lo, hi = interval
    if n_min < max(seeds_required, MIN_SEEDS):
        need: int | None
        if b is None:
            need = _seeds_for(point - claimed, std(a), 0.0)
        else:
            need = _seeds_for(_effect(claimed, relative, b_point), std(a), std(b))
        asked = max(seeds_required, MIN_SEEDS)
        extra = f"; {need} seeds for power {POWER}" if need else ""
        return Judgement(INCONCLUSIVE, f"{n_min} ok seed(s), the claim asks for {asked}{extra}", need)
    if any(math.isnan(x) for x in interval):
        return Judgement(INCONCLUSIVE, "the measured quantity is undefined (e.g. a ratio over zero)")
    if comparison in ("value", "ratio"):
        if lo <= claimed <= hi:
            return Judgement(REPRODUCED, f"{claimed:g} lies inside the 95% CI")
        side = "above" if claimed > hi else "below"
        return Judgement(NOT_REPRODUCED, f"{claimed:g} lies {side} the 95% CI")
    direction = 1.0 if claimed > 0 else -1.0
    if (lo > 0 and direction > 0) or (hi < 0 and direction < 0):
        return Judgement(REPRODUCED, "the improvement's 95% CI excludes zero in the claimed direction")
    if (lo > 0 and direction < 0) or (hi < 0 and direction > 0):
        return Judgement(NOT_REPRODUCED, "the improvement's 95% CI excludes zero in the opposite direction")
    if not lo <= claimed <= hi:
        return Judgement(NOT_REPRODUCED, f"the 95% CI contains zero and excludes the claimed {claimed:+g}")
    assert b is not None
    need = _seeds_for(_effect(claimed, relative, b_point), std(a), std(b))
    more = (
        f"{need} seeds per arm for power {POWER}"
        if need
        else f"no seed count for power {POWER} can be estimated (a run that never got there, or runs without spread)"
    )
    return Judgement(INCONCLUSIVE, f"the 95% CI contains zero and the claimed {claimed:+g}: {more}", need)


def _effect(claimed: float, relative: bool, b_point: float | None) -> float:
    """The claimed improvement in score units."""
    if not relative:
        return claimed
    if b_point is None or not math.isfinite(b_point):
        return float("nan")
    return claimed / 100.0 * abs(b_point)
