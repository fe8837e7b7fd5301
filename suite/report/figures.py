"""The report's figures (matplotlib with the Agg backend, seaborn styling), written as PNG and SVG.

Every function takes the report's frames and returns a :class:`matplotlib.figure.Figure`; :func:`save_figure`
writes it. Colours are fixed per algorithm (sorted ids, seaborn's colour-blind palette) so an algorithm has
the same colour in every figure. Strings from the database are drawn with mathtext off, so a ``$`` in an
env label is printed, not interpreted.

Learning curves: each run's curve (mean evaluation return per evaluation step, or its training episodes
smoothed over a window) is put on a common step grid by linear interpolation inside the range every run
covers; the line is the IQM over runs at each grid step and the band a 95% percentile bootstrap over runs
(resampling whole runs, as rliable does for its curves).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

CURVE_POINTS = 60
"""Grid points of an interpolated learning curve."""

CURVE_BAND_REPS = 500
"""Bootstrap replications of a learning-curve band (a visual aid; the tables carry the CIs)."""

TRAIN_WINDOW = 20
"""Training episodes averaged per point of a training curve."""

DPI = 110
"""PNG resolution: a 10-inch figure is 1,100 px, the width of the HTML page."""

STYLE: dict[str, Any] = {
    "text.parse_math": False,
    "svg.hashsalt": "rl-suite",
    "svg.fonttype": "path",
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
}


def style() -> contextlib.AbstractContextManager[None]:
    """The report's matplotlib settings (:data:`STYLE`) for the duration of a ``with`` block."""
    return plt.rc_context(cast(Any, STYLE))  # matplotlib types rc keys as a Literal; STYLE holds valid ones


def algo_colors(algos: Sequence[str]) -> dict[str, Any]:
    """A fixed colour per algorithm id (sorted), the same in every figure."""
    names = sorted(set(algos))
    palette = sns.color_palette("colorblind", len(names)) if len(names) <= 10 else sns.color_palette("husl", len(names))
    return dict(zip(names, palette, strict=True))


def _new_figure(n_panels: int, *, ncols: int = 3, panel: tuple[float, float] = (3.6, 2.8)) -> tuple[Figure, np.ndarray]:
    ncols = max(1, min(ncols, n_panels))
    nrows = max(1, -(-n_panels // ncols))
    with style():
        fig, axes = plt.subplots(nrows, ncols, figsize=(panel[0] * ncols, panel[1] * nrows), squeeze=False)
    for ax in axes.flat[n_panels:]:
        ax.set_visible(False)
    return fig, axes


def save_figure(fig: Figure, directory: Path, name: str) -> bytes:
    """Write ``<name>.png`` and ``<name>.svg`` under ``directory``; return the PNG bytes (for embedding).

    Metadata dates are left out so an unchanged report rewrites identical files.
    """
    directory.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    with style():
        fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
        fig.savefig(directory / f"{name}.svg", format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    png = buffer.getvalue()
    (directory / f"{name}.png").write_bytes(png)
    return png


# ----------------------------------------------------------------------------------------- curve statistics


def iqm_band(matrix: np.ndarray, *, reps: int = CURVE_BAND_REPS, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IQM over runs at each point, with a 95% percentile bootstrap band over runs.

    Args:
        matrix: Shape ``(num_runs, num_points)``, finite.
        reps: Bootstrap replications.
        seed: Generator seed.

    Returns:
        ``(iqm, lo, hi)``, each of shape ``(num_points,)``; the band collapses onto the line for one run.
    """
    matrix = np.asarray(matrix, dtype=float)
    point = _iqm_of(list(matrix))
    if matrix.shape[0] < 2:
        return point, point.copy(), point.copy()
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, matrix.shape[0], size=(reps, matrix.shape[0]))
    boot = _iqm_of([matrix[idx[:, i]] for i in range(matrix.shape[0])])  # (reps, num_points)
    lo, hi = np.percentile(boot, [2.5, 97.5], axis=0)
    return point, lo, hi


SORT_NETWORK_MAX = 8
"""Up to this many runs :func:`_iqm_of` sorts them with a compare-exchange network of elementwise min/max, not
``np.sort`` along a short last axis, whose per-row cost made it the report's slowest statistic (500 x 60 rows of 3
runs per curve)."""


def _iqm_of(runs: list[np.ndarray]) -> np.ndarray:
    """Elementwise IQM over same-shaped arrays, one per run: what ``scipy.stats.trim_mean(x, 0.25, axis=0)`` keeps of
    the stacked runs (``floor(n / 4)`` cut from each end), averaged in sorted order."""
    n = len(runs)
    cut = int(0.25 * n)
    if n > SORT_NETWORK_MAX:
        return np.sort(np.stack(runs, axis=-1), axis=-1)[..., cut : n - cut].mean(-1)
    cols = list(runs)
    for i in range(n):  # a bubble-sort network: n (n - 1) / 2 compare-exchanges
        for j in range(n - 1 - i):
            cols[j], cols[j + 1] = np.minimum(cols[j], cols[j + 1]), np.maximum(cols[j], cols[j + 1])
    return np.stack(cols[cut : n - cut], axis=-1).mean(-1)


def _on_grid(runs: Sequence[tuple[np.ndarray, np.ndarray]], points: int) -> tuple[np.ndarray, np.ndarray]:
    """Runs' curves on one step grid: their shared steps if all runs have the same, else an interpolation grid
    over the range all runs cover. Returns ``(grid (P,), values (num_runs, P))``."""
    first = runs[0][0]
    if all(steps.shape == first.shape and np.array_equal(steps, first) for steps, _ in runs):
        return first.astype(float), np.stack([values for _, values in runs]).astype(float)
    start = max(float(steps[0]) for steps, _ in runs)
    stop = min(float(steps[-1]) for steps, _ in runs)
    if stop < start:  # no common range: keep the runs that overlap the longest one's span
        stop = start
    grid = np.linspace(start, stop, points) if stop > start else np.array([stop])
    return grid, np.stack([np.interp(grid, steps, values) for steps, values in runs])


def eval_runs(evals: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per trial key: ``(steps, mean evaluation return per step)``, as the statistics layer defines the curve (keys
    with no finite value left out). One pass over the whole frame, not one per group of trials."""
    if evals.empty:
        return {}
    means = evals.groupby(["key", "step"], sort=True)["return"].mean()
    out = {}
    for key, group in means.groupby(level="key", sort=True):
        steps = group.index.get_level_values("step").to_numpy(float)
        values = group.to_numpy(float)
        ok = np.isfinite(values)
        if ok.any():
            out[str(key)] = (steps[ok], values[ok])
    return out


def train_runs(curves: pd.DataFrame, window: int = TRAIN_WINDOW) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per trial key: ``(steps, running mean of the last ``window`` training-episode returns)`` (keys with no finite
    return left out)."""
    if curves.empty:
        return {}
    out = {}
    steps_all = curves["step"].to_numpy(float)
    values_all = curves["return"].to_numpy(float)
    for key, rows in curves.groupby("key", sort=True).indices.items():
        steps, values = steps_all[rows], values_all[rows]
        ok = np.isfinite(values)
        steps, values = steps[ok], values[ok]
        if steps.size == 0:
            continue
        cumsum = np.concatenate([[0.0], np.cumsum(values)])
        idx = np.arange(1, values.size + 1)
        start = np.maximum(idx - window, 0)
        smoothed = (cumsum[idx] - cumsum[start]) / (idx - start)
        # Several episodes can end at the same step (vector envs): keep the last value per step.
        last = np.r_[steps[1:] != steps[:-1], True]
        out[str(key)] = (steps[last], smoothed[last])
    return out


def learning_curves_frame(trials: pd.DataFrame, evals: pd.DataFrame, curves: pd.DataFrame, *, seed: int = 0) -> pd.DataFrame:
    """IQM learning curves per (source, algo, env_label) over ok runs.

    Args:
        trials: The study's trials (only ``ok`` ones are used).
        evals: Evaluation episodes.
        curves: Training episodes.
        seed: Bootstrap seed.

    Returns:
        Long format ``source`` (``eval`` or ``train``), ``algo, env_label, step, iqm, lo, hi, n_runs``.
    """
    ok = trials[trials["status"] == "ok"]
    by_source = {"eval": eval_runs(evals), "train": train_runs(curves)}
    rows = []
    for (algo, label), group in ok.groupby(["algo", "env_label"], sort=True):
        keys = sorted({str(k) for k in group["key"]})
        for source, per_key in by_source.items():
            runs = [per_key[k] for k in keys if k in per_key]
            if not runs:
                continue
            grid, matrix = _on_grid(runs, CURVE_POINTS)
            point, lo, hi = iqm_band(matrix, seed=seed)
            rows.append(
                pd.DataFrame(
                    {"source": source, "algo": algo, "env_label": label, "step": grid, "iqm": point, "lo": lo, "hi": hi,
                     "n_runs": len(runs)}
                )
            )  # fmt: skip
    columns = ["source", "algo", "env_label", "step", "iqm", "lo", "hi", "n_runs"]
    return pd.concat(rows, ignore_index=True)[columns] if rows else pd.DataFrame(columns=columns)


# ------------------------------------------------------------------------------------------------- figures


def _legend(fig: Figure, colors: dict[str, Any], algos: Sequence[str]) -> None:
    handles = [plt.Line2D([], [], color=colors[a], lw=2, label=a) for a in algos]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), frameon=False, bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.04 + 0.03 * ((len(handles) - 1) // 5), 1, 1))


def plot_learning_curves(frame: pd.DataFrame, envs: Sequence[str], colors: dict[str, Any], source: str = "eval") -> Figure:
    """One panel per env, one IQM line with its bootstrap band per algorithm (x: env steps)."""
    data = frame[frame["source"] == source]
    fig, axes = _new_figure(len(envs))
    ylabel = "evaluation return (IQM)" if source == "eval" else f"training return, last {TRAIN_WINDOW} episodes (IQM)"
    algos = sorted(set(data["algo"].astype(str)))
    for ax, env in zip(axes.flat, envs, strict=False):
        if not (data["env_label"] == env).any():
            ax.text(0.5, 0.5, "no ok runs", ha="center", va="center", transform=ax.transAxes, color="0.4")
        for algo, group in data[data["env_label"] == env].groupby("algo", sort=True):
            n = int(group["n_runs"].iloc[0])
            ax.plot(group["step"], group["iqm"], color=colors[algo], lw=1.6, label=f"{algo} ({n})")
            ax.fill_between(group["step"], group["lo"], group["hi"], color=colors[algo], alpha=0.2, lw=0)
        ax.set_title(env)
        ax.set_xlabel("env steps")
        ax.set_ylabel(ylabel)
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
        ax.grid(alpha=0.3)
    _legend(fig, colors, algos)
    return fig


def plot_final_scores(final: pd.DataFrame, envs: Sequence[str], colors: dict[str, Any]) -> Figure:
    """rliable-style interval estimates: per env (rows) and statistic (columns), one bar per algorithm."""
    stats = (("mean", "Mean"), ("median", "Median"), ("iqm", "IQM"))
    algos = sorted(set(final["algo"].astype(str)))
    height = 0.35 * len(algos) + 0.9
    with style():
        fig, axes = plt.subplots(len(envs), 3, figsize=(10.5, height * len(envs)), squeeze=False)
    for r, env in enumerate(envs):
        rows = final[final["env_label"] == env].set_index("algo")
        for c, (stat, title) in enumerate(stats):
            ax = axes[r, c]
            for y, algo in enumerate(algos):
                if algo not in rows.index or not np.isfinite(rows.loc[algo, stat]):
                    continue
                lo, hi, point = rows.loc[algo, f"{stat}_lo"], rows.loc[algo, f"{stat}_hi"], rows.loc[algo, stat]
                ax.barh(y, hi - lo, left=lo, height=0.6, color=colors[algo], alpha=0.75)
                ax.plot([point, point], [y - 0.3, y + 0.3], color="black", lw=1.5)
            ax.set_yticks(range(len(algos)), algos if c == 0 else [""] * len(algos))
            ax.set_ylim(-0.6, len(algos) - 0.4)
            ax.invert_yaxis()
            ax.grid(axis="x", alpha=0.3)
            ax.set_title(f"{env}: {title}" if c == 0 else title)
            if r == len(envs) - 1:
                ax.set_xlabel("final evaluation return")
    fig.tight_layout()
    return fig


def plot_aggregate(aggregate: pd.DataFrame, colors: dict[str, Any]) -> Figure:
    """rliable-style aggregate intervals: normalised IQM and optimality gap per algorithm."""
    algos = aggregate["algo"].astype(str).tolist()
    with style():
        fig, axes = plt.subplots(1, 2, figsize=(9, 0.35 * len(algos) + 1.2), squeeze=False)
    for ax, (stat, title) in zip(axes[0], (("iqm", "IQM (normalised)"), ("optimality_gap", "Optimality gap")), strict=True):
        for y, row in enumerate(aggregate.itertuples(index=False)):
            point, lo, hi = getattr(row, stat), getattr(row, f"{stat}_lo"), getattr(row, f"{stat}_hi")
            if np.isfinite(point):
                ax.barh(y, hi - lo, left=lo, height=0.6, color=colors[row.algo], alpha=0.75)
                ax.plot([point, point], [y - 0.3, y + 0.3], color="black", lw=1.5)
        ax.set_yticks(range(len(algos)), algos if stat == "iqm" else [""] * len(algos))
        ax.set_ylim(-0.6, len(algos) - 0.4)
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(title)
        ax.set_xlabel("normalised score")
    fig.tight_layout()
    return fig


def plot_performance_profile(profile: dict[str, Any], colors: dict[str, Any]) -> Figure:
    """Fraction of runs with normalised score above tau, per algorithm, with pointwise bootstrap bands."""
    with style():
        fig, ax = plt.subplots(figsize=(6.5, 4))
    taus = np.asarray(profile["taus"], dtype=float)
    for algo in sorted(profile["profiles"]):
        values = np.asarray(profile["profiles"][algo], dtype=float)
        if not np.isfinite(values).any():
            continue
        ax.plot(taus, values, color=colors[algo], lw=1.8, label=algo)
        ax.fill_between(taus, profile["lo"][algo], profile["hi"][algo], color=colors[algo], alpha=0.2, lw=0)
    ax.set_xlabel("normalised score tau")
    ax.set_ylabel("fraction of runs with score > tau")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(frameon=False)
    fig.tight_layout()
    return fig


def plot_poi(matrix: pd.DataFrame) -> Figure:
    """Heatmap of P(row algorithm > column algorithm)."""
    n = len(matrix)
    with style(), warnings.catch_warnings():
        # seaborn 0.13 calls Colormap.set_bad, which matplotlib 3.11 marks as pending deprecation.
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        fig, ax = plt.subplots(figsize=(1.0 * n + 2.4, 0.8 * n + 1.4))
        sns.heatmap(
            matrix, ax=ax, vmin=0, vmax=1, cmap="RdBu_r", center=0.5, annot=True, fmt=".2f", square=True,
            mask=matrix.isna(), cbar_kws={"label": "P(row > column)"}, linewidths=0.5,
        )  # fmt: skip
    ax.set_xlabel("Y")
    ax.set_ylabel("X")
    ax.tick_params(axis="y", labelrotation=0)
    ax.set_title("Probability of improvement P(X > Y)")
    fig.tight_layout()
    return fig


def plot_speed_memory(speed: pd.DataFrame, colors: dict[str, Any]) -> Figure:
    """Grouped bars per env: training throughput (with sd over runs) and peak memory, one bar per algorithm."""
    envs = list(dict.fromkeys(speed["env_label"].astype(str)))
    algos = sorted(set(speed["algo"].astype(str)))
    width = 0.8 / max(len(algos), 1)
    with style():
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), squeeze=False)
    panels = (("steps_per_second_mean", "steps_per_second_std", "env steps per second"),
              ("peak_rss_mb_mean", None, "peak RSS (MB)"))  # fmt: skip
    for ax, (column, err, label) in zip(axes[0], panels, strict=True):
        for i, algo in enumerate(algos):
            rows = speed[speed["algo"] == algo].set_index("env_label").reindex(envs)
            x = np.arange(len(envs)) + (i - (len(algos) - 1) / 2) * width
            yerr = rows[err].to_numpy(float) if err else None
            ax.bar(x, rows[column].to_numpy(float), width=width, color=colors[algo], label=algo, yerr=yerr, capsize=2)
        ax.set_xticks(np.arange(len(envs)), envs, rotation=15, ha="right")
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    _legend(fig, colors, algos)
    return fig
