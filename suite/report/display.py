"""How the statistics tables are shown: which columns, how numbers are written, which cell is best.

The statistics layer (:mod:`suite.stats.tables`) returns full-precision DataFrames; those go to
``tables/*.csv`` unchanged. The HTML, Markdown and LaTeX renderers all show the same *display tables*
built here, so a number reads the same in every format: :func:`format_number` writes it, a missing value is
``n/a``, an infinite one ("never reached the threshold") is ``not reached``, and a confidence interval is
``point [lo, hi]`` (bootstrap percentile intervals are asymmetric, so a single ``±`` would misreport them).

Best per column: for columns with a direction (higher or lower is better) the best point value is marked
bold, compared within each environment for per-(algorithm, env) tables and over all rows otherwise, and only
when at least two rows have a finite value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

Kind = Literal["text", "int", "num", "ci", "ratio", "share", "p", "bool", "key"]
Better = Literal["higher", "lower"] | None

MISSING = "n/a"
"""Cell text of a missing value (NaN, None, <NA>): a statistic that could not be computed."""

NOT_REACHED = "not reached"
"""Cell text of +inf: the runs did not reach the threshold (the statistics layer's "never")."""


def _is_missing(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _decimals(x: float) -> int:
    """Decimals shown for a number of this magnitude (see :func:`format_number`)."""
    a = abs(x)
    if a >= 1000 or a == 0:
        return 0
    if a >= 100:
        return 1
    if a >= 1:
        return 2
    return 3


def format_number(value: Any, decimals: int | None = None) -> str:
    """A number as shown in every report format.

    Precision follows magnitude: ``12,345`` (no decimals from 1,000), ``412.3``, ``2.43``, ``0.125``, and
    scientific notation below 0.001. ``+inf`` is ``not reached``; NaN/None is ``n/a``.

    Args:
        value: A float, int, numpy scalar, None or NA.
        decimals: Fixed number of decimals instead of the magnitude rule (used for CI bounds, which take
            their point estimate's precision).

    Returns:
        The cell text.
    """
    if _is_missing(value):
        return MISSING
    x = float(value)
    if math.isinf(x):
        return NOT_REACHED if x > 0 else "-inf"
    if x == 0:
        return "0"
    if decimals is None:
        if abs(x) < 0.001:
            return f"{x:.2e}"
        decimals = _decimals(x)
    return f"{x:,.{decimals}f}"


def format_ci(point: Any, lo: Any, hi: Any) -> str:
    """``point [lo, hi]``, the bounds with the point's precision; just ``n/a`` when the point is missing."""
    if _is_missing(point):
        return MISSING
    x = float(point)
    if math.isinf(x) or abs(x) < 0.001:
        return f"{format_number(point)} [{format_number(lo)}, {format_number(hi)}]"
    decimals = _decimals(x)
    return f"{format_number(point, decimals)} [{format_number(lo, decimals)}, {format_number(hi, decimals)}]"


def format_p(value: Any) -> str:
    """A p-value: three decimals, scientific below 0.001."""
    if _is_missing(value):
        return MISSING
    x = float(value)
    return f"{x:.1e}" if 0 < x < 0.001 else f"{x:.3f}"


def format_share(value: Any) -> str:
    """A fraction in [0, 1] as a whole percentage (``37%``)."""
    if _is_missing(value) or math.isinf(float(value)):
        return MISSING
    return f"{100 * float(value):.0f}%"


def format_int(value: Any) -> str:
    """An integer count; ``n/a`` when missing."""
    if _is_missing(value):
        return MISSING
    x = float(value)
    return NOT_REACHED if math.isinf(x) else str(int(x))


@dataclass(frozen=True)
class Column:
    """One shown column of a display table."""

    header: str
    """Column title."""
    source: str | tuple[str, ...]
    """Column of the statistics frame; ``(point, lo, hi)`` for ``ci``, ``(numerator, denominator)`` for ``ratio``."""
    kind: Kind = "num"
    """How the value is written (see the ``format_*`` functions)."""
    better: Better = None
    """Direction for bolding the best cell; None = no best."""

    @property
    def point(self) -> str:
        """The frame column that holds the compared (point) value."""
        return self.source if isinstance(self.source, str) else self.source[0]

    @property
    def numeric(self) -> bool:
        """Whether the cell is a number (right-aligned)."""
        return self.kind not in ("text", "key", "bool")


@dataclass(frozen=True)
class TableSpec:
    """Which columns of a statistics frame a report shows, under which title."""

    name: str
    """File stem (``tables/<name>.csv`` / ``.tex``) and HTML anchor."""
    title: str
    """Section title."""
    caption: str
    """One or two sentences: what the numbers are and over what."""
    columns: tuple[Column, ...]
    """Shown columns, in order."""
    group: str | None = "env_label"
    """Frame column whose groups the best cell is chosen within; None = over all rows."""


@dataclass
class Cell:
    """A formatted cell."""

    text: str
    """Display text (not escaped: each renderer escapes for its format)."""
    numeric: bool = False
    """Right-align."""
    bold: bool = False
    """Best in its column (within its group)."""


@dataclass
class DisplayTable:
    """A table ready to render: headers and formatted rows."""

    spec: TableSpec
    """What it shows."""
    headers: list[str]
    """Column titles."""
    numeric: list[bool]
    """Per column: right-align."""
    rows: list[list[Cell]] = field(default_factory=list)
    """Formatted rows."""


def format_cell(row: pd.Series | dict[str, Any], column: Column) -> str:
    """The text of one cell of ``column`` for one frame row."""
    src = column.source
    if column.kind == "ci":
        assert isinstance(src, tuple)
        return format_ci(row[src[0]], row[src[1]], row[src[2]])
    if column.kind == "ratio":
        assert isinstance(src, tuple)
        return f"{format_int(row[src[0]])}/{format_int(row[src[1]])}"
    value = row[column.point]
    if column.kind == "int":
        return format_int(value)
    if column.kind == "share":
        return format_share(value)
    if column.kind == "p":
        return format_p(value)
    if column.kind == "bool":
        return MISSING if _is_missing(value) else ("yes" if bool(value) else "no")
    if column.kind == "key":
        return MISSING if _is_missing(value) else str(value)[:12]
    if column.kind == "text":
        return MISSING if _is_missing(value) else str(value)
    return format_number(value)


def _best_mask(frame: pd.DataFrame, column: Column, group: str | None) -> np.ndarray:
    """Rows holding the best finite point value of ``column`` within their group (ties all marked)."""
    mask = np.zeros(len(frame), dtype=bool)
    if column.better is None or frame.empty:
        return mask
    values = pd.to_numeric(frame[column.point], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    groups = frame[group].astype(str).to_numpy() if group is not None and group in frame.columns else np.zeros(len(frame))
    for g in pd.unique(groups):
        idx = np.flatnonzero(groups == g)
        finite = idx[np.isfinite(values[idx])]
        if finite.size < 2:
            continue
        best = values[finite].max() if column.better == "higher" else values[finite].min()
        mask[finite[values[finite] == best]] = True
    return mask


def display_table(frame: pd.DataFrame, spec: TableSpec) -> DisplayTable:
    """Format ``frame`` (a statistics table) as ``spec`` says.

    Args:
        frame: The statistics frame; must have every column ``spec`` names.
        spec: Columns, titles, grouping.

    Returns:
        The display table, rows in the frame's order.
    """
    table = DisplayTable(spec=spec, headers=[c.header for c in spec.columns], numeric=[c.numeric for c in spec.columns])
    best = {c.header: _best_mask(frame, c, spec.group) for c in spec.columns}
    for i, (_, row) in enumerate(frame.iterrows()):
        table.rows.append([Cell(format_cell(row, c), numeric=c.numeric, bold=bool(best[c.header][i])) for c in spec.columns])
    return table


def pivot_table(
    frame: pd.DataFrame, spec: TableSpec, value: tuple[str, str, str], *, better: Better = "higher"
) -> DisplayTable:
    """A paper-style table: one row per algorithm, one column per environment, cells ``point [lo, hi]``.

    Args:
        frame: A per-(algo, env_label) statistics frame.
        spec: Name, title and caption (its columns are ignored).
        value: ``(point, lo, hi)`` columns of ``frame``.
        better: Direction for the bold best cell of each environment column.

    Returns:
        The display table.
    """
    envs = list(dict.fromkeys(frame["env_label"].astype(str)))
    algos = sorted(set(frame["algo"].astype(str)))
    table = DisplayTable(spec=spec, headers=["Algorithm", *envs], numeric=[False] + [True] * len(envs))
    cells: dict[tuple[str, str], Cell] = {}
    for env in envs:
        rows = frame[frame["env_label"].astype(str) == env]
        mask = _best_mask(rows, Column(env, value, "ci", better), None)
        for (_, row), bold in zip(rows.iterrows(), mask, strict=True):
            cells[(str(row["algo"]), env)] = Cell(format_ci(*(row[c] for c in value)), numeric=True, bold=bool(bold))
    for algo in algos:
        table.rows.append([Cell(algo)] + [cells.get((algo, env), Cell(MISSING, numeric=True)) for env in envs])
    return table


def _runs(header: str = "Runs ok/total") -> Column:
    return Column(header, ("n_ok", "n_total"), "ratio")


ENV_ALGO = (Column("Env", "env_label", "text"), Column("Algorithm", "algo", "text"))

STATUS_SPEC = TableSpec(
    "status",
    "Trials by status",
    "Every recorded trial of the study: statistics use the ok trials only; failed and diverged ones are counted "
    "here and listed under Failures.",
    (*ENV_ALGO, Column("Total", "n_total", "int"), Column("Ok", "n_ok", "int"),
     Column("Failed", "n_failed", "int"), Column("Diverged", "n_diverged", "int")),
)  # fmt: skip

FINAL_SPEC = TableSpec(
    "final_scores",
    "Final scores (raw return)",
    "Mean evaluation return of the final policy per run; mean, median and IQM over ok runs with 95% stratified "
    "bootstrap confidence intervals.",
    (*ENV_ALGO, _runs(),
     Column("Mean [95% CI]", ("mean", "mean_lo", "mean_hi"), "ci", "higher"),
     Column("Median [95% CI]", ("median", "median_lo", "median_hi"), "ci", "higher"),
     Column("IQM [95% CI]", ("iqm", "iqm_lo", "iqm_hi"), "ci", "higher")),
)  # fmt: skip

FINAL_NORM_SPEC = TableSpec(
    "final_scores_normalised",
    "Final scores (normalised)",
    "The same runs in normalised score: 0 = uniformly random policy, 1 = reference agent (see Reference numbers).",
    (*ENV_ALGO, _runs(),
     Column("Mean [95% CI]", ("norm_mean", "norm_mean_lo", "norm_mean_hi"), "ci", "higher"),
     Column("Median [95% CI]", ("norm_median", "norm_median_lo", "norm_median_hi"), "ci", "higher"),
     Column("IQM [95% CI]", ("norm_iqm", "norm_iqm_lo", "norm_iqm_hi"), "ci", "higher"),
     Column("Random", "random_score"), Column("Reference", "reference_score")),
)  # fmt: skip

FINAL_MEAN_PIVOT = TableSpec(
    "final_mean_by_env",
    "Final mean return by environment",
    "Mean final evaluation return over ok runs [95% bootstrap CI]; best per environment in bold.",
    (),
)

FINAL_IQM_PIVOT = TableSpec(
    "final_iqm_by_env",
    "Final IQM return by environment",
    "Interquartile mean of the final evaluation return over ok runs [95% bootstrap CI]; best per environment in bold.",
    (),
)

AGGREGATE_SPEC = TableSpec(
    "aggregate",
    "Aggregate over environments (normalised)",
    "IQM and optimality gap (gamma = 1) of normalised final scores pooled over the envs listed, with 95% stratified "
    "bootstrap CIs (Agarwal et al. 2021); compare algorithms only over the same envs.",
    (Column("Algorithm", "algo", "text"), Column("Envs", "n_envs", "int"), _runs(),
     Column("IQM [95% CI]", ("iqm", "iqm_lo", "iqm_hi"), "ci", "higher"),
     Column("Optimality gap [95% CI]", ("optimality_gap", "optimality_gap_lo", "optimality_gap_hi"), "ci", "lower"),
     Column("Env labels", "envs", "text")),
    group=None,
)  # fmt: skip

POI_SPEC = TableSpec(
    "probability_of_improvement",
    "Probability of improvement",
    "P(X > Y): probability that a run of X scores higher than a run of Y on the same env, averaged over the envs "
    "both ran, with 95% stratified bootstrap CIs; P(Y > X) = 1 - P(X > Y).",
    (Column("X", "algo_x", "text"), Column("Y", "algo_y", "text"), Column("Envs", "n_envs", "int"),
     Column("P(X > Y) [95% CI]", ("prob", "prob_lo", "prob_hi"), "ci")),
    group=None,
)  # fmt: skip

SIGNIFICANCE_SPEC = TableSpec(
    "significance",
    "Pairwise tests",
    "Welch's t-test and Mann-Whitney U on final returns per env, p-values Holm-corrected over the whole table; "
    "Mann-Whitney p-values are exact (permutation distribution given ties) up to 60 runs in a pair; "
    "seeds needed: runs per algorithm for Welch's test to detect the observed difference at alpha 0.05 with "
    "power 0.8 (Colas et al. 2018); 'undefined' when both algorithms' runs have zero spread (the effect size is "
    "undefined), '> 10,000' when no number reaches the power.",
    (Column("Env", "env_label", "text"), Column("A", "algo_a", "text"), Column("B", "algo_b", "text"),
     Column("n A", "n_a", "int"), Column("n B", "n_b", "int"), Column("Mean A", "mean_a"),
     Column("Mean B", "mean_b"), Column("A - B", "diff"), Column("Cohen's d", "cohens_d"),
     Column("Welch p (Holm)", "welch_p_holm", "p"), Column("MWU p (Holm)", "mwu_p_holm", "p"),
     Column("Significant (Welch)", "welch_reject", "bool"), Column("Seeds needed", "seeds_needed_text", "text")),
)  # fmt: skip

EFFICIENCY_SPEC = TableSpec(
    "sample_efficiency",
    "Sample efficiency",
    "Env steps until the mean evaluation return first reached the env's threshold (median over ok runs, a run "
    "that never reached it counting as infinitely slow: 'not reached' when fewer than half did; mean over the "
    "runs that reached it) and the area under the evaluation curve (average return over training).",
    (*ENV_ALGO, Column("Threshold", "threshold"), Column("Reached", ("n_reached", "n_ok"), "ratio"),
     Column("Steps to threshold (median)", "steps_to_threshold_median", "num", "lower"),
     Column("Steps to threshold (mean, reached)", "steps_to_threshold_mean", "num", "lower"),
     Column("AUC (mean)", "auc_mean", "num", "higher"), Column("AUC sd", "auc_std"),
     Column("AUC normalised", "auc_norm_mean", "num", "higher")),
)  # fmt: skip

STABILITY_SPEC = TableSpec(
    "stability",
    "Stability and reliability",
    "Chan et al. 2020 on evaluation curves (median over ok runs): dispersion across time (IQR of detrended "
    "returns, lower is better), short-term risk (CVaR of step-to-step changes, higher is better), long-term "
    "risk (CVaR of drawdowns, lower is better); across runs: dispersion (IQR, lower is better) and risk (CVaR of "
    "final returns, higher is better). Train dispersion is over training episodes: 'Training curve' says which ("
    "'capped at N steps' = episodes cut at the algorithm's own step cap are left out). Update traces: mean over runs of "
    "each run's mean.",
    (*ENV_ALGO, _runs(),
     Column("Dispersion (time)", "dispersion_across_time", "num", "lower"),
     Column("Short-term risk", "short_term_risk", "num", "higher"),
     Column("Long-term risk", "long_term_risk", "num", "lower"),
     Column("Dispersion (runs)", "dispersion_across_runs", "num", "lower"),
     Column("Risk (runs)", "risk_across_runs", "num", "higher"),
     Column("Train dispersion (time)", "train_dispersion_across_time", "num", "lower"),
     Column("Training curve", "train_curve", "text"),
     Column("Grad variance", "grad_var_mean"), Column("Approx. KL", "approx_kl_mean"),
     Column("Entropy", "entropy_mean")),
)  # fmt: skip

SPEED_SPEC = TableSpec(
    "speed_memory",
    "Speed and memory",
    "Training throughput (env steps per second of rollout + update time), wall time per trial and its split, "
    "peak resident memory of the trial process, and wall time until the threshold was first reached (median "
    "over ok runs).",
    (*ENV_ALGO, _runs(),
     Column("Steps/s", "steps_per_second_mean", "num", "higher"), Column("Steps/s sd", "steps_per_second_std"),
     Column("Wall time (s)", "wall_time_s_mean", "num", "lower"), Column("Rollout", "rollout_share", "share"),
     Column("Update", "update_share", "share"), Column("Other", "other_share", "share"),
     Column("Peak RSS (MB)", "peak_rss_mb_mean", "num", "lower"), Column("Peak RSS max (MB)", "peak_rss_mb_max"),
     Column("Time to threshold (s)", "wall_time_to_threshold_s_median", "num", "lower")),
)  # fmt: skip

REFERENCE_SPEC = TableSpec(
    "env_references",
    "Reference numbers",
    "Per-env sample-efficiency threshold and the random and reference scores that define the normalised score "
    "(suite/data/envs.toml, with sources).",
    (Column("Env", "env_label", "text"), Column("Threshold", "threshold"), Column("Random", "random_score"),
     Column("Reference", "reference_score"), Column("Source", "source", "text")),
    group=None,
)  # fmt: skip

FAILURES_SPEC = TableSpec(
    "failures",
    "Failures",
    "Failed and diverged trials, with their error; they are excluded from every statistic and counted in each table.",
    (Column("Algorithm", "algo", "text"), Column("Env", "env_label", "text"), Column("Seed", "seed", "int"),
     Column("Status", "status", "text"), Column("Error", "error", "text"), Column("Trial key", "key", "key")),
    group=None,
)  # fmt: skip

SUMMARY_SPECS: tuple[TableSpec, ...] = (
    STATUS_SPEC,
    FINAL_SPEC,
    FINAL_NORM_SPEC,
    AGGREGATE_SPEC,
    POI_SPEC,
    SIGNIFICANCE_SPEC,
    EFFICIENCY_SPEC,
    STABILITY_SPEC,
    SPEED_SPEC,
    REFERENCE_SPEC,
    FAILURES_SPEC,
)
"""Every long-format table, in report order; keyed by ``spec.name`` in the report's table dict."""


def spec_by_name(name: str) -> TableSpec:
    """The display spec of the table called ``name``."""
    for spec in (*SUMMARY_SPECS, FINAL_MEAN_PIVOT, FINAL_IQM_PIVOT):
        if spec.name == name:
            return spec
    raise KeyError(name)


def shown_rows(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """Rows a display table shows; the CSV keeps all (POI: only X < Y, the mirrored row is 1 minus it)."""
    if name == POI_SPEC.name and not frame.empty:
        return frame[frame["algo_x"].astype(str) < frame["algo_y"].astype(str)]
    return frame


def display_tables(frames: dict[str, pd.DataFrame]) -> dict[str, DisplayTable]:
    """Display tables for every computed statistics frame (missing ones are skipped)."""
    out: dict[str, DisplayTable] = {}
    for spec in SUMMARY_SPECS:
        if spec.name in frames:
            frame = shown_rows(spec.name, frames[spec.name])
            if spec.group == "env_label" and {"env_label", "algo"} <= set(frame.columns):
                # Rows of one env together: the best cell is chosen within each env.
                frame = frame.sort_values(["env_label", "algo"], kind="stable")
            out[spec.name] = display_table(frame, spec)
    final = frames.get(FINAL_SPEC.name)
    if final is not None:
        out[FINAL_MEAN_PIVOT.name] = pivot_table(final, FINAL_MEAN_PIVOT, ("mean", "mean_lo", "mean_hi"))
        out[FINAL_IQM_PIVOT.name] = pivot_table(final, FINAL_IQM_PIVOT, ("iqm", "iqm_lo", "iqm_hi"))
    return out


def describe_values(values: Sequence[Any]) -> str:
    """Distinct values with their counts, most common first: ``a (12), b (3)``; one value is shown bare."""
    counts = pd.Series([MISSING if _is_missing(v) else str(v) for v in values], dtype=object).value_counts()
    if len(counts) == 1:
        return str(counts.index[0])
    return ", ".join(f"{value} ({n})" for value, n in counts.items())
