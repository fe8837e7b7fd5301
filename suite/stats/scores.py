"""Final-score statistics with stratified bootstrap confidence intervals (rliable).

Follows Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical Precipice"
(NeurIPS, arXiv 2108.13264) and its library rliable (google-research/rliable, ``rliable/library.py`` and
``rliable/metrics.py``): interquartile mean (IQM, the 25% trimmed mean over runs x tasks), optimality gap,
performance profiles and probability of improvement, each with a 95% percentile stratified bootstrap CI.

Shapes follow rliable: ``scores`` is ``(num_runs, num_tasks)``. Because failed or diverged trials are
excluded, tasks may have different numbers of runs; functions here therefore take *per-task* 1-D arrays
(``task_scores: list of (num_runs_m,)``), and the bootstrap resamples runs within each task independently,
which is exactly rliable's stratified bootstrap (its ``StratifiedBootstrap`` on a rectangular matrix and its
``StratifiedIndependentBootstrap`` on a list of arrays draw the same distribution).

Missing values: NaN in gives NaN out. A NaN score is a run whose result is unknown; dropping it would bias every
statistic towards the runs that did report, and numpy's sort puts NaN last, so a trimmed statistic (median, IQM)
would silently come out finite. Every function here therefore returns NaN (point and interval) when any input
score is NaN, as rliable's mean does; pass only the runs you mean to count (the tables exclude failed runs
explicitly and report them).

Determinism: rliable 1.2.0's bootstrap draws its indices with ``np.random.choice`` -- numpy's *global* RNG --
even when ``random_state`` is given (``StratifiedBootstrap.update_indices``). Every bootstrap here therefore
runs inside :func:`seeded_global_rng`, which seeds the global RNG and restores its previous state afterwards,
with a seed derived from the caller's seed and the row's identity so one row's interval does not depend on
which other rows are in the table.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import scipy.stats
from rliable import library as rly
from rliable import metrics as rly_metrics

BOOTSTRAP_REPS = 50_000
"""rliable's default number of bootstrap replications for ``get_interval_estimates``."""

POI_REPS = 2_000
"""rliable's default replications for probability of improvement and performance profiles."""

CONFIDENCE = 0.95
"""Coverage of every confidence interval."""

Interval = tuple[float, float, float]
"""``(point estimate, lower bound, upper bound)``."""


@contextlib.contextmanager
def seeded_global_rng(seed: int) -> Iterator[None]:
    """Seed numpy's global RNG for the duration of the block, then restore its previous state.

    Needed because rliable's bootstrap ignores ``random_state`` for its resampling indices (see module doc).

    Args:
        seed: Seed in ``[0, 2**32)``.
    """
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def derive_seed(seed: int, *parts: str) -> int:
    """A 32-bit seed from a base seed and identifying strings (e.g. algorithm and env label).

    Stable across processes and Python versions (CRC32, not ``hash``).
    """
    entropy = [int(seed)] + [zlib.crc32(part.encode("utf-8")) for part in parts]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def _has_nan(*arrays: Any) -> bool:
    """Whether any of the arrays holds a NaN (see the module doc: NaN in gives NaN out)."""
    return any(bool(np.isnan(np.asarray(a, dtype=float)).any()) for a in arrays)


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean: the mean of the middle 50% of all values (rliable ``aggregate_iqm``).

    Args:
        scores: Any shape, e.g. ``(num_runs,)`` or ``(num_runs, num_tasks)``; pooled over all entries.

    Returns:
        ``scipy.stats.trim_mean(scores, 0.25, axis=None)``: with n values, ``floor(n / 4)`` are cut from each end;
        NaN if any score is NaN (``trim_mean`` would cut a NaN off the top end and return a finite number).
    """
    values = np.asarray(scores, dtype=float)
    if _has_nan(values):
        return float("nan")
    return float(scipy.stats.trim_mean(values, proportiontocut=0.25, axis=None))


def optimality_gap(scores: np.ndarray, gamma: float = 1.0) -> float:
    """Optimality gap: how far normalised scores fall short of ``gamma`` on average (rliable).

    Args:
        scores: Normalised scores, any shape; pooled over all entries.
        gamma: Target; scores above it count as ``gamma``.

    Returns:
        ``gamma - mean(min(scores, gamma))``; 0 when every run reaches ``gamma``; NaN if any score is NaN.
    """
    if _has_nan(scores):
        return float("nan")
    return float(rly_metrics.aggregate_optimality_gap(np.asarray(scores, dtype=float), gamma))


def bootstrap_indices(sizes: Sequence[int], reps: int) -> list[np.ndarray]:
    """The resampling indices rliable's ``StratifiedIndependentBootstrap`` draws for 1-D arguments of ``sizes`` runs,
    in its order, from numpy's global RNG: per replication, per argument, ``np.random.choice(n, n)``.

    Returns:
        One ``(reps, n_i)`` integer array per argument. Arguments of one size are drawn in a single call (legacy
        ``RandomState`` draws the same stream in one call as in many: tested), the others one call at a time.
    """
    sizes = [int(n) for n in sizes]
    if len(set(sizes)) == 1:
        block = np.random.choice(sizes[0], (reps, len(sizes), sizes[0]), replace=True)
        return [block[:, i, :] for i in range(len(sizes))]
    out = [np.empty((reps, n), dtype=np.int64) for n in sizes]
    for r in range(reps):
        for i, n in enumerate(sizes):
            out[i][r] = np.random.choice(n, n, replace=True)
    return out


def percentile_interval(estimates: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """``(lower (k,), upper (k,))``: arch's ``conf_int(method="percentile")`` of bootstrap estimates ``(reps, k)``,
    with its exact arithmetic (the same percentiles, one column at a time)."""
    alpha = (1.0 - confidence) / 2
    q = list(100 * np.array([alpha, 1.0 - alpha]))
    k = estimates.shape[1]
    lower, upper = np.zeros(k), np.zeros(k)
    for i in range(k):
        lower[i], upper[i] = np.percentile(estimates[:, i], q)
    return lower, upper


def interval_estimate(
    args: Sequence[np.ndarray],
    func: Callable[..., np.ndarray],
    *,
    reps: int,
    seed: int,
    confidence: float,
    batched: Callable[..., np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rliable's ``get_interval_estimates`` on ``func(*args)`` (percentile CI, stratified bootstrap of each 1-D
    argument's runs) under a seeded global RNG, with the same result to the last bit.

    rliable (through arch) calls ``func`` once per replication, in Python; with ``batched`` (``func`` over all
    replications at once: arrays ``(reps, n_i)`` in, ``(reps, k)`` out, the same arithmetic per row) the estimates
    are one vectorised call. The indices are rliable's own draws (:func:`bootstrap_indices`) and the percentiles
    arch's (:func:`percentile_interval`); tests compare every statistic here with rliable's output.

    Args:
        args: One or more 1-D arrays resampled independently (runs).
        func: Maps resampled ``*args`` to a 1-D array of k statistics.
        reps: Bootstrap replications.
        seed: Global RNG seed for this call.
        confidence: CI coverage.
        batched: ``func`` over a leading replication axis; None: ``func`` is called per replication.

    Returns:
        ``(point (k,), lower (k,), upper (k,))``.
    """
    arrays = [np.asarray(a) for a in args]
    point = np.asarray(func(*arrays), dtype=float).reshape(-1)
    with seeded_global_rng(seed):
        indices = bootstrap_indices([a.shape[0] for a in arrays], reps)
    if batched is not None:
        estimates = np.asarray(batched(*(a[i] for a, i in zip(arrays, indices, strict=True))), dtype=float)
    else:
        estimates = np.zeros((reps, point.size))
        for r in range(reps):
            estimates[r] = func(*(a[i[r]] for a, i in zip(arrays, indices, strict=True)))
    lower, upper = percentile_interval(estimates.reshape(reps, -1), confidence)
    return point, lower, upper


def _sorted_iqm(ordered: np.ndarray) -> float:
    """IQM of an already sorted 1-D array: same cut as ``scipy.stats.trim_mean(x, 0.25)``, without its overhead.

    The bootstrap calls this 50,000 times per row, so the sort is shared with the median.
    """
    cut = int(0.25 * ordered.size)
    return float(ordered[cut : ordered.size - cut].mean())


def _run_statistics(runs: np.ndarray) -> np.ndarray:
    """``[mean, median, IQM]`` of a 1-D array of run scores."""
    ordered = np.sort(runs.reshape(-1))
    n = ordered.size
    return np.array([ordered.mean(), 0.5 * (ordered[(n - 1) // 2] + ordered[n // 2]), _sorted_iqm(ordered)])


def _run_statistics_batched(runs: np.ndarray) -> np.ndarray:
    """:func:`_run_statistics` of each row of ``(reps, n)``: ``(reps, 3)``."""
    ordered = np.sort(runs, axis=1)
    n = ordered.shape[1]
    cut = int(0.25 * n)
    return np.stack(
        [ordered.mean(axis=1), 0.5 * (ordered[:, (n - 1) // 2] + ordered[:, n // 2]), ordered[:, cut : n - cut].mean(axis=1)],
        axis=1,
    )


def score_intervals(
    runs: np.ndarray, *, reps: int = BOOTSTRAP_REPS, seed: int = 0, confidence: float = CONFIDENCE
) -> dict[str, Interval]:
    """Mean, median and IQM over runs of one (algorithm, env), each with a bootstrap CI over runs.

    Args:
        runs: Final scores, shape ``(num_runs,)``.
        reps: Bootstrap replications (rliable default 50,000; tests use a few hundred).
        seed: Global RNG seed; identical calls give identical intervals.
        confidence: CI coverage.

    Returns:
        ``{"mean": (point, lo, hi), "median": ..., "iqm": ...}``; all NaN when ``runs`` is empty or holds a NaN.
        With a single run the interval collapses onto the point.
    """
    runs = np.asarray(runs, dtype=float).reshape(-1)
    names = ("mean", "median", "iqm")
    if runs.size == 0 or _has_nan(runs):
        nan = float("nan")
        return {name: (nan, nan, nan) for name in names}
    point, lo, hi = interval_estimate(
        [runs], _run_statistics, reps=reps, seed=seed, confidence=confidence, batched=_run_statistics_batched
    )
    return {name: (float(point[i]), float(lo[i]), float(hi[i])) for i, name in enumerate(names)}


def aggregate_intervals(
    task_scores: Sequence[np.ndarray],
    *,
    gamma: float = 1.0,
    reps: int = BOOTSTRAP_REPS,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> dict[str, Interval]:
    """IQM and optimality gap of normalised scores across tasks, with stratified bootstrap CIs.

    Args:
        task_scores: One array of normalised run scores per task, shapes ``(num_runs_m,)``; runs are resampled
            within each task (stratified bootstrap, Agarwal et al. 2021 Sec. 4). Both statistics pool all
            runs of all tasks, as rliable's ``aggregate_iqm`` and ``aggregate_optimality_gap`` do on a matrix.
        gamma: Optimality-gap target.
        reps: Bootstrap replications.
        seed: Global RNG seed.
        confidence: CI coverage.

    Returns:
        ``{"iqm": (point, lo, hi), "optimality_gap": (point, lo, hi)}``; NaN when there is no score or one is NaN.
    """
    arrays = [np.asarray(a, dtype=float).reshape(-1) for a in task_scores if np.size(a) > 0]
    if not arrays or _has_nan(*arrays):
        nan = float("nan")
        return {"iqm": (nan, nan, nan), "optimality_gap": (nan, nan, nan)}

    def func(*tasks: np.ndarray) -> np.ndarray:
        pooled = np.sort(np.concatenate(tasks))
        return np.array([_sorted_iqm(pooled), gamma - np.minimum(pooled, gamma).mean()])

    def batched(*tasks: np.ndarray) -> np.ndarray:
        pooled = np.sort(np.concatenate(tasks, axis=1), axis=1)
        n = pooled.shape[1]
        cut = int(0.25 * n)
        return np.stack([pooled[:, cut : n - cut].mean(axis=1), gamma - np.minimum(pooled, gamma).mean(axis=1)], axis=1)

    point, lo, hi = interval_estimate(arrays, func, reps=reps, seed=seed, confidence=confidence, batched=batched)
    return {
        "iqm": (float(point[0]), float(lo[0]), float(hi[0])),
        "optimality_gap": (float(point[1]), float(lo[1]), float(hi[1])),
    }


def probability_of_improvement(x_tasks: Sequence[np.ndarray], y_tasks: Sequence[np.ndarray]) -> float:
    """P(X > Y): probability that a random run of X beats a random run of Y on the same task, averaged over tasks.

    Per task this is the Mann-Whitney U statistic divided by ``n_x * n_y`` (ties count one half), as in
    rliable's ``metrics.probability_of_improvement``, which is called on each task.

    Args:
        x_tasks: Per-task run scores of X, shapes ``(num_runs_x_m,)``.
        y_tasks: Per-task run scores of Y, same task order, shapes ``(num_runs_y_m,)``.

    Returns:
        The average over tasks, in ``[0, 1]``; NaN if any score is NaN (a NaN compares as neither larger nor
        smaller, which would count it as a loss for both sides).
    """
    if len(x_tasks) != len(y_tasks) or not x_tasks:
        raise ValueError(f"need the same non-zero number of tasks for X and Y, got {len(x_tasks)} and {len(y_tasks)}")
    if _has_nan(*x_tasks, *y_tasks):
        return float("nan")
    per_task = [
        rly_metrics.probability_of_improvement(
            np.asarray(x, dtype=float).reshape(-1, 1), np.asarray(y, dtype=float).reshape(-1, 1)
        )
        for x, y in zip(x_tasks, y_tasks, strict=True)
    ]
    return float(np.mean(per_task))


def _improvement_batched(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) on one task for each row of ``x (reps, n_x)`` and ``y (reps, n_y)``: ``(reps,)``.

    Counts the pairs (ties one half) over ``n_x * n_y``, which is the Mann-Whitney U over ``n_x * n_y`` that
    rliable computes (U is a count of pairs, exact in float), and 0.5 where the two rows are equal, as rliable has it.
    """
    gt = (x[:, :, None] > y[:, None, :]).sum(axis=(1, 2))
    eq = (x[:, :, None] == y[:, None, :]).sum(axis=(1, 2))
    p = (gt + 0.5 * eq) / (x.shape[1] * y.shape[1])
    if x.shape[1] == y.shape[1]:
        p = np.where((x == y).all(axis=1), 0.5, p)
    return p


def probability_of_improvement_interval(
    x_tasks: Sequence[np.ndarray],
    y_tasks: Sequence[np.ndarray],
    *,
    reps: int = POI_REPS,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> Interval:
    """:func:`probability_of_improvement` with a stratified bootstrap CI (runs of X and Y resampled independently).

    Args:
        x_tasks: Per-task run scores of X, shapes ``(num_runs_x_m,)``.
        y_tasks: Per-task run scores of Y, shapes ``(num_runs_y_m,)``.
        reps: Bootstrap replications (rliable uses 2,000 for this metric).
        seed: Global RNG seed.
        confidence: CI coverage.

    Returns:
        ``(point, lo, hi)``; all NaN if any score is NaN.
    """
    if _has_nan(*x_tasks, *y_tasks):
        nan = float("nan")
        return nan, nan, nan
    args: list[np.ndarray] = []
    for x, y in zip(x_tasks, y_tasks, strict=True):
        args += [np.asarray(x, dtype=float).reshape(-1), np.asarray(y, dtype=float).reshape(-1)]

    def func(*arrays: np.ndarray) -> np.ndarray:
        return np.array([probability_of_improvement(arrays[0::2], arrays[1::2])])

    def batched(*arrays: np.ndarray) -> np.ndarray:
        per_task = [_improvement_batched(x, y) for x, y in zip(arrays[0::2], arrays[1::2], strict=True)]
        return np.stack(per_task, axis=1).mean(axis=1, keepdims=True)

    point, lo, hi = interval_estimate(args, func, reps=reps, seed=seed, confidence=confidence, batched=batched)
    return float(point[0]), float(lo[0]), float(hi[0])


def score_distribution(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Performance profile: fraction of all runs (pooled over tasks) whose normalised score exceeds each tau.

    Same definition as rliable's ``run_score_deviation`` (strictly greater than tau).

    Args:
        scores: Normalised scores, any shape, pooled.
        taus: Thresholds, shape ``(num_taus,)``.

    Returns:
        Shape ``(num_taus,)``, non-increasing in tau; all NaN if any score is NaN.
    """
    flat = np.asarray(scores, dtype=float).reshape(-1)
    if _has_nan(flat):
        return np.full(np.shape(taus), np.nan, dtype=float).reshape(-1)
    return (flat[None, :] > np.asarray(taus, dtype=float).reshape(-1, 1)).mean(axis=1)


def performance_profile_intervals(
    task_scores: Sequence[np.ndarray],
    taus: np.ndarray,
    *,
    reps: int = POI_REPS,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Score-distribution performance profile with pointwise bootstrap CIs (Agarwal et al. 2021 Sec. 4.2).

    When every task has the same number of runs the result is rliable's ``create_performance_profile`` on the
    ``(num_runs, num_tasks)`` matrix, to the last bit (its draws, computed over all replications at once; tested
    against it); otherwise (failed runs excluded) it bootstraps the per-task arrays with the same definition
    (:func:`score_distribution`), since rliable's profile needs a rectangular matrix.

    Args:
        task_scores: Per-task normalised run scores, shapes ``(num_runs_m,)``.
        taus: Thresholds, shape ``(num_taus,)``.
        reps: Bootstrap replications (rliable default 2,000).
        seed: Global RNG seed.
        confidence: CI coverage.

    Returns:
        ``(profile, lower, upper)``, each of shape ``(num_taus,)``; NaN when there is no score or one is NaN.
    """
    taus = np.asarray(taus, dtype=float).reshape(-1)
    arrays = [np.asarray(a, dtype=float).reshape(-1) for a in task_scores if np.size(a) > 0]
    if not arrays or _has_nan(*arrays):
        nan = np.full(taus.shape, np.nan)
        return nan, nan.copy(), nan.copy()
    if len({a.size for a in arrays}) == 1:
        # rliable's create_performance_profile (StratifiedBootstrap over runs within each task column), vectorised:
        # per replication it draws np.random.choice(runs, (runs, tasks)), the same stream as one block draw
        matrix = np.stack(arrays, axis=1)
        runs, tasks = matrix.shape
        profile = np.asarray(rly.score_distributions(matrix, taus), dtype=float)
        with seeded_global_rng(seed):
            idx = np.random.choice(runs, (reps, runs, tasks), replace=True)
        resampled = matrix[idx, np.arange(tasks)].reshape(reps, -1)
        lo, hi = percentile_interval((resampled[:, None, :] > taus[None, :, None]).mean(axis=2), confidence)
        return profile, lo, hi

    def func(*tasks: np.ndarray) -> np.ndarray:
        return score_distribution(np.concatenate(tasks), taus)

    def batched(*tasks: np.ndarray) -> np.ndarray:
        pooled = np.concatenate(tasks, axis=1)
        return (pooled[:, None, :] > taus[None, :, None]).mean(axis=2)

    return interval_estimate(arrays, func, reps=reps, seed=seed, confidence=confidence, batched=batched)
