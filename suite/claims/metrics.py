"""The metrics a claim can name, and the measurement of a cell: a statistic over seeds with a t-based interval.

A metric maps one recorded trial to one number (a run's score on that metric). A time to an event ("steps to the
threshold", "update writing the target") is *censored* when a run never got there: its value is ``inf`` and
:attr:`Metric.observed_until` says how far the run was watched (its steps or updates), which the survival
estimates need (:class:`suite.stats.equivalence.Censored`).

Named metrics (``metric = "<name>"`` in a claim set; parameters in parentheses):

==========================  ======================================================================  ========
name                        one run's value                                                         better
==========================  ======================================================================  ========
``final_return``            mean return of the final evaluation (the cell's evaluation protocol)    higher
``final_train_return``      mean return of the last ``last_episodes`` (100) training episodes        higher
                            (CleanRL's reported number; sampled actions)
``steps_to_threshold``      first evaluation step whose mean return >= ``threshold`` (default: the   lower
                            env's, ``suite/data/envs.toml``); censored at the steps trained
``first_update_at_max``     update that trained on the first training episode whose return reaches  lower
                            ``target`` (default: the env's maximum); censored at the updates done
``first_eval_at_max``       updates done when an evaluation's mean return first reached ``target``  lower
                            (default: the env's maximum); censored at the updates done
``early_stop_update``       updates done when the algorithm's early stop fired (the batch mean       lower
                            reached ``early_stop_fraction`` of the maximum); censored otherwise
``updates.<name>``          a per-update diagnostic at update ``update`` (the last logged row at or   lower
                            before it, so binned rows work too), e.g. ``updates.entropy``
``late_improvement``        final evaluation mean minus the evaluation mean at ``fraction`` (0.5) of  higher
                            the budget: whether training still improves late
``curve_dispersion``        Chan et al. 2020 dispersion across time: median windowed IQR of the      lower
                            detrended evaluation curve (how jagged the curve is)
``stability``               Chan et al. 2020 long-term risk across time: CVaR (worst ``alpha`` =     lower
                            5%) of the drawdown of the training curve from its running maximum
``sample_diversity``        fraction of distinct strings among sampled (not greedy) generations     higher
``peak_rss_mb``             peak resident memory of the trial process (MB)                          lower
``peak_rss_over_baseline_mb``  peak RSS minus the RSS the trial started from (what the trial itself     lower
                            allocated: envs, networks, rollouts, updates; not the interpreter and libraries)
``steps_per_second``        training env steps per second                                           higher
``wall_time_s``             wall time of the trial (s)                                              lower
``metrics.<name>``          any trial-level scalar in ``record["metrics"]``                         higher
``phases.<phase>.<field>``  any per-phase number in ``record["phases"]`` (e.g. a memory probe's)    lower
==========================  ======================================================================  ========
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from suite.errors import UserError
from suite.stats import curves as cm
from suite.stats.references import env_reference

Better = Literal["higher", "lower"]

RETURN_METRICS = frozenset({"final_return", "final_train_return", "updates.return_mean"})
"""Metrics measured in episode return: the env's range, lattice, cap and default tolerance apply to them."""


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
    """Env step of each update (or update bin), ``(num_updates,)``."""
    updates: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Its per-update rows (``update``, ``step`` and one column per diagnostic; binned rows hold a bin's mean)."""

    @property
    def n_updates(self) -> int:
        """Updates done (the last logged update number)."""
        if "update" in self.updates.columns and len(self.updates):
            return int(self.updates["update"].max())
        return int(self.update_steps.size)


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
    """One run's value (NaN: not measurable for this run; inf: never got there)."""
    training_curve: bool = False
    """Computed from training episodes (so a capped-episode curve must be labelled)."""
    observed_until: Callable[[RunData], float] | None = None
    """For a time to an event: how far a run was watched (a run that never got there is censored there)."""
    required: frozenset[str] = frozenset()
    """Parameters it cannot do without."""

    @property
    def censored(self) -> bool:
        """Whether the metric is a time to an event that some runs may never reach."""
        return self.observed_until is not None


def _env_max(run: RunData) -> float:
    """The env's maximum return where it has one (TextMatch: ``len(target)``; CartPole-v1: 500)."""
    trial = run.trial
    kwargs = trial.get("env_kwargs") or {}
    ref = env_reference(str(trial["env_id"]), kwargs if isinstance(kwargs, Mapping) else {})
    return float(ref.max_return) if math.isfinite(ref.max_return) else float(ref.reference_score)


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


def _steps_trained(run: RunData) -> float:
    steps = run.trial.get("steps")
    return float(steps) if steps is not None and not pd.isna(steps) else float(run.trial.get("budget") or math.nan)


def _updates_done(run: RunData) -> float:
    return float(run.n_updates)


def _first_update_at_max(run: RunData, params: Mapping[str, Any]) -> float:
    target = float(params["target"]) if "target" in params else _env_max(run)
    hits = np.flatnonzero(run.curve_returns >= target - 1e-9)
    if not hits.size:
        return math.inf
    step = run.curve_steps[hits[0]]
    # The episode ended at env step `step`; it was trained on by the first update at or after that step.
    return _update_number(run, int(np.searchsorted(run.update_steps, step, side="left")))


def _first_eval_at_max(run: RunData, params: Mapping[str, Any]) -> float:
    target = float(params["target"]) if "target" in params else _env_max(run)
    hits = np.flatnonzero(run.eval_means >= target - 1e-9)
    if not hits.size:
        return math.inf
    # An evaluation at env step s ran after every update at or before s.
    rows_before = int(np.searchsorted(run.update_steps, run.eval_steps[hits[0]], side="right"))
    return _update_number(run, rows_before - 1) if rows_before else 0.0


def _update_number(run: RunData, row: int) -> float:
    """The update number of the run's ``row``-th update row (0-based): ``row + 1`` where every update has its row (updates
    are numbered from 1); for binned rows the bin's last update, so the answer is exact to the bin."""
    numbers = run.updates["update"] if "update" in run.updates.columns else None
    if numbers is None or len(numbers) != run.update_steps.size or row >= len(numbers):
        return float(row + 1)
    return float(numbers.iloc[row])


def _early_stop_update(run: RunData, params: Mapping[str, Any]) -> float:
    config = run.trial.get("config") or {}
    fraction = config.get("early_stop_fraction") if isinstance(config, Mapping) else None
    if fraction is None or "return_mean" not in run.updates.columns or not len(run.updates):
        return float("nan")  # no early stop configured: not measurable
    last = run.updates.iloc[-1]
    return float(last["update"]) if float(last["return_mean"]) >= float(fraction) * _env_max(run) - 1e-9 else math.inf


def _update_metric(name: str) -> Callable[[RunData, Mapping[str, Any]], float]:
    def value(run: RunData, params: Mapping[str, Any]) -> float:
        rows = run.updates
        if name not in rows.columns or not len(rows):
            return float("nan")
        upto = rows[rows["update"] <= int(params["update"])]
        return float(upto[name].iloc[-1]) if len(upto) else float("nan")

    return value


def _late_improvement(run: RunData, params: Mapping[str, Any]) -> float:
    if run.eval_steps.size < 2:
        return float("nan")
    mid = float(params.get("fraction", 0.5)) * float(run.trial.get("budget") or run.eval_steps[-1])
    i = int(np.argmin(np.abs(run.eval_steps - mid)))
    return float(run.eval_means[-1] - run.eval_means[i])


def _curve_dispersion(run: RunData, params: Mapping[str, Any]) -> float:
    if run.eval_means.size < 3:
        return float("nan")
    return cm.dispersion_across_time(run.eval_means, run.eval_steps)


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


def _peak_over_baseline(run: RunData, params: Mapping[str, Any]) -> float:
    peak, base = run.trial.get("peak_rss_mb"), run.trial.get("baseline_rss_mb")
    if peak is None or base is None or pd.isna(peak) or pd.isna(base):
        return float("nan")
    return float(peak) - float(base)


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
               frozenset({"threshold"}), _steps_to_threshold, observed_until=_steps_trained),
        Metric("first_update_at_max", "update that trained on the first training episode at the maximum return",
               "lower", frozenset({"target"}), _first_update_at_max, training_curve=True, observed_until=_updates_done),
        Metric("first_eval_at_max", "updates done when an evaluation first reached the maximum return", "lower",
               frozenset({"target"}), _first_eval_at_max, observed_until=_updates_done),
        Metric("early_stop_update", "updates done when the early stop fired", "lower", frozenset(), _early_stop_update,
               observed_until=_updates_done),
        Metric("late_improvement", "final evaluation return minus the one at a fraction of the budget", "higher",
               frozenset({"fraction"}), _late_improvement),
        Metric("curve_dispersion", "dispersion across time of the evaluation curve (Chan et al. 2020)", "lower",
               frozenset(), _curve_dispersion),
        Metric("stability", "long-term risk of the training curve: CVaR of its drawdowns (Chan et al. 2020)",
               "lower", frozenset({"alpha"}), _stability, training_curve=True),
        Metric("sample_diversity", "fraction of distinct strings among sampled generations", "higher", frozenset(),
               _record_metric("sample_diversity")),
        Metric("peak_rss_mb", "peak resident memory of the trial process (MB)", "lower", frozenset(),
               _column("peak_rss_mb")),
        Metric("peak_rss_over_baseline_mb", "peak RSS above the RSS the trial started from (MB)", "lower", frozenset(),
               _peak_over_baseline),
        Metric("steps_per_second", "training env steps per second", "higher", frozenset(), _column("steps_per_second")),
        Metric("wall_time_s", "wall time of the trial (s)", "lower", frozenset(), _column("wall_time_s")),
    )
}  # fmt: skip
"""The named metrics (see the module docstring); ``metrics.<name>``, ``updates.<name>`` and
``phases.<phase>.<field>`` are generic."""


def get_metric(name: str) -> Metric:
    """The metric called ``name`` (named, ``metrics.<name>``, ``updates.<name>`` or ``phases.<phase>.<field>``).

    Raises:
        UserError: unknown name (the allowed ones are listed).
    """
    if name in METRICS:
        return METRICS[name]
    head, _, rest = name.partition(".")
    if head == "metrics" and rest:
        return Metric(name, f"trial metric {rest}", "higher", frozenset(), _record_metric(rest))
    if head == "updates" and rest and "." not in rest:
        return Metric(name, f"per-update {rest}", "lower", frozenset({"update"}), _update_metric(rest),
                      required=frozenset({"update"}))  # fmt: skip
    if head == "phases" and rest.count(".") == 1 and all(rest.split(".")):
        phase, fld = rest.split(".")
        return Metric(name, f"{fld} of phase {phase}", "lower", frozenset(), _phase_field(phase, fld))
    raise UserError(
        f"unknown metric {name!r}; allowed: {', '.join(METRICS)}, metrics.<name>, updates.<name>, phases.<phase>.<field>"
    )


def check_metric(name: str, params: Mapping[str, Any]) -> None:
    """Raise UserError for an unknown metric, a parameter it does not read or one it needs and lacks."""
    metric = get_metric(name)
    extra = sorted(set(params) - metric.params)
    if extra:
        allowed = ", ".join(sorted(metric.params)) or "none"
        raise UserError(f"metric {name!r} takes no parameter {extra}; its parameters: {allowed}")
    missing = sorted(metric.required - set(params))
    if missing:
        raise UserError(f"metric {name!r} needs {', '.join(f'{m} = <number>' for m in missing)}")
    for key, value in params.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise UserError(f"metric parameter {key} must be a finite number, got {value!r}")


def run_values(metric: Metric, runs: list[RunData], params: Mapping[str, Any]) -> np.ndarray:
    """The metric of every run, ``(num_runs,)``."""
    return np.array([metric.per_run(r, params) for r in runs], dtype=float)


def observed_until(metric: Metric, runs: list[RunData]) -> np.ndarray:
    """How far each run was watched, ``(num_runs,)`` (NaN for a metric that is not a time to an event)."""
    if metric.observed_until is None:
        return np.full(len(runs), np.nan)
    return np.array([metric.observed_until(r) for r in runs], dtype=float)


def statistic_of(values: np.ndarray, statistic: str) -> float:
    """``mean`` or ``median`` of run values; ``inf`` ("never") propagates (a median of mostly-never is never)."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return float("nan")
    if statistic == "median":
        return float(np.median(values))
    return float(values.mean())
