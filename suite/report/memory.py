"""Memory in reports: the per-phase section of a study report, and the page of ``suite profile memory``.

Both read the per-phase fields the memory probe adds to trial records (:mod:`suite.profile.memory`): the
resident peak of each phase, what it adds to the RSS it found, what it leaves, and in ``full`` mode the same for
tracked allocations. The figure that matters for an algorithm is the peak *above the trial's start* (the RSS
before its envs and networks were built): the process peak alone is dominated by the ~250 MB of imported
libraries, the same for every algorithm.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

import suite
from suite.profile.memory import MEASURES, PROFILE_ROWS, ProfilePlan, ProfileRun, format_ratio, run_measures
from suite.report import figures as fg
from suite.report.display import Cell, Column, DisplayTable, TableSpec, display_table, format_number
from suite.report.document import Document, FigureRef, Paragraph, Section

ALLOCATED_NOT_RESIDENT_MB = 16.0
"""An allocation growth this much above the resident growth is reported as "allocated, not (yet) resident"."""

PHASE_MEMORY_SPEC = TableSpec(
    "memory_phases",
    "Memory per phase",
    "Per env, algorithm and phase (setup = building envs, networks and buffers before the first phase; trial = "
    "the whole process), mean over ok runs, MB = 2**20 bytes: peak RSS; that peak above the trial's start (the "
    "RSS before setup, i.e. what the algorithm adds to the imported libraries); the phase's peak above the RSS it "
    "started from (max over its calls) and what it left resident (summed over its calls; anonymous = without "
    "the file-backed pages of shared libraries read in on first use); with "
    "--memory-profile full, the same for memray's tracked allocations (numpy and torch alike).",
    (Column("Env", "env_label", "text"), Column("Algorithm", "algo", "text"), Column("Phase", "row", "text"),
     Column("Runs", "n", "int"), Column("Peak RSS", "rss_peak_mb"), Column("Above start", "rss_above_start_mb"),
     Column("Peak over entry", "rss_peak_over_entry_mb"), Column("RSS growth", "rss_growth_mb"),
     Column("Anon. growth", "rss_anon_growth_mb"),
     Column("Alloc peak", "alloc_peak_mb"), Column("Alloc over entry", "alloc_peak_over_entry_mb"),
     Column("Alloc growth", "alloc_growth_mb")),
    group=None,
)  # fmt: skip

_MEASURE_NAMES = [m for m, _ in MEASURES]


# ------------------------------------------------------------------------------------------- study reports
def phase_memory_frame(trials: pd.DataFrame) -> pd.DataFrame:
    """Per (env_label, algo, row) the mean of every memory measure over ok trials that recorded it.

    Args:
        trials: Trials as :meth:`suite.store.ResultsStore.trials` returns them (``phases`` parsed).

    Returns:
        Columns ``env_label, algo, row, n`` and one per measure of :data:`suite.profile.memory.MEASURES` (NaN where
        no run has it, e.g. allocations without ``full`` mode); rows in :data:`PROFILE_ROWS` order. Empty when no
        trial recorded per-phase memory.
    """
    values: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    ok = trials[trials["status"] == "ok"]
    for rec in ok.to_dict("records"):
        for row, fields in run_measures(rec).items():
            if row == "trial" and not (rec.get("phases") or {}).get("setup"):
                continue  # no probe ran: the process peak alone is the speed/memory table's
            values.setdefault((str(rec["env_label"]), str(rec["algo"]), row), []).append(fields)
    order = {row: i for i, row in enumerate(PROFILE_ROWS)}
    out = []
    for (env, algo, row), runs in sorted(values.items(), key=lambda kv: (kv[0][0], kv[0][1], order[kv[0][2]])):
        entry: dict[str, Any] = {"env_label": env, "algo": algo, "row": row, "n": len(runs)}
        for measure in _MEASURE_NAMES:
            xs = [r[measure] for r in runs if measure in r]
            entry[measure] = float(np.mean(xs)) if xs else math.nan
        out.append(entry)
    return pd.DataFrame(out, columns=["env_label", "algo", "row", "n", *_MEASURE_NAMES])


def allocated_not_resident(frame: pd.DataFrame, label: str = "") -> list[str]:
    """Sentences for every row whose tracked allocations grew much more than its RSS (reserved, not yet written)."""
    out: list[str] = []
    if "alloc_growth_mb" not in frame or "rss_growth_mb" not in frame:
        return out
    for rec in frame.to_dict("records"):
        alloc, rss = rec.get("alloc_growth_mb"), rec.get("rss_anon_growth_mb", rec.get("rss_growth_mb"))
        if alloc is None or rss is None or not np.isfinite(alloc) or not np.isfinite(rss):
            continue
        if alloc - rss >= ALLOCATED_NOT_RESIDENT_MB:
            who = label or f"{rec['algo']} on {rec['env_label']}"
            out.append(
                f"{who}, {rec['row']}: {format_number(alloc)} MB allocated but only {format_number(rss)} MB became "
                "resident (memory reserved with np.zeros/calloc is resident only once written, e.g. a replay buffer "
                "as it fills; its growth then shows in later phases)."
            )
    return out


def plot_phase_memory(frame: pd.DataFrame, measure: str, label: str, groups: Sequence[str], colors: dict[str, Any],
                      *, group_column: str = "algo", spread: tuple[str, str] | None = None) -> Figure:  # fmt: skip
    """Grouped bars: one panel per env (or one panel), phases on x, one bar per group (algorithm or variant)."""
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(frame["env_label"].astype(str))) if "env_label" in frame else [""]
    fig, axes = fg._new_figure(len(envs), ncols=min(len(envs), 2), panel=(5.4, 3.2))
    width = 0.8 / max(len(groups), 1)
    for ax, env in zip(axes.flat, envs, strict=False):
        sub = frame if env == "" else frame[frame["env_label"].astype(str) == env]
        rows = [r for r in PROFILE_ROWS if r in set(sub["row"])]
        x = np.arange(len(rows))
        for i, group in enumerate(groups):
            g = sub[sub[group_column].astype(str) == group].set_index("row").reindex(rows)
            heights = g[measure].to_numpy(float)
            yerr = None
            if spread is not None:
                lo, hi = (g[c].to_numpy(float) for c in spread)
                yerr = np.vstack([np.clip(heights - lo, 0, None), np.clip(hi - heights, 0, None)])
            ax.bar(x + (i - (len(groups) - 1) / 2) * width, heights, width=width, color=colors[group], label=group,
                   yerr=yerr, capsize=2)  # fmt: skip
        ax.set_xticks(x, rows, rotation=15, ha="right")
        ax.set_ylabel(label)
        if env:
            ax.set_title(env)
        ax.grid(axis="y", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[g]) for g in groups]
    fig.legend(handles, list(groups), loc="upper center", ncol=min(len(groups), 4), frameon=False,
               bbox_to_anchor=(0.5, 1.02))  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return fig


def memory_section(trials: pd.DataFrame, table_dir: Path, fig_dir: Path) -> Section:
    """The study report's "Memory per phase" section (table, figure, allocated-vs-resident notes); writes
    ``tables/memory_phases.csv`` and the figures."""
    frame = phase_memory_frame(trials)
    section = Section("memory-phases", "Memory per phase")
    if frame.empty:
        section.blocks.append(
            Paragraph(
                "No per-phase memory recorded (trials run with --memory-profile off, or before the suite measured it).", "note"
            )
        )
        return section
    frame.to_csv(table_dir / "memory_phases.csv", index=False)
    algos = sorted(set(frame["algo"].astype(str)))
    colors = fg.algo_colors(algos)
    with fg.style():
        fig = plot_phase_memory(frame, "rss_above_start_mb", "peak RSS above the trial's start (MB)", algos, colors)
        png = fg.save_figure(fig, fig_dir, "memory_phases")
    section.blocks.append(
        FigureRef(
            "memory_phases",
            "Bars of peak resident memory above the trial's start per phase and algorithm",
            "Peak RSS above the trial's start (the RSS before its envs and networks were built) per phase, mean "
            "over ok runs; 'trial' is the whole process.",
            png,
        )
    )
    if frame["alloc_peak_mb"].notna().any():
        with fg.style():
            fig = plot_phase_memory(frame, "alloc_peak_mb", "peak tracked allocations (MB)", algos, colors)
            png = fg.save_figure(fig, fig_dir, "memory_phases_alloc")
        section.blocks.append(
            FigureRef(
                "memory_phases_alloc",
                "Bars of peak tracked allocations per phase and algorithm",
                "Peak of memray's tracked allocations (bytes allocated since the trial started and not yet "
                "freed) per phase, mean over runs recorded with --memory-profile full.",
                png,
            )
        )
    section.blocks += [Paragraph(PHASE_MEMORY_SPEC.caption, "caption"), display_table(frame, PHASE_MEMORY_SPEC)]
    section.blocks += [Paragraph(text) for text in allocated_not_resident(frame)]
    return section


# --------------------------------------------------------------------------------------- suite profile memory
PROFILE_SUMMARY_SPEC = TableSpec(
    "profile_memory",
    "Side by side",
    "Per phase and variant: median over repeats (MB = 2**20 bytes) and the ratio to the baseline in the same "
    "repeat, median [min, max] over repeats (0.70 = a 30% saving).",
    (Column("Phase", "row", "text"), Column("Variant", "variant", "text")),
    group=None,
)

RUNS_SPEC = TableSpec(
    "profile_runs",
    "Runs",
    "Every run, each in a fresh process; failed runs are listed and left out of the statistics.",
    (Column("Variant", "variant", "text"), Column("Repeat", "repeat", "int"), Column("Status", "status", "text"),
     Column("Wall time (s)", "wall_time_s"), Column("Start RSS (MB)", "baseline_rss_mb"),
     Column("Peak RSS (MB)", "peak_rss_mb"), Column("Flame graph", "flamegraph", "text"),
     Column("Error", "error", "text")),
    group=None,
)  # fmt: skip


def _side_by_side(summary: pd.DataFrame, plan: ProfilePlan, measures: Sequence[tuple[str, str]]) -> DisplayTable:
    headers = ["Phase", "Variant"]
    for _, title in measures:
        headers += [f"{title} (MB)", f"{title}: ratio"]
    table = DisplayTable(PROFILE_SUMMARY_SPEC, headers, [False, False] + [True] * (len(headers) - 2))
    index = {(r.variant, r.row, r.measure): r for r in summary.itertuples(index=False)}
    for row in PROFILE_ROWS:
        first = True
        for variant in plan.variants:
            cells = []
            for measure, _ in measures:
                e = index.get((variant.name, row, measure))
                cells += [Cell(format_number(e.median) if e else "n/a", True),
                          Cell(format_ratio(e.ratio_median, e.ratio_min, e.ratio_max) if e else "n/a", True)]  # fmt: skip
            if any(c.text != "n/a" for c in cells[::2]):
                table.rows.append([Cell(row if first else ""), Cell(variant.name), *cells])
                first = False
    return table


def runs_frame(runs: Sequence[ProfileRun]) -> pd.DataFrame:
    """One row per run and measured value: ``variant, repeat, status, row, measure, value``."""
    rows = [
        {"variant": r.variant, "repeat": r.repeat, "status": r.status, "row": row, "measure": m, "value": v}
        for r in runs
        for row, fields in r.measures.items()
        for m, v in fields.items()
    ]
    return pd.DataFrame(rows, columns=["variant", "repeat", "status", "row", "measure", "value"])


def _summary_for_plot(summary: pd.DataFrame, measure: str) -> pd.DataFrame:
    sub = summary[summary["measure"] == measure]
    return sub.rename(columns={"median": measure})


def write_profile_report(plan: ProfilePlan, runs: Sequence[ProfileRun], summary: pd.DataFrame, out_dir: Path) -> Path:
    """Write the profile's page: ``index.html`` (self-contained), ``report.md``, ``tables/*.csv``, ``figures/``.

    Returns:
        Path of ``index.html``.
    """
    from suite.provenance import collect_provenance
    from suite.report import html as html_out
    from suite.report import markdown as md_out

    table_dir, fig_dir = out_dir / "tables", out_dir / "figures"
    table_dir.mkdir(parents=True, exist_ok=True)
    fig_dir.mkdir(parents=True, exist_ok=True)
    summary.to_csv(table_dir / "profile_summary.csv", index=False)
    runs_frame(runs).to_csv(table_dir / "profile_runs.csv", index=False)

    has_alloc = bool((summary["measure"] == "alloc_peak_mb").any())
    measures = [("rss_peak_mb", "Peak RSS"), ("rss_above_start_mb", "Above start")]
    if has_alloc:
        measures.append(("alloc_peak_mb", "Alloc peak"))
    names = [v.name for v in plan.variants]
    colors = fg.algo_colors(names)
    blocks: list[Any] = []
    for measure, label in [("rss_above_start_mb", "peak RSS above the trial's start (MB)")] + (
        [("alloc_peak_mb", "peak tracked allocations (MB)")] if has_alloc else []
    ):
        frame = _summary_for_plot(summary, measure)
        if frame.empty:
            continue
        with fg.style():
            fig = plot_phase_memory(frame, measure, label, names, colors, group_column="variant", spread=("min", "max"))
            name = f"profile_{measure}"
            png = fg.save_figure(fig, fig_dir, name)
        blocks.append(FigureRef(name, f"Bars of {label} per phase and variant",
                                f"{label[0].upper()}{label[1:]} per phase and variant: median over repeats, error bars "
                                "min to max.", png))  # fmt: skip
    blocks += [Paragraph(PROFILE_SUMMARY_SPEC.caption, "caption"), _side_by_side(summary, plan, measures)]
    phase_means = summary[summary["measure"].isin(["alloc_growth_mb", "rss_growth_mb", "rss_anon_growth_mb"])].pivot_table(
        index=["variant", "row"], columns="measure", values="median"
    )
    notes = []
    for (variant, row), rec in phase_means.iterrows():
        frame = pd.DataFrame([{"algo": variant, "env_label": plan.env_label, "row": row, **rec.to_dict()}])
        notes += allocated_not_resident(frame, label=f"{variant}")
    blocks += [Paragraph(n) for n in notes]

    runs_table = pd.DataFrame([r.to_json() for r in runs])
    runs_table["repeat"] = runs_table["repeat"] + 1
    runs_table["flamegraph"] = [Path(p).name if p else "" for p in runs_table["flamegraph"]]
    prov = collect_provenance(1)
    changes = "; ".join(f"{v.name}: {json.dumps(v.changes)}" for v in plan.variants if v.changes) or "none"
    summary_text = [
        f"{plan.algo} on {plan.env_label}: every variant trained {plan.steps:,} env steps from seed {plan.seed} and "
        f"evaluated once at the end ({plan.n_eval_episodes} episodes), {plan.repeats} time(s), each run in a fresh "
        f"process, variants interleaved; memory mode {plan.mode}.",
        "Baseline: the per-env configuration"
        + (" with " + ", ".join(f"{k}={v}" for k, v in sorted(plan.baseline_overrides.items())) if plan.baseline_overrides
           else "")
        + f". Variants: {changes}.",
        f"Machine: {prov.get('cpu_model')}, {prov.get('cpu_count')} CPUs, {prov.get('platform')}; memory figures do "
        "not depend on other processes, times do (the machine may have been shared).",
        *plan.notes,
    ]  # fmt: skip
    sections = [
        Section("profile", "Memory per phase, side by side", blocks),
        Section("runs", "Runs", [Paragraph(RUNS_SPEC.caption, "caption"), display_table(runs_table, RUNS_SPEC)]),
        Section("files", "Files", [Paragraph(
            "Next to this page: report.md, tables/profile_summary.csv (every measure with its spread and ratios), "
            "tables/profile_runs.csv (every run's values), runs.jsonl (the raw runs; the same command resumes from "
            "it), figures/*.png|svg; flame graphs (memray's HTML) where --flamegraph was given.")]),
    ]  # fmt: skip
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    doc = Document(f"Memory profile: {plan.algo} on {plan.env_label}", summary_text, sections,
                   f"Generated by rl-suite {suite.__version__} (suite profile memory) on {now}.")  # fmt: skip
    (out_dir / "report.md").write_text(md_out.render_document(doc), encoding="utf-8")
    index = out_dir / "index.html"
    index.write_text(html_out.render_document(doc), encoding="utf-8")
    return index
