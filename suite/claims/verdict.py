"""The verdict rule: one standard for every cell, the difference between measurement and claim judged against a
tolerance (equivalence, TOST).

Every cell's claim becomes a region of its measured quantity (a point, a range, or one side of zero for a claimed
direction), widened by the cell's tolerance into a *band*. The measured quantity gets a t-based sampling distribution
that carries the claim's own noise as well as the measurement's (by claim kind, :func:`estimate`):

* ``mean_over_seeds`` (a mean +- std over n seeds): Welch's two-sample difference, Satterthwaite's degrees of freedom;
* ``single_run`` (one run, no spread): the claim is one draw, so the variance of one run is added (the prediction
  interval of Patil, Peng & Leek 2016), from the suite's between-seed spread;
* ``single_agent`` (one trained agent +- std over its evaluation episodes): one run plus that agent's episode noise;
* ``improvement`` (A - B in score units, shown also on the env's normalised scale; each claimed endpoint one run
  unless ``claim_noise = "none"``) and ``ratio`` (A / B, on the log scale, delta method).

Rules, in order (:func:`judge`):

1. ``reference`` columns are shown, never judged or counted.
2. ``impossible``: a claimed value, range or implied endpoint outside what the env (``suite/data/envs.toml``) or the
   measured procedure (the cell's ``attainable``) can produce, or off the env's reward lattice for a claimed mean of
   a known number of episodes; whatever is measured.
3. ``inconclusive``: trials missing or none ok; a run budget below the claim's; fewer ok seeds than asked (or 3).
4. ``inconclusive`` (saturated): the claim and the measurement both lie within the tolerance of the env's cap (or
   floor), the claim not at the cap itself: the cap leaves the measurement no room to tell them apart. It depends on
   the measured statistic only through which side of the band it is on, so one seed does not flip it.
5. ``reproduced``: the 90% interval lies inside the band (TOST at alpha 0.05). ``not reproduced``: the 95% interval
   lies entirely outside it. Otherwise ``inconclusive``, with the seeds that would settle it (power 0.8).
6. Multiplicity: the set's decided cells' p-values are adjusted together (Holm by default, statsmodels
   ``multipletests``); a decision whose adjusted p-value exceeds 0.05 falls back to ``inconclusive``.

A time to an event with runs that never got there is censored: the median is Kaplan-Meier's (statsmodels), a single
run is compared with a distribution-free prediction interval (order statistics), comparisons use restricted means,
and a bound ("not reached") is only ever used in the direction it is a bound in: it never lets a claim in.

Stand-in sets (a runnable substitute for another task) get words of their own (``consistent``, ``inconsistent``,
``inconclusive``, each ``(stand-in)``), counted apart from the source's claims.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from suite.claims.claimset import Cell, ClaimSet, tolerance_of
from suite.claims.metrics import RETURN_METRICS, get_metric, statistic_of
from suite.stats.equivalence import (
    ALPHA,
    MAX_SEEDS,
    POWER,
    Censored,
    Component,
    Difference,
    equivalence_p,
    order_statistic_interval,
    outside_p,
    runs_for_order_statistic_interval,
    seeds_to_settle,
    welch_components,
)
from suite.stats.references import env_reference

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
IMPOSSIBLE = "impossible"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, IMPOSSIBLE)
"""The verdicts of a source's claims."""

CONSISTENT = "consistent (stand-in)"
INCONSISTENT = "inconsistent (stand-in)"
STAND_IN_INCONCLUSIVE = "inconclusive (stand-in)"
STAND_IN_VERDICTS = (CONSISTENT, INCONSISTENT, STAND_IN_INCONCLUSIVE, IMPOSSIBLE)
"""The verdicts of a stand-in's cells: what a substitute task can say about the source's claim."""

REFERENCE = "reference (not judged)"
"""The word of a reference column."""

STAND_IN_WORD = {REPRODUCED: CONSISTENT, NOT_REPRODUCED: INCONSISTENT, INCONCLUSIVE: STAND_IN_INCONCLUSIVE,
                 IMPOSSIBLE: IMPOSSIBLE}  # fmt: skip

MIN_SEEDS = 3
"""Fewest ok seeds per arm for a verdict other than inconclusive (a standard deviation from two runs means little)."""

RULE = (
    "One rule for every cell: the claim, widened by its tolerance, is a band; reproduced when the 90% interval of the "
    "measurement lies inside it (TOST, alpha 0.05), not reproduced when the 95% interval lies outside it, else "
    "inconclusive with the seeds that settle it. Intervals carry the claim's own noise (a single run, one agent's "
    "episodes, a mean over seeds). Impossible: a claim the env cannot produce. Saturated: claim and measurement both "
    "within the tolerance of the env's cap. Decisions are Holm-adjusted per set. Full rule: docs/claims.md."
)
"""The rule in a paragraph, as ``verdicts.json`` and the terminal print it (the whole of it: ``docs/claims.md``)."""

RULE_SHORT = (
    "Rule: reproduced when the 90% interval lies within the claim's tolerance, not reproduced when the 95% interval "
    "lies outside it, else inconclusive; docs/claims.md has the rest."
)
"""The rule in one line, as each page's headline shows it."""


@dataclass(frozen=True)
class ArmValues:
    """What one arm of a cell measured: the metric of each ok run."""

    values: np.ndarray
    """Metric value of each ok run with a defined value (``inf``: never got there), ``(n,)``."""
    observed: np.ndarray
    """For a time to an event: how far each of those runs was watched, ``(n,)`` (NaN otherwise)."""

    @property
    def n(self) -> int:
        """Runs with a value."""
        return int(self.values.size)

    @property
    def censored(self) -> Censored | None:
        """The runs as censored times (None for a metric that is not a time to an event)."""
        if not np.isfinite(self.observed).all() or self.observed.size == 0:
            return None
        hit = np.isfinite(self.values)
        return Censored(np.where(hit, self.values, self.observed), hit)


@dataclass(frozen=True)
class Judgement:
    """A cell's verdict, why, and the numbers behind it."""

    verdict: str
    """One of :data:`VERDICTS`, :data:`STAND_IN_VERDICTS` or :data:`REFERENCE`."""
    reason: str
    """One sentence."""
    code: str = ""
    """Why, as a key: ``equivalent``, ``outside``, ``wide``, ``saturated``, ``budget``, ``not_run``, ``seeds``,
    ``censored``, ``impossible``, ``multiplicity``, ``reference``, ``no_value``."""
    family: str = "claim"
    """``claim`` (a source's claim), ``stand-in`` or ``reference``: what the headline counts it with."""
    measured: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    """The measured quantity and its 95% interval (the measurement alone), in the cell's display units."""
    a_point: float = math.nan
    """A's statistic."""
    b_point: float = math.nan
    """B's statistic (comparisons)."""
    interval90: tuple[float, float] | None = None
    """The judged quantity's 90% interval, the claim's noise included (what the band is checked against)."""
    interval95: tuple[float, float] | None = None
    """The same at 95%."""
    band: tuple[float, float] | None = None
    """The claim widened by its tolerance, in the judged units."""
    scale: str = "raw"
    """``raw``, or ``log`` for a ratio (intervals and band are logs of ratios)."""
    tolerance: float = math.nan
    """The tolerance, in the cell's measured units."""
    tolerance_source: str = ""
    """Where it comes from."""
    p: float | None = None
    """p-value of the decision's test (equivalence or difference) before the multiplicity adjustment."""
    p_adjusted: float | None = None
    """After it."""
    seeds_needed: int | None = None
    """Seeds per arm at which the test the data point to reaches power 0.8 (inconclusive cells)."""
    method: str = ""
    """How the interval was made (t, Welch, Kaplan-Meier, order statistics, delta method)."""
    reached: str = ""
    """For a time to an event: ``k of n`` runs that got there."""
    normalised: tuple[float, float, float] | None = None
    """An improvement on the env's normalised scale (points of its random-to-reference range), with its 95% interval."""
    extra: dict[str, str] = field(default_factory=dict)
    """Further facts worth printing (e.g. the attainable means next to a claimed one)."""


def _word(claims: ClaimSet, verdict: str) -> str:
    return STAND_IN_WORD[verdict] if claims.stand_in else verdict


def _family(claims: ClaimSet, cell: Cell) -> str:
    if cell.role == "reference":
        return "reference"
    return "stand-in" if claims.stand_in else "claim"


def _impossible(claims: ClaimSet, cell: Cell) -> tuple[str, dict[str, str]] | None:
    """Why the claim cannot be produced at all (None when it can)."""
    interval = cell.claim_interval
    if cell.attainable is not None and interval is not None:
        lo, hi = cell.attainable
        if interval[0] < lo - 1e-12 or interval[1] > hi + 1e-12:
            return (f"{_claim_text(cell)} is outside what the measured procedure can produce, [{lo:g}, {hi:g}] "
                    f"({cell.attainable_source})"), {}  # fmt: skip
    if cell.metric not in RETURN_METRICS or (claims.stand_in and cell.comparison != "value") or cell.arm.sweep_key:
        return None  # a stand-in's comparisons are of another task's numbers
    ref = env_reference(cell.env_id, cell.arm_env_kwargs(cell.arm))
    if not ref.bounded:
        return None
    lo, hi = ref.min_return, ref.max_return
    span = f"[{lo:g}, {hi:g}] ({ref.range_source.split(';')[0]})"
    if cell.comparison == "value" and interval is not None:
        if interval[0] < lo - 1e-12 or interval[1] > hi + 1e-12:
            return f"{_claim_text(cell)} is outside the returns {cell.env_id} can produce, {span}", {}
    if cell.comparison == "improvement":
        for name, value in (("A", cell.claimed_a), ("B", cell.claimed_b)):
            if value is not None and not lo - 1e-12 <= value <= hi + 1e-12:
                return (f"the claimed gain implies {name} = {value:g}, outside the returns {cell.env_id} can produce, "
                        f"{span}"), {}  # fmt: skip
    lattice, episodes = ref.lattice, cell.claim_episodes
    if cell.comparison == "value" and lattice is not None and episodes and cell.claimed is not None:
        decimals = cell.decimals if cell.decimals is not None else _decimals(cell.claimed)
        if not lattice.attainable(cell.claimed, episodes, decimals):
            below, above = lattice.nearest_means(cell.claimed, episodes)
            near = f"the nearest are {below:.{decimals + 2}g} and {above:.{decimals + 2}g}"
            return (
                f"no mean of {episodes} {cell.env_label} returns prints as {cell.claimed:.{decimals}f} ({near}; "
                f"{ref.range_source.split(';')[-1].strip()})",
                {"attainable_means": f"{below:.6g}, {above:.6g}"},
            )
    return None


def _decimals(value: float) -> int:
    frac = repr(float(value)).partition(".")[2].rstrip("0")
    return len(frac)


def _claim_text(cell: Cell) -> str:
    if cell.claimed_range is not None:
        return f"the claimed range [{cell.claimed_range[0]:g}, {cell.claimed_range[1]:g}]"
    return f"the claimed {cell.claimed:g}" if cell.claimed is not None else "the claim"


def _t_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    diff = Difference(float(values.mean()), (welch_components(values),))
    lo, hi = diff.interval(level) if values.size > 1 else (math.nan, math.nan)
    return float(values.mean()), lo, hi


@dataclass(frozen=True)
class _Plan:
    """How a cell's judged quantity is estimated: its estimate as a function of the seeds per arm."""

    at: Callable[[int], Difference]
    """The estimate (point and variance components) with n seeds per arm, the claim's noise included."""
    n: int
    """Seeds per arm now."""
    measured: tuple[float, float, float]
    """The measurement alone, 95% (display units)."""
    scale: str
    method: str


def _plan(cell: Cell, a: np.ndarray, b: np.ndarray | None, pm: float | None) -> _Plan:
    """The estimate of the judged quantity for a mean-based cell (values already restricted where censored)."""
    kind = cell.kind
    if cell.comparison == "value":
        s2 = float(a.var(ddof=1)) if a.size > 1 else math.nan
        point = float(a.mean())

        def at(n: int) -> Difference:
            # One estimate of the spread serves the mean's variance and the claim's single draw: one component.
            draw = 1.0 if kind in ("single_run", "single_agent") else 0.0
            parts = [Component(s2 * (1.0 / n + draw), n - 1.0)]
            if kind == "single_agent" and pm is not None and cell.claim_episodes:
                parts.append(Component(pm**2 / cell.claim_episodes, cell.claim_episodes - 1.0))
            if kind == "mean_over_seeds" and pm is not None and cell.claim_n:
                parts.append(Component(pm**2 / cell.claim_n, cell.claim_n - 1.0))
            return Difference(point, tuple(parts))

        method = {"mean_over_seeds": "Welch: the suite's mean against the claimed mean +- std over its seeds",
                  "single_run": "prediction interval of one run (Patil et al. 2016)",
                  "single_agent": "prediction interval of one agent plus its episodes' noise"}[kind]  # fmt: skip
        return _Plan(at, a.size, _t_interval(a), "raw", method)
    assert b is not None
    if cell.comparison == "improvement":
        sa2, sb2 = float(a.var(ddof=1)), float(b.var(ddof=1))
        point = float(a.mean() - b.mean())
        noisy = cell.claim_noise == "single_run" and cell.direction is None

        def at(n: int) -> Difference:
            draw = 1.0 if noisy else 0.0
            return Difference(point, (Component(sa2 * (1.0 / n + draw), n - 1.0), Component(sb2 * (1.0 / n + draw), n - 1.0)))

        alone = Difference(point, (welch_components(a), welch_components(b)))
        lo, hi = alone.interval(0.95)
        method = "Welch" + (", each claimed value one run (prediction interval)" if noisy else "")
        return _Plan(at, min(a.size, b.size), (point, lo, hi), "raw", method)
    return _ratio_plan(cell, a, b)


def _ratio_plan(cell: Cell, a: np.ndarray, b: np.ndarray) -> _Plan:
    """log(mean A / mean B) by the delta method."""
    ma, mb = float(a.mean()), float(b.mean())
    ra2, rb2 = float(a.var(ddof=1)) / ma**2, float(b.var(ddof=1)) / mb**2
    point = math.log(ma / mb)
    noisy = cell.claim_noise == "single_run"

    def at(n: int) -> Difference:
        draw = 1.0 if noisy else 0.0
        return Difference(point, (Component(ra2 * (1.0 / n + draw), n - 1.0), Component(rb2 * (1.0 / n + draw), n - 1.0)))

    lo, hi = Difference(point, (Component(ra2 / a.size, a.size - 1.0), Component(rb2 / b.size, b.size - 1.0))).interval(0.95)
    method = "delta method on the log ratio" + (", each claimed value one run" if noisy else "")
    return _Plan(at, min(a.size, b.size), (ma / mb, math.exp(lo), math.exp(hi)), "log", method)


def _band(cell: Cell, tol: float) -> tuple[float, float]:
    """The claim widened by its tolerance, in the judged units (logs for a ratio)."""
    if cell.direction is not None:
        return (tol, math.inf) if cell.direction == "higher" else (-math.inf, -tol)
    interval = cell.claim_interval
    assert interval is not None
    lo, hi = interval[0] - tol, interval[1] + tol
    if cell.kind == "ratio":
        return (math.log(lo) if lo > 0 else -math.inf), math.log(hi)
    return lo, hi


def _saturated(claims: ClaimSet, cell: Cell, tol: float, points: Sequence[float]) -> str | None:
    """Why the env's cap (or floor) makes the claim indistinguishable from the measurement, or None."""
    if claims.stand_in and cell.comparison == "value":
        return None
    if cell.metric not in RETURN_METRICS or cell.kind == "ratio" or cell.arm.sweep_key is not None:
        return None  # a sweep's values are ranges of returns, not returns
    ref = env_reference(cell.env_id, cell.arm_env_kwargs(cell.arm))
    for edge, name in ((ref.max_return, "cap"), (ref.min_return, "floor")):
        if not math.isfinite(edge):
            continue

        def near(x: float | None, edge: float = edge) -> bool:
            return x is not None and math.isfinite(x) and abs(x - edge) <= tol + 1e-9

        if not all(near(p) for p in points):
            continue
        if cell.comparison == "value":
            claimed = cell.claimed
            if claimed is None or not near(claimed) or abs(claimed - edge) < 1e-9:
                continue
            return (f"saturated: the claimed {claimed:g} and the measured {points[0]:.4g} both lie within the tolerance "
                    f"({tol:.3g}) of {cell.env_id}'s {name} {edge:g}, which leaves the measurement no room to tell them "
                    "apart")  # fmt: skip
        ends = [x for x in (cell.claimed_a, cell.claimed_b) if x is not None]
        if ends and not all(near(x) for x in ends):
            continue
        if cell.claimed_gain == 0 and cell.direction is None:
            continue
        return (f"saturated: both arms ({points[0]:.4g} and {points[1]:.4g})"
                + (f" and both claimed values ({', '.join(f'{x:g}' for x in ends)})" if ends else "")
                + f" lie within the tolerance ({tol:.3g}) of {cell.env_id}'s {name} {edge:g}: no room left for the "
                "claimed difference")  # fmt: skip
    return None


def _within_range(cell: Cell, measured: tuple[float, float, float]) -> tuple[float, float, float]:
    """A mean return's interval cut to the returns the env can produce (the mean lies there, so the cut interval
    covers it as often): 499.1 [495.3, 500] rather than [495.3, 502.9] on CartPole."""
    if cell.comparison != "value" or cell.metric not in RETURN_METRICS:
        return measured
    ref = env_reference(cell.env_id, cell.arm_env_kwargs(cell.arm))
    if not ref.bounded:
        return measured
    point, lo, hi = measured
    return point, max(lo, ref.min_return), min(hi, ref.max_return)


def _value_tolerance(claims: ClaimSet, cell: Cell, tol: float) -> float:
    """The tolerance of the arms' values themselves (an improvement's own may be capped by its claimed gain): the
    width of the band below the cap in which the ceiling rule applies."""
    if cell.tolerance is None and cell.comparison == "improvement" and cell.metric in RETURN_METRICS:
        ref = env_reference(cell.env_id, cell.arm_env_kwargs(cell.arm))
        if ref.normalised:
            return claims.tolerance_fraction * (ref.reference_score - ref.random_score)
    return tol


def judge(
    claims: ClaimSet,
    cell: Cell,
    arms: Sequence[ArmValues],
    *,
    missing: int = 0,
    failed: int = 0,
    budget_short: str | None = None,
    seeds_required: int | None = None,
) -> Judgement:
    """The verdict of one cell (see the module docstring for the order of the rules).

    Args:
        claims: The claim set (stand-in or not, tolerance defaults).
        cell: The claim.
        arms: A, then B for a comparison: the metric of each ok run.
        missing: Trials of the cell not in the database.
        failed: Trials of the cell that finished failed or diverged.
        budget_short: When the run budget is below the claim's: the sentence saying so (which tier settles it).
        seeds_required: Seeds the claim asks for (default: the cell's).

    Returns:
        The :class:`Judgement` (before the set's multiplicity control, :func:`control_multiplicity`).
    """
    family = _family(claims, cell)
    tol, tol_source = tolerance_of(claims, cell)
    base: dict[str, Any] = {"family": family, "tolerance": tol, "tolerance_source": tol_source}
    a = arms[0]
    b = arms[1] if len(arms) > 1 else None
    a_point = statistic_of(a.values, "mean" if cell.statistic == "mean" else "median")
    b_point = statistic_of(b.values, "mean" if cell.statistic == "mean" else "median") if b is not None else math.nan
    base |= {"a_point": a_point, "b_point": b_point}
    metric = get_metric(cell.metric)

    word = (lambda v: REFERENCE) if family == "reference" else (lambda v: _word(claims, v))

    def inconclusive(reason: str, code: str, **kw: Any) -> Judgement:
        return Judgement(word(INCONCLUSIVE), reason, code, **(base | kw))

    # censored times: which bounds the restricted values are
    censored = [x.censored for x in arms]
    any_censored = any(c is not None and c.reached < c.times.size for c in censored)
    reached = ""
    if metric.censored and all(c is not None for c in censored):
        parts = [f"{c.reached} of {c.times.size}" for c in censored if c is not None]
        reached = " / ".join(parts) + " reached it"
    base["reached"] = reached
    values = [x.values if c is None else c.restricted() for x, c in zip(arms, censored, strict=True)]
    censored_value = cell.comparison == "value" and metric.censored and (any_censored or cell.statistic == "median")
    plan: _Plan | None = None
    if all(v.size >= 2 for v in values) and not censored_value:
        if cell.kind != "ratio" or all((v > 0).all() for v in values):
            plan = _plan(cell, values[0], values[1] if b is not None else None, cell.claimed_pm)
            base |= {"measured": _within_range(cell, plan.measured), "scale": plan.scale, "method": plan.method}
            if cell.comparison == "improvement" and cell.metric in RETURN_METRICS and cell.arm.sweep_key is None:
                ref = env_reference(cell.env_id, cell.arm_env_kwargs(cell.arm))
                if ref.normalised:
                    span = (ref.reference_score - ref.random_score) / 100.0
                    base["normalised"] = tuple(x / span for x in plan.measured)
    elif censored_value and all(c is not None for c in censored) and a.n:
        assert censored[0] is not None
        base["measured"] = censored[0].km_median(0.95)
    elif a.n:
        base["measured"] = (a_point, math.nan, math.nan)

    if family != "reference":
        impossible = _impossible(claims, cell)
        if impossible is not None:
            return Judgement(IMPOSSIBLE, impossible[0], "impossible", extra=impossible[1], **base)
    if missing:
        return inconclusive(f"{missing} trial(s) not run yet", "not_run")
    if budget_short:
        return inconclusive(budget_short, "budget")
    if any(x.n == 0 for x in arms):
        if failed:
            return inconclusive(f"no ok trial with a value to measure ({failed} failed or diverged)", "no_value")
        return inconclusive(f"no trial has a value for {cell.metric} (e.g. no finished training episode)", "no_value")
    asked = max(seeds_required or len(cell.seeds), MIN_SEEDS)
    n_min = min(x.n for x in arms)
    if n_min < asked:
        return inconclusive(f"{n_min} ok seed(s), the claim asks for {asked}", "seeds")
    if family == "reference":
        return Judgement(REFERENCE, "a reference column: shown beside the claims, not judged", "reference", **base)
    if censored_value:
        return _judge_censored_value(claims, cell, a, tol, base, word)
    if plan is None:
        return inconclusive("a ratio needs positive values; some run measured <= 0", "no_value")

    points = [float(v.mean()) for v in values]
    saturated = _saturated(claims, cell, _value_tolerance(claims, cell, tol), points)
    if saturated:
        return inconclusive(saturated, "saturated")

    band = _band(cell, tol)
    est = plan.at(plan.n)
    if not math.isfinite(est.se):
        return inconclusive("the spread is undefined (fewer than two runs)", "no_value")
    i90, i95 = est.interval(0.90), est.interval(0.95)
    # A restricted mean is a bound: A's censored runs make the difference a lower bound, B's an upper bound.
    a_bound = censored[0] is not None and censored[0].reached < censored[0].times.size
    b_bound = b is not None and censored[1] is not None and censored[1].reached < censored[1].times.size
    base |= {"interval90": i90, "interval95": i95, "band": band}
    p_eq, p_out = equivalence_p(est, *band), outside_p(est, *band)
    if p_eq <= ALPHA and not (a_bound or b_bound):
        return Judgement(
            word(REPRODUCED),
            f"the 90% interval {_fmt_interval(i90, plan.scale)} lies inside the band {_fmt_interval(band, plan.scale)}",
            "equivalent",
            p=p_eq,
            **base,
        )
    above = i95[0] > band[1]
    if p_out <= ALPHA and not ((above and b_bound) or (not above and a_bound)):
        side = "above" if above else "below"
        return Judgement(
            word(NOT_REPRODUCED),
            f"the 95% interval {_fmt_interval(i95, plan.scale)} lies {side} the band {_fmt_interval(band, plan.scale)}",
            "outside",
            p=p_out,
            **base,
        )
    if any_censored:
        return inconclusive(
            f"{reached}: the restricted mean of a run that never got there is a bound, which cannot decide this cell",
            "censored",
            **{k: base[k] for k in ("interval90", "interval95", "band")},
        )
    need = seeds_to_settle(plan.at, *band, start=plan.n + 1)
    wide = (
        f"the 90% interval {_fmt_interval(i90, plan.scale)} is not inside the band {_fmt_interval(band, plan.scale)} "
        f"and the 95% interval {_fmt_interval(i95, plan.scale)} not outside it"
    )
    if need is None:
        own_noise = cell.comparison == "value" or (cell.claim_noise == "single_run" and cell.direction is None)
        floor = (
            "; the claim's own noise (one run, or its stated spread) keeps the interval this wide however many seeds "
            "run: no number of seeds settles it"
            if own_noise
            else ""
        )
        return Judgement(
            word(INCONCLUSIVE), wide + (floor or f"; more than {MAX_SEEDS:,} seeds per arm would be needed"), "wide", **base
        )
    return Judgement(word(INCONCLUSIVE), f"{wide}; {need} seeds per arm for power {POWER}", "wide", seeds_needed=need, **base)


def _judge_censored_value(
    claims: ClaimSet, cell: Cell, a: ArmValues, tol: float, base: dict[str, Any], word: Callable[[str], str]
) -> Judgement:
    """A claimed time to an event against runs some of which never got there."""
    censored = a.censored
    assert censored is not None
    median, lo, hi = censored.km_median(0.95)
    interval = cell.claim_interval
    assert interval is not None
    band = (interval[0] - tol, interval[1] + tol)
    base = base | {"measured": (median, lo, hi), "band": band}
    if cell.kind == "single_run":
        # One draw against the runs' distribution: a distribution-free prediction interval (order statistics).
        values = np.where(censored.observed, censored.times, math.inf)
        p90, p95 = order_statistic_interval(values, 0.90), order_statistic_interval(values, 0.95)
        base |= {"method": "distribution-free prediction interval of one run (order statistics), Kaplan-Meier median shown",
                 "interval90": p90, "interval95": p95}  # fmt: skip
        if p90 is not None and band[0] <= p90[0] and p90[1] <= band[1]:
            return Judgement(
                word(REPRODUCED),
                f"the 90% prediction interval {_fmt_interval(p90)} lies inside the band {_fmt_interval(band)}",
                "equivalent",
                **base,
            )
        if p95 is not None and (p95[0] > band[1] or p95[1] < band[0]):
            return Judgement(
                word(NOT_REPRODUCED),
                f"the 95% prediction interval {_fmt_interval(p95)} lies outside the band {_fmt_interval(band)}",
                "outside",
                **base,
            )
        need = runs_for_order_statistic_interval(0.90 if values.size < 19 else 0.95)
        return Judgement(
            word(INCONCLUSIVE),
            f"{base['reached']}: one run's outcome is not pinned by {values.size} runs (a distribution-free "
            f"90% prediction interval needs 19 runs, 95% needs 39)",
            "censored",
            seeds_needed=need,
            **base,
        )
    # a claimed median (mean over seeds of a time): Kaplan-Meier's median and its interval
    m90 = censored.km_median(0.90)
    base |= {"method": "Kaplan-Meier median (statsmodels SurvfuncRight)", "interval90": (m90[1], m90[2]),
             "interval95": (lo, hi)}  # fmt: skip
    if band[0] <= m90[1] and m90[2] <= band[1]:
        return Judgement(
            word(REPRODUCED),
            f"the median's 90% interval {_fmt_interval((m90[1], m90[2]))} lies inside the band {_fmt_interval(band)}",
            "equivalent",
            **base,
        )
    if lo > band[1] or hi < band[0]:
        return Judgement(
            word(NOT_REPRODUCED),
            f"the median's 95% interval {_fmt_interval((lo, hi))} lies outside the band {_fmt_interval(band)}",
            "outside",
            **base,
        )
    return Judgement(
        word(INCONCLUSIVE),
        f"{base['reached']}: the median's 90% interval {_fmt_interval((m90[1], m90[2]))} "
        f"is not inside the band {_fmt_interval(band)}",
        "censored",
        **base,
    )


def _fmt(x: float) -> str:
    if math.isinf(x):
        return "not reached" if x > 0 else "-inf"
    return f"{x:.4g}"


def _fmt_interval(interval: tuple[float, float], scale: str = "raw") -> str:
    lo, hi = interval
    if scale == "log":
        lo, hi = math.exp(lo), math.exp(hi)
        return f"[{_fmt(lo)}x, {_fmt(hi)}x]"
    return f"[{'-inf' if lo == -math.inf else _fmt(lo)}, {'+inf' if hi == math.inf else _fmt(hi)}]"


def control_multiplicity(judgements: Sequence[Judgement], method: str) -> list[Judgement]:
    """Adjust the decided cells' p-values together, per family (a source's claims, a stand-in's cells) with
    statsmodels ``multipletests`` (``holm``: family-wise error; ``fdr_bh``: false discovery rate); a decision whose
    adjusted p-value exceeds :data:`ALPHA` becomes inconclusive. Cells decided by a distribution-free interval carry
    no p-value and are left as they are."""
    from statsmodels.stats.multitest import multipletests

    out = list(judgements)
    if method == "none":
        return out
    for family in ("claim", "stand-in"):
        idx = [i for i, j in enumerate(out) if j.family == family and j.p is not None]
        if len(idx) < 2:
            for i in idx:
                out[i] = replace(out[i], p_adjusted=out[i].p)
            continue
        _, adjusted, _, _ = multipletests([out[i].p for i in idx], alpha=ALPHA, method=method)
        for i, p_adj in zip(idx, adjusted, strict=True):
            j = replace(out[i], p_adjusted=float(p_adj))
            if p_adj > ALPHA:
                word = STAND_IN_INCONCLUSIVE if family == "stand-in" else INCONCLUSIVE
                j = replace(j, verdict=word, code="multiplicity",
                            reason=f"{j.reason}, but not after {method.replace('_', '-')} over {len(idx)} cells "
                                   f"(adjusted p {p_adj:.3g})")  # fmt: skip
            out[i] = j
    return out
