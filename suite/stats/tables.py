"""The pandas layer the reports call: one function per table, over the results store's long-format frames.

Inputs (one row per item; extra columns are ignored):

- ``trials``: one row per trial. ``algo``, ``env_label`` (grouping label, e.g. an env id plus kwargs),
  ``env_id``, ``status`` (``ok`` | ``failed`` | ``diverged``) always; ``key`` (joins the frames below),
  ``seed``, ``final_eval_mean``, optional ``env_kwargs`` (dict or JSON object string; used for TextMatch
  references) and the speed/memory record fields ``wall_time_s``, ``rollout_time_s``, ``update_time_s``,
  ``steps_per_second``, ``peak_rss_mb``.
- ``evals``: ``key``, ``step``, ``final``, ``episode``, ``return``, ``length``; one row per evaluation episode.
  The evaluation curve of a trial is the mean ``return`` per ``step`` (final and periodic evaluations at the
  same step are pooled). An optional ``wall_time_s`` column (seconds since the trial started) is used for
  wall time to threshold.
- ``curves``: ``key``, ``step``, ``return``, ``length``; one row per training episode.
- ``updates``: ``key``, ``update``, ``step`` and any of ``grad_var``, ``approx_kl``, ``entropy``.

Only ``ok`` trials enter a statistic; every table carries ``n_ok``, ``n_failed`` and ``n_diverged`` so the
excluded trials are reported next to it (STYLE.md: a reproducibility suite never hides failures).
Per-(algo, env) tables have one row for every (algo, env_label) present in ``trials``, even with no ok trial.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

import suite.stats.curves as cm
import suite.stats.scores as sm
import suite.stats.significance as sig
from suite.errors import UserError
from suite.stats.references import EnvReference, env_reference

STATUSES = ("ok", "failed", "diverged")
"""Trial statuses, as in the trial record."""

GROUP = ["algo", "env_label"]
"""Row identity of the per-(algorithm, env) tables."""

COUNT_COLUMNS = ["n_total", "n_ok", "n_failed", "n_diverged"]
"""Status counts that every table reports."""

TRACE_METRICS = ("grad_var", "approx_kl", "entropy")
"""Per-update trace columns summarised by :func:`stability_table`."""

DEFAULT_TAUS = np.linspace(0.0, 1.5, 31)
"""Default normalised-score thresholds of :func:`performance_profile`."""


# ---------------------------------------------------------------------------------------------- helpers


def _require(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """Raise UserError naming the missing columns of ``frame``."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise UserError(f"{what} lacks column(s) {', '.join(missing)}; it has: {', '.join(map(str, frame.columns))}")


def _check_trials(trials: pd.DataFrame, extra: Sequence[str] = ()) -> None:
    """Validate the trials frame: required columns and known statuses."""
    _require(trials, ["algo", "env_label", "env_id", "status", *extra], "trials")
    unknown = sorted(set(trials["status"].astype(str)) - set(STATUSES))
    if unknown:
        raise UserError(f"unknown trial status(es) {', '.join(unknown)}; allowed: {', '.join(STATUSES)}")


def _ok(trials: pd.DataFrame) -> pd.DataFrame:
    """The ok trials."""
    return trials[trials["status"] == "ok"]


def _ok_final_scores(trials: pd.DataFrame) -> pd.DataFrame:
    """Ok trials with a finite ``final_eval_mean``; UserError for an ok trial without one."""
    ok = _ok(trials)
    bad = ok[~np.isfinite(ok["final_eval_mean"].astype(float))]
    if len(bad):
        who = bad["key"].tolist() if "key" in bad else bad[GROUP].to_records(index=False).tolist()
        raise UserError(f"ok trial(s) without a finite final_eval_mean: {who}")
    return ok


def _env_kwargs(value: Any) -> dict[str, Any]:
    """``env_kwargs`` cell as a dict (accepts a dict, a JSON object string, None or NaN)."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str) and value.strip():
        parsed = json.loads(value)
        if not isinstance(parsed, dict):
            raise UserError(f"env_kwargs must be a JSON object, got {value!r}")
        return parsed
    return {}


def env_references(trials: pd.DataFrame) -> dict[str, EnvReference]:
    """Reference numbers per ``env_label`` (from ``env_id`` and ``env_kwargs`` of its trials).

    Raises:
        UserError: an env without reference data, or one ``env_label`` used for different envs.
    """
    _check_trials(trials)
    refs: dict[str, EnvReference] = {}
    for label, rows in trials.groupby("env_label", sort=True):
        kwargs_column = rows["env_kwargs"] if "env_kwargs" in rows.columns else [None] * len(rows)
        candidates = {
            json.dumps([env_id, _env_kwargs(kwargs)], sort_keys=True, default=str)
            for env_id, kwargs in zip(rows["env_id"], kwargs_column, strict=True)
        }
        if len(candidates) > 1:
            raise UserError(f"env_label {label!r} is used for different envs/kwargs: {sorted(candidates)}")
        env_id, kwargs = json.loads(candidates.pop())
        refs[str(label)] = env_reference(env_id, kwargs)
    return refs


def count_statuses(trials: pd.DataFrame) -> pd.DataFrame:
    """Number of trials per status for each (algo, env_label).

    Args:
        trials: Needs ``algo``, ``env_label``, ``env_id``, ``status``.

    Returns:
        Columns ``algo, env_label, env_id, n_total, n_ok, n_failed, n_diverged``, sorted by algo, env_label.
    """
    _check_trials(trials)
    counts = pd.crosstab([trials["algo"], trials["env_label"]], trials["status"])
    counts = counts.reindex(columns=list(STATUSES), fill_value=0)
    counts.columns = [f"n_{s}" for s in STATUSES]
    counts.insert(0, "n_total", counts.sum(axis=1))
    env_ids = trials.groupby(GROUP)["env_id"].first()
    out = counts.join(env_ids).reset_index()
    return (
        out[[*GROUP, "env_id", *COUNT_COLUMNS]].sort_values(GROUP, ignore_index=True).astype({c: int for c in COUNT_COLUMNS})
    )


def _algo_counts(counts: pd.DataFrame) -> pd.DataFrame:
    """Status counts summed over envs, per algo."""
    return counts.groupby("algo")[COUNT_COLUMNS].sum()


def _task_scores(trials: pd.DataFrame, refs: Mapping[str, EnvReference]) -> dict[str, dict[str, np.ndarray]]:
    """``{algo: {env_label: normalised final scores of ok trials, shape (n_ok,)}}`` for non-empty groups of envs that
    are normalised (an env without random/reference scores is left out of every across-env aggregate).

    Raises:
        UserError: no env of the trials is normalised.
    """
    ok = _ok_final_scores(trials)
    if refs and not any(ref.normalised for ref in refs.values()):
        raise UserError(f"not normalised: no env of these runs ({', '.join(refs)}) has random and reference scores")
    out: dict[str, dict[str, np.ndarray]] = {}
    for (algo, label), rows in ok.groupby(GROUP, sort=True):
        if not refs[str(label)].normalised:
            continue
        out.setdefault(str(algo), {})[str(label)] = refs[str(label)].normalise(rows["final_eval_mean"].to_numpy(float))
    return out


def _eval_curves(evals: pd.DataFrame) -> dict[Any, tuple[np.ndarray, np.ndarray]]:
    """``{key: (steps, mean eval return per step)}``, steps increasing."""
    _require(evals, ["key", "step", "return"], "evals")
    means = evals.groupby(["key", "step"], sort=True)["return"].mean()
    return {
        key: (group.index.get_level_values("step").to_numpy(float), group.to_numpy(float))
        for key, group in means.groupby(level="key", sort=False)
    }


# ------------------------------------------------------------------------------------------------ tables


def final_score_table(
    trials: pd.DataFrame, *, reps: int = sm.BOOTSTRAP_REPS, seed: int = 0, confidence: float = sm.CONFIDENCE
) -> pd.DataFrame:
    """Final evaluation return per (algorithm, env): mean, median and IQM over ok runs, with bootstrap CIs.

    Args:
        trials: Needs ``algo, env_label, env_id, status, final_eval_mean`` (and ``env_kwargs`` for TextMatch).
        reps: Bootstrap replications (rliable default 50,000).
        seed: Base seed; each row's seed is derived from it and (algo, env_label), so two identical calls agree.
        confidence: CI coverage.

    Returns:
        One row per (algo, env_label): ``algo, env_label, env_id, n_total, n_ok, n_failed, n_diverged``, then
        ``mean, mean_lo, mean_hi, median, median_lo, median_hi, iqm, iqm_lo, iqm_hi`` in raw return, then the
        same nine with a ``norm_`` prefix in normalised score (random 0, reference 1), then ``random_score``
        and ``reference_score``.
    """
    _check_trials(trials, ["final_eval_mean"])
    counts = count_statuses(trials)
    refs = env_references(trials)
    ok = _ok_final_scores(trials)
    groups = {name: rows["final_eval_mean"].to_numpy(float) for name, rows in ok.groupby(GROUP)}
    rows = []
    for algo, label in counts[GROUP].itertuples(index=False):
        ref = refs[label]
        runs = groups.get((algo, label), np.empty(0))
        intervals = sm.score_intervals(runs, reps=reps, seed=sm.derive_seed(seed, algo, label), confidence=confidence)
        row: dict[str, Any] = {}
        for prefix, transform in (("", lambda x: x), ("norm_", ref.normalise)):
            for stat, (point, lo, hi) in intervals.items():
                row[f"{prefix}{stat}"] = float(transform(point))
                row[f"{prefix}{stat}_lo"] = float(transform(lo))
                row[f"{prefix}{stat}_hi"] = float(transform(hi))
        row["random_score"], row["reference_score"] = ref.random_score, ref.reference_score
        rows.append(row)
    return pd.concat([counts, pd.DataFrame(rows, index=counts.index)], axis=1)


def aggregate_table(
    trials: pd.DataFrame,
    *,
    reps: int = sm.BOOTSTRAP_REPS,
    seed: int = 0,
    gamma: float = 1.0,
    confidence: float = sm.CONFIDENCE,
) -> pd.DataFrame:
    """Across-env IQM and optimality gap of normalised final scores per algorithm, with stratified bootstrap CIs.

    Each algorithm is aggregated over the envs where it has at least one ok trial (listed in ``envs``); compare
    algorithms only when their ``envs`` agree.

    Args:
        trials: As for :func:`final_score_table`.
        reps: Bootstrap replications.
        seed: Base seed (per-algo seeds are derived from it).
        gamma: Optimality-gap target in normalised score.
        confidence: CI coverage.

    Returns:
        One row per algo: ``algo, n_envs, envs`` (comma-separated labels), ``n_total, n_ok, n_failed,
        n_diverged`` (summed over envs), ``iqm, iqm_lo, iqm_hi, optimality_gap, optimality_gap_lo,
        optimality_gap_hi``.
    """
    _check_trials(trials, ["final_eval_mean"])
    totals = _algo_counts(count_statuses(trials))
    scores = _task_scores(trials, env_references(trials))
    rows = []
    for algo in totals.index:
        tasks = scores.get(str(algo), {})
        agg = sm.aggregate_intervals(
            list(tasks.values()), gamma=gamma, reps=reps, seed=sm.derive_seed(seed, str(algo)), confidence=confidence
        )
        row: dict[str, Any] = {"algo": algo, "n_envs": len(tasks), "envs": ",".join(tasks)}
        row.update(totals.loc[algo].to_dict())
        for stat, (point, lo, hi) in agg.items():
            row.update({stat: point, f"{stat}_lo": lo, f"{stat}_hi": hi})
        rows.append(row)
    stats = [f"{s}{suffix}" for s in ("iqm", "optimality_gap") for suffix in ("", "_lo", "_hi")]
    return pd.DataFrame(rows, columns=["algo", "n_envs", "envs", *COUNT_COLUMNS, *stats])


def probability_of_improvement_table(
    trials: pd.DataFrame, *, reps: int = sm.POI_REPS, seed: int = 0, confidence: float = sm.CONFIDENCE
) -> pd.DataFrame:
    """P(X > Y) for every ordered pair of algorithms, over the envs where both have ok trials, with CIs.

    Args:
        trials: As for :func:`final_score_table`.
        reps: Bootstrap replications (rliable default 2,000).
        seed: Base seed (per-pair seeds are derived from it).
        confidence: CI coverage.

    Returns:
        One row per ordered pair ``x != y``: ``algo_x, algo_y, n_envs, envs, prob, prob_lo, prob_hi``
        (NaN when the pair shares no env).
    """
    _check_trials(trials, ["final_eval_mean"])
    scores = _task_scores(trials, env_references(trials))
    algos = sorted(set(trials["algo"].astype(str)))
    rows = []
    # Ties count one half, so P(Y > X) = 1 - P(X > Y) on every resample: bootstrap each unordered pair once
    # and mirror it (the percentile interval of 1 - p is [1 - hi, 1 - lo]).
    for x, y in itertools.combinations(algos, 2):
        common = sorted(set(scores.get(x, {})) & set(scores.get(y, {})))
        point = lo = hi = float("nan")
        if common:
            point, lo, hi = sm.probability_of_improvement_interval(
                [scores[x][e] for e in common],
                [scores[y][e] for e in common],
                reps=reps,
                seed=sm.derive_seed(seed, x, y),
                confidence=confidence,
            )
        shared = {"n_envs": len(common), "envs": ",".join(common)}
        rows.append({"algo_x": x, "algo_y": y, **shared, "prob": point, "prob_lo": lo, "prob_hi": hi})
        rows.append({"algo_x": y, "algo_y": x, **shared, "prob": 1 - point, "prob_lo": 1 - hi, "prob_hi": 1 - lo})
    rows.sort(key=lambda row: (row["algo_x"], row["algo_y"]))
    return pd.DataFrame(rows, columns=["algo_x", "algo_y", "n_envs", "envs", "prob", "prob_lo", "prob_hi"])


def probability_of_improvement_matrix(
    trials: pd.DataFrame, *, reps: int = sm.POI_REPS, seed: int = 0, confidence: float = sm.CONFIDENCE
) -> pd.DataFrame:
    """Square algo x algo frame: cell (row X, column Y) is P(X > Y); the diagonal is NaN.

    Point estimates of :func:`probability_of_improvement_table` (use that for the CIs).
    """
    table = probability_of_improvement_table(trials, reps=reps, seed=seed, confidence=confidence)
    algos = sorted(set(trials["algo"].astype(str)))
    matrix = table.pivot(index="algo_x", columns="algo_y", values="prob").reindex(index=algos, columns=algos)
    matrix.index.name, matrix.columns.name = "algo", None
    return matrix.astype(float)


def performance_profile(
    trials: pd.DataFrame,
    taus: np.ndarray | Sequence[float] | None = None,
    *,
    reps: int = sm.POI_REPS,
    seed: int = 0,
    confidence: float = sm.CONFIDENCE,
) -> dict[str, Any]:
    """Score-distribution performance profiles of normalised final scores (rliable), one per algorithm.

    Args:
        trials: As for :func:`final_score_table`.
        taus: Normalised-score thresholds; default :data:`DEFAULT_TAUS` (0 to 1.5 by 0.05).
        reps: Bootstrap replications (rliable default 2,000).
        seed: Base seed.
        confidence: CI coverage.

    Returns:
        ``{"taus": (num_taus,), "profiles": {algo: (num_taus,)}, "lo": {algo: ...}, "hi": {algo: ...},
        "envs": {algo: [env_label, ...]}}``: the fraction of an algorithm's ok runs (pooled over its envs) with
        normalised score above each tau, with pointwise CIs.
    """
    _check_trials(trials, ["final_eval_mean"])
    tau_array = np.asarray(DEFAULT_TAUS if taus is None else taus, dtype=float)
    scores = _task_scores(trials, env_references(trials))
    out: dict[str, Any] = {"taus": tau_array, "profiles": {}, "lo": {}, "hi": {}, "envs": {}}
    for algo in sorted(set(trials["algo"].astype(str))):
        tasks = scores.get(algo, {})
        profile, lo, hi = sm.performance_profile_intervals(
            list(tasks.values()), tau_array, reps=reps, seed=sm.derive_seed(seed, algo), confidence=confidence
        )
        out["profiles"][algo], out["lo"][algo], out["hi"][algo] = profile, lo, hi
        out["envs"][algo] = list(tasks)
    return out


def significance_table(
    trials: pd.DataFrame,
    pairs: Sequence[tuple[str, str]] | None = None,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    effect: float | None = None,
) -> pd.DataFrame:
    """Welch's t-test and Mann-Whitney U on final returns for algorithm pairs in each env, Holm-corrected.

    Args:
        trials: As for :func:`final_score_table`.
        pairs: ``(algo_a, algo_b)`` pairs to compare in every env where both have an ok trial; None compares
            every unordered pair (a < b by name).
        alpha: Significance level for the ``*_reject`` columns and for ``seeds_needed``.
        power: Target power for ``seeds_needed``.
        effect: Difference of mean returns (raw units) that ``seeds_needed`` should detect; None uses the
            observed difference (Colas et al. 2018: the pilot's effect).

    Returns:
        One row per (env_label, pair): ``env_label, algo_a, algo_b, n_a, n_b, n_excluded_a, n_excluded_b``
        (failed + diverged), ``mean_a, mean_b, std_a, std_b`` (ddof 1), ``diff`` (a - b), ``cohens_d``,
        ``welch_t, welch_p, mwu_u, mwu_p``, ``welch_p_holm, mwu_p_holm`` (Holm over all rows of the table,
        per test), ``welch_reject, mwu_reject`` (adjusted p <= alpha), ``seeds_needed`` (runs per algorithm for
        Welch's test to reach ``power`` at ``alpha``, two-sided; <NA> when no number is: unreachable, or the
        effect size is undefined) and ``seeds_needed_text`` (``17``, ``undefined`` when both pilots have zero
        spread or fewer than 2 runs, ``> 10,000`` when unreachable).
    """
    _check_trials(trials, ["final_eval_mean"])
    counts = count_statuses(trials).set_index(GROUP)
    ok = _ok_final_scores(trials)
    groups = {name: rows["final_eval_mean"].to_numpy(float) for name, rows in ok.groupby(GROUP)}
    algos = sorted(set(trials["algo"].astype(str)))
    wanted = list(itertools.combinations(algos, 2)) if pairs is None else [tuple(p) for p in pairs]
    unknown = sorted({a for pair in wanted for a in pair} - set(algos))
    if unknown:
        raise UserError(f"unknown algorithm(s) in pairs: {', '.join(unknown)}; present: {', '.join(algos)}")
    rows = []
    for label in sorted(set(trials["env_label"].astype(str))):
        for a, b in wanted:
            if (a, label) not in groups or (b, label) not in groups:
                continue
            xa, xb = groups[(a, label)], groups[(b, label)]
            std_a = float(xa.std(ddof=1)) if xa.size > 1 else float("nan")
            std_b = float(xb.std(ddof=1)) if xb.size > 1 else float("nan")
            diff = float(xa.mean() - xb.mean())
            welch_t, welch_p = sig.welch_test(xa, xb)
            mwu_u, mwu_p = sig.mann_whitney_test(xa, xb)
            needed = sig.seeds_needed(diff if effect is None else effect, std_a, std_b, alpha=alpha, power=power)
            rows.append(
                {
                    "env_label": label,
                    "algo_a": a,
                    "algo_b": b,
                    "n_a": xa.size,
                    "n_b": xb.size,
                    "n_excluded_a": int(counts.loc[(a, label), ["n_failed", "n_diverged"]].sum()),
                    "n_excluded_b": int(counts.loc[(b, label), ["n_failed", "n_diverged"]].sum()),
                    "mean_a": float(xa.mean()),
                    "mean_b": float(xb.mean()),
                    "std_a": std_a,
                    "std_b": std_b,
                    "diff": diff,
                    "cohens_d": sig.cohens_d(xa, xb),
                    "welch_t": welch_t,
                    "welch_p": welch_p,
                    "mwu_u": mwu_u,
                    "mwu_p": mwu_p,
                    "seeds_needed": needed if isinstance(needed, int) else None,
                    "seeds_needed_text": sig.seeds_needed_text(needed),
                }
            )
    columns = [
        "env_label", "algo_a", "algo_b", "n_a", "n_b", "n_excluded_a", "n_excluded_b", "mean_a", "mean_b",
        "std_a", "std_b", "diff", "cohens_d", "welch_t", "welch_p", "mwu_u", "mwu_p",
        "welch_p_holm", "mwu_p_holm", "welch_reject", "mwu_reject", "seeds_needed", "seeds_needed_text",
    ]  # fmt: skip
    table = pd.DataFrame(rows, columns=[c for c in columns if not c.endswith(("_holm", "_reject"))])
    for test in ("welch", "mwu"):
        table[f"{test}_p_holm"] = sig.holm_adjust(table[f"{test}_p"].to_numpy(float))
        table[f"{test}_reject"] = table[f"{test}_p_holm"] <= alpha
    table["seeds_needed"] = table["seeds_needed"].astype("Int64")
    return table[columns]


def sample_efficiency_per_trial(trials: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """Steps to threshold and area under the evaluation curve of each ok trial.

    Args:
        trials: Needs ``key, algo, env_label, env_id, status`` (``seed`` is copied when present).
        evals: Long format ``key, step, return`` (see module doc).

    Returns:
        One row per ok trial: ``key, algo, env_label, seed, threshold, steps_to_threshold`` (first evaluation
        step with mean return >= threshold; NaN if never), ``final_step``, ``auc`` (average return over the
        curve: trapezoid area / step span) and ``auc_norm`` (the same in normalised score).
    """
    _check_trials(trials, ["key"])
    refs = env_references(trials)
    evaluation = _eval_curves(evals)
    rows = []
    for trial in _ok(trials).itertuples(index=False):
        ref = refs[trial.env_label]
        steps, means = evaluation.get(trial.key, (np.empty(0), np.empty(0)))
        auc = cm.area_under_curve(steps, means)
        rows.append(
            {
                "key": trial.key,
                "algo": trial.algo,
                "env_label": trial.env_label,
                "seed": getattr(trial, "seed", None),
                "threshold": ref.threshold,
                "steps_to_threshold": cm.eval_steps_to_threshold(steps, means, ref.threshold),
                "final_step": float(steps[-1]) if steps.size else float("nan"),
                "auc": auc,
                "auc_norm": float(ref.normalise(auc)),
            }
        )
    columns = ["key", "algo", "env_label", "seed", "threshold", "steps_to_threshold", "final_step", "auc", "auc_norm"]
    return pd.DataFrame(rows, columns=columns)


def _median_with_never(values: np.ndarray) -> float:
    """Median where NaN means "never" (+inf): inf when fewer than half of the runs got there; NaN if empty."""
    if values.size == 0:
        return float("nan")
    return float(np.median(np.where(np.isnan(values), np.inf, values)))


def sample_efficiency_table(trials: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """Sample efficiency per (algorithm, env): steps to the env's threshold and area under the evaluation curve.

    Args:
        trials: As for :func:`sample_efficiency_per_trial`.
        evals: Long format ``key, step, return``.

    Returns:
        One row per (algo, env_label): ``algo, env_label, env_id, n_total, n_ok, n_failed, n_diverged,
        threshold, n_reached`` (ok runs that reached it), ``steps_to_threshold_median`` (over ok runs, a run
        that never reached it counting as infinitely slow: ``inf`` when fewer than half reached it),
        ``steps_to_threshold_mean`` (over the runs that reached it), ``auc_mean, auc_std, auc_norm_mean``.
    """
    counts = count_statuses(trials)
    refs = env_references(trials)
    per_trial = sample_efficiency_per_trial(trials, evals)
    grouped = dict(list(per_trial.groupby(GROUP)))
    rows = []
    for algo, label in counts[GROUP].itertuples(index=False):
        group = grouped.get((algo, label), per_trial.iloc[0:0])
        steps = group["steps_to_threshold"].to_numpy(float)
        reached = steps[~np.isnan(steps)]
        auc = group["auc"].to_numpy(float)
        rows.append(
            {
                "threshold": refs[label].threshold,
                "n_reached": int(reached.size),
                # No threshold (NaN): "n/a", not "not reached".
                "steps_to_threshold_median": _median_with_never(steps) if np.isfinite(refs[label].threshold) else np.nan,
                "steps_to_threshold_mean": float(reached.mean()) if reached.size else float("nan"),
                "auc_mean": float(np.nanmean(auc)) if np.isfinite(auc).any() else float("nan"),
                "auc_std": float(np.nanstd(auc, ddof=1)) if np.isfinite(auc).sum() > 1 else float("nan"),
                "auc_norm_mean": float(refs[label].normalise(np.nanmean(auc))) if np.isfinite(auc).any() else np.nan,
            }
        )
    return pd.concat([counts, pd.DataFrame(rows, index=counts.index)], axis=1)


def _within_run_metrics(curve: tuple[np.ndarray, np.ndarray], window: int, alpha: float) -> tuple[float, float, float]:
    """(dispersion across time, short-term risk, long-term risk) of one ``(steps, values)`` curve."""
    steps, values = curve
    return (
        cm.dispersion_across_time(values, steps, window),
        cm.short_term_risk(values, steps, alpha),
        cm.long_term_risk(values, alpha),
    )


def _nanmedian(values: Sequence[float] | np.ndarray) -> float:
    """Median ignoring NaN; NaN when nothing is left."""
    array = np.asarray(values, dtype=float)
    return float(np.median(array[~np.isnan(array)])) if np.isfinite(array).any() else float("nan")


def _nanmean(values: Sequence[float] | np.ndarray) -> float:
    """Mean ignoring NaN; NaN when nothing is left."""
    array = np.asarray(values, dtype=float)
    return float(np.mean(array[~np.isnan(array)])) if np.isfinite(array).any() else float("nan")


def stability_table(
    trials: pd.DataFrame,
    curves: pd.DataFrame | None = None,
    evals: pd.DataFrame | None = None,
    updates: pd.DataFrame | None = None,
    *,
    window: int = 5,
    train_window: int = 20,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Reliability metrics of Chan et al. 2020 per (algorithm, env), plus update-trace summaries.

    Within-run metrics are computed per ok run and summarised by the median over runs.

    Args:
        trials: Needs ``key, algo, env_label, env_id, status, final_eval_mean``.
        curves: Training episodes, long format ``key, step, return`` (each episode is a point), or None.
        evals: Evaluation episodes, long format ``key, step, return`` (curve = mean return per step), or None.
        updates: Per-update traces ``key, update`` and any of ``grad_var, approx_kl, entropy``, or None.
        window: Sliding-window length (points) for dispersion across time on evaluation curves.
        train_window: The same for training-episode curves.
        alpha: CVaR tail fraction (the paper's 0.05).

    Returns:
        One row per (algo, env_label): the status counts, then from evaluation curves
        ``dispersion_across_time, short_term_risk, long_term_risk`` (median over runs),
        ``dispersion_across_runs`` (IQR across runs at the evaluation steps all ok runs share, averaged),
        ``risk_across_runs`` (lower CVaR of ``final_eval_mean`` over ok runs); from training curves
        ``train_dispersion_across_time, train_short_term_risk, train_long_term_risk``; from updates, for each
        of grad_var, approx_kl, entropy: ``<metric>_mean`` and ``<metric>_last_quartile`` (mean over runs of
        each run's mean / last-quartile mean). Units are raw returns; missing inputs give NaN columns.
    """
    _check_trials(trials, ["key", "final_eval_mean"])
    counts = count_statuses(trials)
    ok = _ok_final_scores(trials)
    eval_curves = _eval_curves(evals) if evals is not None else {}
    if curves is not None:
        _require(curves, ["key", "step", "return"], "curves")
        train_curves = {
            key: (g["step"].to_numpy(float), g["return"].to_numpy(float))
            for key, g in curves.sort_values(["key", "step"], kind="stable").groupby("key", sort=False)
        }
    else:
        train_curves = {}
    traces: dict[Any, pd.DataFrame] = {}
    if updates is not None:
        _require(updates, ["key", "update"], "updates")
        traces = {key: g for key, g in updates.sort_values(["key", "update"], kind="stable").groupby("key", sort=False)}
    grouped = dict(list(ok.groupby(GROUP)))
    rows = []
    for algo, label in counts[GROUP].itertuples(index=False):
        group = grouped.get((algo, label), ok.iloc[0:0])
        keys = group["key"].tolist()
        row: dict[str, Any] = {}
        within = [_within_run_metrics(eval_curves[k], window, alpha) for k in keys if k in eval_curves]
        train = [_within_run_metrics(train_curves[k], train_window, alpha) for k in keys if k in train_curves]
        for prefix, values in (("", within), ("train_", train)):
            for i, name in enumerate(("dispersion_across_time", "short_term_risk", "long_term_risk")):
                row[prefix + name] = _nanmedian([v[i] for v in values])
        row["dispersion_across_runs"] = _dispersion_across_runs([eval_curves[k] for k in keys if k in eval_curves])
        row["risk_across_runs"] = cm.risk_across_runs(group["final_eval_mean"].to_numpy(float), alpha)
        for metric in TRACE_METRICS:
            summaries = [
                cm.trace_summary(traces[k][metric].to_numpy(float))
                for k in keys
                if k in traces and metric in traces[k].columns
            ]
            row[f"{metric}_mean"] = _nanmean([s[0] for s in summaries])
            row[f"{metric}_last_quartile"] = _nanmean([s[1] for s in summaries])
        rows.append(row)
    return pd.concat([counts, pd.DataFrame(rows, index=counts.index)], axis=1)


def _dispersion_across_runs(run_curves: Sequence[tuple[np.ndarray, np.ndarray]]) -> float:
    """Dispersion across runs on the steps shared by every curve (rl-reliability-metrics' valid eval points)."""
    if not run_curves:
        return float("nan")
    common = run_curves[0][0]
    for steps, _ in run_curves[1:]:
        common = np.intersect1d(common, steps)
    if common.size == 0:
        return float("nan")
    matrix = np.stack([values[np.isin(steps, common)] for steps, values in run_curves])
    return cm.dispersion_across_runs(matrix)


def speed_memory_table(trials: pd.DataFrame, evals: pd.DataFrame | None = None) -> pd.DataFrame:
    """Throughput, time split, wall time to threshold and peak memory per (algorithm, env), over ok trials.

    Args:
        trials: Needs ``algo, env_label, env_id, status``; uses ``wall_time_s, rollout_time_s, update_time_s,
            steps_per_second, peak_rss_mb`` where present (missing fields give NaN) and ``key`` with ``evals``.
        evals: Evaluation episodes (``key, step, return``, optional ``wall_time_s``) for wall time to threshold;
            without a ``wall_time_s`` column the time is steps to threshold / ``steps_per_second``.

    Returns:
        One row per (algo, env_label): status counts, ``steps_per_second_mean, steps_per_second_std,
        wall_time_s_mean, rollout_share, update_share, other_share`` (means over runs of each part's fraction of
        ``wall_time_s``; other = evaluation, logging, start-up), ``peak_rss_mb_mean, peak_rss_mb_max``,
        ``n_reached`` and ``wall_time_to_threshold_s_median`` (median over ok runs, a run that never reached the
        threshold counting as inf; NaN without ``evals`` or when a run that reached it has no timing).
    """
    _check_trials(trials)
    counts = count_statuses(trials)
    ok = _ok(trials)

    def column(frame: pd.DataFrame, name: str) -> np.ndarray:
        return frame[name].to_numpy(float) if name in frame.columns else np.full(len(frame), np.nan)

    to_threshold: dict[Any, float] = {}
    if evals is not None:
        efficiency = sample_efficiency_per_trial(trials, evals).set_index("key")["steps_to_threshold"]
        clocks: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
        if "wall_time_s" in evals.columns:
            # An evaluation starts when its step is reached, so the earliest clock reading per step is used.
            started = evals.groupby(["key", "step"], sort=True)["wall_time_s"].min()
            clocks = {
                key: (g.index.get_level_values("step").to_numpy(float), g.to_numpy(float))
                for key, g in started.groupby(level="key", sort=False)
            }
        for trial in ok.itertuples(index=False):
            step = float(efficiency.get(trial.key, np.nan))
            steps, clock = clocks.get(trial.key, (None, None))
            sps = getattr(trial, "steps_per_second", None)
            # Never reached -> inf; reached but no clock or throughput recorded -> NaN (unknown).
            to_threshold[trial.key] = (
                cm.wall_time_to_threshold(
                    step, steps=steps, wall_times=clock, steps_per_second=float(sps) if sps is not None else None
                )
                if np.isfinite(step)
                else np.inf
            )
    grouped = dict(list(ok.groupby(GROUP)))
    rows = []
    for algo, label in counts[GROUP].itertuples(index=False):
        group = grouped.get((algo, label), ok.iloc[0:0])
        wall = column(group, "wall_time_s")
        sps = column(group, "steps_per_second")
        rss = column(group, "peak_rss_mb")
        with np.errstate(divide="ignore", invalid="ignore"):
            rollout = column(group, "rollout_time_s") / wall
            update = column(group, "update_time_s") / wall
        times = np.array([to_threshold.get(k, np.nan) for k in group["key"]]) if "key" in group else np.empty(0)
        rows.append(
            {
                "steps_per_second_mean": _nanmean(sps),
                "steps_per_second_std": float(np.nanstd(sps, ddof=1)) if np.isfinite(sps).sum() > 1 else np.nan,
                "wall_time_s_mean": _nanmean(wall),
                "rollout_share": _nanmean(rollout),
                "update_share": _nanmean(update),
                "other_share": _nanmean(1.0 - rollout - update),
                "peak_rss_mb_mean": _nanmean(rss),
                "peak_rss_mb_max": float(np.nanmax(rss)) if np.isfinite(rss).any() else float("nan"),
                "n_reached": int(np.isfinite(times).sum()),
                "wall_time_to_threshold_s_median": float(np.median(times)) if times.size else np.nan,
            }
        )
    return pd.concat([counts, pd.DataFrame(rows, index=counts.index)], axis=1)
