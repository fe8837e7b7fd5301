"""The report's headline: who won where, first, before any inventory.

A reader opening a report wants the result before the bookkeeping (what was run, how many trials). The headline
is the first thing of ``index.html`` and ``report.md``:

* per env, each algorithm's final-return IQM with its 95% stratified bootstrap CI, taken unchanged from the
  statistics layer (:func:`suite.stats.tables.final_score_table`, rliable);
* the best IQM of each env in bold, and in bold too every algorithm whose CI overlaps the best's: the data do not
  separate them, so the verdict line calls them a tie rather than crowning the highest point;
* the aggregate figure (normalised IQM and optimality gap over envs);
* speed and memory in one line each (fastest/slowest, least/most per env, from
  :func:`suite.stats.tables.speed_memory_table`).

Overlap is judged on the closed intervals: ``hi >= best_lo`` (an algorithm's point is never above the best's, so
its interval cannot lie wholly above). A collapsed interval (one run) is its point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from suite.report.display import MISSING, Cell, DisplayTable, TableSpec, format_ci, format_number

HEADLINE_SPEC = TableSpec(
    "headline",
    "Final return by env (headline)",
    "Final evaluation return per env: interquartile mean (IQM) over ok runs [95% stratified bootstrap CI] (rliable). "
    "Bold: the best IQM of each env and every algorithm whose CI overlaps the best's (a tie).",
    (),
)

HEADLINE_COLUMNS = ["env_label", "algo", "n_ok", "iqm", "iqm_lo", "iqm_hi", "best", "bold", "tie"]


def headline_frame(final: pd.DataFrame) -> pd.DataFrame:
    """Best and ties per env from a final-score table.

    Args:
        final: :func:`suite.stats.tables.final_score_table` output (``algo, env_label, n_ok, iqm, iqm_lo, iqm_hi``).

    Returns:
        One row per (env_label, algo), envs and algorithms sorted: :data:`HEADLINE_COLUMNS`. ``best``: the highest
        finite IQM of its env (several when equal); ``bold``: best, or its CI overlaps a best's CI; ``tie``: bold in
        an env where more than one algorithm is bold. An env with one algorithm with ok runs has it best, no tie.
    """
    frame = final[["env_label", "algo", "n_ok", "iqm", "iqm_lo", "iqm_hi"]].copy()
    frame["env_label"], frame["algo"] = frame["env_label"].astype(str), frame["algo"].astype(str)
    frame = frame.sort_values(["env_label", "algo"], kind="stable").reset_index(drop=True)
    point = frame["iqm"].to_numpy(float)
    lo = np.where(np.isfinite(frame["iqm_lo"].to_numpy(float)), frame["iqm_lo"].to_numpy(float), point)
    hi = np.where(np.isfinite(frame["iqm_hi"].to_numpy(float)), frame["iqm_hi"].to_numpy(float), point)
    best = np.zeros(len(frame), dtype=bool)
    bold = np.zeros(len(frame), dtype=bool)
    tie = np.zeros(len(frame), dtype=bool)
    for _, idx in frame.groupby("env_label", sort=False).indices.items():
        finite = idx[np.isfinite(point[idx])]
        if finite.size == 0:
            continue
        top = finite[point[finite] == point[finite].max()]
        best[top] = True
        floor = lo[top].min()
        together = finite[hi[finite] >= floor]
        bold[together] = True
        if together.size > 1:
            tie[together] = True
    frame["best"], frame["bold"], frame["tie"] = best, bold, tie
    return frame[HEADLINE_COLUMNS]


def headline_table(frame: pd.DataFrame) -> DisplayTable:
    """One row per algorithm, one column per env, cells ``IQM [lo, hi]``, bold as :func:`headline_frame` says."""
    envs = list(dict.fromkeys(frame["env_label"]))
    algos = sorted(set(frame["algo"]))
    table = DisplayTable(spec=HEADLINE_SPEC, headers=["Algorithm", *envs], numeric=[False] + [True] * len(envs))
    cells = {
        (row.algo, row.env_label): Cell(format_ci(row.iqm, row.iqm_lo, row.iqm_hi), numeric=True, bold=bool(row.bold))
        for row in frame.itertuples(index=False)
    }
    for algo in algos:
        table.rows.append([Cell(algo)] + [cells.get((algo, env), Cell(MISSING, numeric=True)) for env in envs])
    return table


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def verdict_line(frame: pd.DataFrame) -> str:
    """``Best per env: A: ppo; B: tie between ppo (highest IQM) and a2c (CIs overlap); C: no ok runs.``"""
    parts = []
    for env, rows in frame.groupby("env_label", sort=False):
        winners = rows[rows["best"]]["algo"].tolist()
        tied = rows[rows["tie"] & ~rows["best"]]["algo"].tolist()
        if not winners:
            parts.append(f"{env}: no ok runs")
        elif tied or len(winners) > 1:
            parts.append(f"{env}: tie between {_join(winners)} (highest IQM) and {_join(tied)} (95% CIs overlap)"
                         if tied else f"{env}: tie between {_join(winners)} (equal IQM)")  # fmt: skip
        elif int((np.isfinite(rows["iqm"].to_numpy(float))).sum()) == 1:
            parts.append(f"{env}: {winners[0]} (the only algorithm with ok runs)")
        else:
            parts.append(f"{env}: {winners[0]}")
    return "Best per env: " + "; ".join(parts) + "."


def _extremes_line(speed: pd.DataFrame | None, column: str, lead: str, words: tuple[str, str], high_first: bool) -> str:
    """Per env: the algorithm with the highest and the lowest value of ``column`` (one line)."""
    if speed is None or column not in speed.columns:
        return f"{lead}: not recorded."
    parts = []
    for env, rows in speed.sort_values(["env_label", "algo"]).groupby("env_label", sort=False):
        values = rows[np.isfinite(rows[column].to_numpy(float))]
        if values.empty:
            continue
        ordered = values.sort_values(column, ascending=not high_first, kind="stable")
        first, last = ordered.iloc[0], ordered.iloc[-1]
        if len(ordered) == 1:
            parts.append(f"{env}: {first['algo']} {format_number(first[column])}")
        else:
            parts.append(
                f"{env}: {words[0]} {first['algo']} {format_number(first[column])}, "
                f"{words[1]} {last['algo']} {format_number(last[column])}"
            )
    return f"{lead}: {'; '.join(parts) if parts else 'not recorded'}."


def speed_line(speed: pd.DataFrame | None) -> str:
    """Fastest and slowest algorithm per env in env steps per second of training (mean over ok runs)."""
    return _extremes_line(speed, "steps_per_second_mean", "Speed (env steps per second of training, mean over ok runs)",
                          ("fastest", "slowest"), high_first=True)  # fmt: skip


def memory_line(speed: pd.DataFrame | None) -> str:
    """Least and most peak resident memory per env (MB, mean over ok runs)."""
    return _extremes_line(speed, "peak_rss_mb_mean", "Memory (peak resident MB of the trial process, mean over ok runs)",
                          ("least", "most"), high_first=False)  # fmt: skip


@dataclass
class Headline:
    """What the headline shows, in order."""

    frame: pd.DataFrame
    """:func:`headline_frame` (written to ``tables/headline.csv``)."""
    table: DisplayTable
    """Algorithms x envs, IQM [CI]."""
    verdict: str
    """Best per env, ties said as ties."""
    speed: str
    """One line."""
    memory: str
    """One line."""


def build_headline(final: pd.DataFrame, speed: pd.DataFrame | None) -> Headline:
    """The headline of a report from its final-score and speed/memory tables."""
    frame = headline_frame(final)
    return Headline(frame, headline_table(frame), verdict_line(frame), speed_line(speed), memory_line(speed))
