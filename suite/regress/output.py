"""The gate's verdicts as a terminal table and as ``regression.md``, ``regression.html`` and CSV files.

Files written into the run folder (beside ``report/``, the normal study report of both revisions)::

    regression.html     self-contained page: verdicts with the rule, returns, speed, memory, notes, runs
    regression.md       the same in Markdown
    verdicts.csv        one row per (algorithm, env) at full precision
    measures.csv        one row per (algorithm, env, measure): every ratio with its interval and verdict
    runs.csv            one row per trial, side and repeat (the runs frame the decisions came from)

The HTML and Markdown are rendered by the report's own renderers (:mod:`suite.report.html`,
:mod:`suite.report.markdown`), so they read like every other suite report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

import suite
from suite.regress.compare import SPEEDS, WALL_SPEED, GroupResult, RatioResult, Thresholds, rule_text
from suite.regress.records import CPU_SPEED, UNSTARVED_SPEED
from suite.report import html as html_out
from suite.report import markdown as md_out
from suite.report.display import Column, DisplayTable, TableSpec, display_table, format_number
from suite.report.document import Document, Failure, FigureRef, Paragraph, Section


@dataclass
class Context:
    """What was compared, how and where: the header of every output."""

    base: str
    """BASE as described to the user (``main (3f2a...)`` or ``reference <commit>``)."""
    head: str
    """HEAD likewise."""
    tiers_by_study: Mapping[str, str]
    """Budget tier of each study of the run."""
    seeds_by_study: Mapping[str, Sequence[int]]
    """Seeds of each study."""
    repeats: int
    mode: str
    """``interleaved`` (BASE and HEAD alternated), ``concurrent`` (side by side) or ``reference`` (HEAD against a
    recorded run)."""
    machine: Mapping[str, Any]
    slots: Sequence[Mapping[str, Any]]
    """The run log: side, repeat, seconds, load at start and end, for every slot run now."""
    notes: Sequence[str]
    """Parts of the study left out, machine mismatch, ..."""
    run_dir: Path

    @property
    def speed_gated(self) -> bool:
        return self.mode != "reference"


def _ratio_text(r: RatioResult) -> str:
    """``0.812 [0.771, 0.855]``: three decimals, so a ratio reads the same in every row."""
    if not math.isfinite(r.ratio):
        return "n/a"
    if not math.isfinite(r.lo):
        return f"{r.ratio:.3f} (no interval: {r.repeats} repeat)"
    return f"{r.ratio:.3f} [{r.lo:.3f}, {r.hi:.3f}]"


def _ratio_cell(r: RatioResult | None) -> str:
    return "n/a" if r is None else f"{_ratio_text(r)} {r.verdict}"


def _speed_cell(g: GroupResult) -> str:
    """``0.587 [0.427, 0.808] info; cpu 0.979 [...] same; unstarved wall 0.981 [...] same``: the wall clock first,
    unlabelled, then the other clocks the records have; the verdict after each (``info``: shown, not gating)."""
    if not g.speed:
        return "n/a"
    cells = [_ratio_cell(s) if s.measure == WALL_SPEED else f"{SPEEDS[s.measure]} {_ratio_cell(s)}"
             for s in g.speed if s.measure == WALL_SPEED or math.isfinite(s.ratio)]  # fmt: skip
    return "; ".join(cells)


def _speed(g: GroupResult, measure: str) -> RatioResult | None:
    return next((s for s in g.speed if s.measure == measure), None)


def _memory_cell(g: GroupResult) -> str:
    if not g.memory:
        return "n/a"
    text = _ratio_cell(g.memory[0])
    worst = [m for m in g.memory[1:] if m.verdict == "hungrier"]
    if worst:
        text += "; " + ", ".join(f"{_measure_label(m.measure)} {_ratio_text(m)} hungrier" for m in worst)
    return text


def _returns_cell(g: GroupResult) -> str:
    if g.returns == "identical":
        return f"identical ({g.identical_seeds}/{len(g.seeds)} seeds)"
    if g.returns in ("worse", "better", "same", "differs"):
        p = g.p_final if math.isfinite(g.p_final) else g.p_auc
        return f"{g.returns} (final {format_number(g.final_base)} -> {format_number(g.final_head)}" + (
            f", p={p:.2g})" if math.isfinite(p) else ")")  # fmt: skip
    return f"{g.returns}: {g.returns_detail}"


def _measure_label(measure: str) -> str:
    """``mem:rollout:rss_peak_mb`` -> ``rollout rss_peak_mb``; ``time:update`` -> ``update``."""
    return " ".join(measure.split(":")[1:]) if ":" in measure else measure


def verdict_frame(results: Sequence[GroupResult]) -> pd.DataFrame:
    """One row per group at full precision (``verdicts.csv``) plus the display cells."""
    rows = []
    for g in results:
        sp, cpu, unstarved = _speed(g, WALL_SPEED), _speed(g, CPU_SPEED), _speed(g, UNSTARVED_SPEED)
        mem = g.memory[0] if g.memory else None
        rows.append({
            "algo": g.algo, "env_label": g.env_label, "env_id": g.env_id, "budget": g.budget,
            "seeds": " ".join(map(str, g.seeds)),
            "returns": g.returns, "returns_detail": g.returns_detail, "identical_seeds": g.identical_seeds,
            "final_base": g.final_base, "final_head": g.final_head, "auc_base": g.auc_base, "auc_head": g.auc_head,
            "p_final": g.p_final, "p_auc": g.p_auc,
            "speed_ratio": sp.ratio if sp else math.nan, "speed_lo": sp.lo if sp else math.nan,
            "speed_hi": sp.hi if sp else math.nan, "speed_pairs": sp.pairs if sp else 0,
            "speed_repeats": sp.repeats if sp else 0,
            "steps_per_second_base": sp.base_mean if sp else math.nan,
            "steps_per_second_head": sp.head_mean if sp else math.nan,
            "cpu_speed_ratio": cpu.ratio if cpu else math.nan, "cpu_speed_lo": cpu.lo if cpu else math.nan,
            "cpu_speed_hi": cpu.hi if cpu else math.nan, "cpu_speed_verdict": cpu.verdict if cpu else "n/a",
            "unstarved_speed_ratio": unstarved.ratio if unstarved else math.nan,
            "unstarved_speed_lo": unstarved.lo if unstarved else math.nan,
            "unstarved_speed_hi": unstarved.hi if unstarved else math.nan,
            "unstarved_speed_verdict": unstarved.verdict if unstarved else "n/a",
            "wall_speed_verdict": sp.verdict if sp else "n/a",
            "speed_verdict": g.speed_verdict, "speed_rule": g.speed_rule,
            "memory_ratio": mem.ratio if mem else math.nan, "memory_lo": mem.lo if mem else math.nan,
            "memory_hi": mem.hi if mem else math.nan, "peak_rss_mb_base": mem.base_mean if mem else math.nan,
            "peak_rss_mb_head": mem.head_mean if mem else math.nan, "memory_verdict": g.memory_verdict,
            "verdict": g.verdict, "notes": "; ".join(g.notes),
            "returns_cell": _returns_cell(g), "speed_cell": _speed_cell(g), "memory_cell": _memory_cell(g),
        })  # fmt: skip
    return pd.DataFrame(rows)


def measures_frame(results: Sequence[GroupResult]) -> pd.DataFrame:
    """Every ratio of every group (``measures.csv``): speed, memory fields, phase times."""
    rows = []
    for g in results:
        for m in g.speed + g.memory + g.phase_times:
            rows.append({"algo": g.algo, "env_label": g.env_label, "budget": g.budget, "measure": m.measure,
                         "ratio": m.ratio, "lo": m.lo, "hi": m.hi, "repeats": m.repeats, "pairs": m.pairs,
                         "base_mean": m.base_mean, "head_mean": m.head_mean, "verdict": m.verdict})  # fmt: skip
    return pd.DataFrame(rows, columns=["algo", "env_label", "budget", "measure", "ratio", "lo", "hi", "repeats", "pairs",
                                       "base_mean", "head_mean", "verdict"])  # fmt: skip


def terminal_table(results: Sequence[GroupResult]) -> str:
    """The verdict table as aligned text."""
    frame = verdict_frame(results)
    header = ("algo", "env", "returns", "speed HEAD/BASE steps/s [CI]", "memory HEAD/BASE peak RSS [CI]", "verdict")
    rows = [header] + [
        (r.algo, r.env_label, r.returns_cell, r.speed_cell, r.memory_cell, r.verdict) for r in frame.itertuples()
    ]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


VERDICT_SPEC = TableSpec(
    "verdicts", "Verdicts",
    "One comparison per (algorithm, env): returns (identical, or a one-sided Welch test with a margin), training "
    "speed and peak memory as HEAD/BASE ratios with confidence intervals; the rule is below the table.",
    (Column("Algorithm", "algo", "text"), Column("Env", "env_label", "text"), Column("Returns", "returns_cell", "text"),
     Column("Speed HEAD/BASE steps/s [CI]", "speed_cell", "text"),
     Column("Memory HEAD/BASE peak RSS [CI]", "memory_cell", "text"), Column("Verdict", "verdict", "text")),
    group=None,
)  # fmt: skip

RETURNS_SPEC = TableSpec(
    "returns", "Returns",
    "Final evaluation return and evaluation-curve AUC (raw units, mean over ok seeds) of each side; p: one-sided "
    "Welch test in the direction of the change; identical seeds: equal outcome and parameter hashes.",
    (Column("Algorithm", "algo", "text"), Column("Env", "env_label", "text"),
     Column("Identical seeds", "identical_seeds", "int"),
     Column("Final BASE", "final_base"), Column("Final HEAD", "final_head"), Column("AUC BASE", "auc_base"),
     Column("AUC HEAD", "auc_head"), Column("p (final)", "p_final", "p"), Column("p (AUC)", "p_auc", "p"),
     Column("Verdict", "returns", "text"), Column("Detail", "returns_detail", "text"), Column("Notes", "notes", "text")),
    group=None,
)  # fmt: skip

MEASURES_SPEC = TableSpec(
    "measures", "{title}",
    "{caption}",
    (Column("Algorithm", "algo", "text"), Column("Env", "env_label", "text"), Column("Measure", "label", "text"),
     Column("BASE", "base_mean"), Column("HEAD", "head_mean"), Column("HEAD/BASE [CI]", "ratio_cell", "text"),
     Column("Repeats", "repeats", "int"), Column("Pairs", "pairs", "int"), Column("Verdict", "verdict", "text")),
    group=None,
)  # fmt: skip

SLOTS_SPEC = TableSpec(
    "runs", "Runs",
    "Each revision running the whole study once, in the order they ran; load: the machine's 1-minute load average "
    "at the start and end of the run.",
    (Column("Side", "side", "text"), Column("Repeat", "repeat", "int"), Column("Seconds", "seconds"),
     Column("Load at start", "load_start"), Column("Load at end", "load_end"), Column("Started (UTC)", "started_at", "text")),
    group=None,
)  # fmt: skip


def _measure_spec(title: str, caption: str) -> TableSpec:
    return TableSpec(f"measures-{title.lower()}", title, caption, MEASURES_SPEC.columns, group=None)


def document(results: Sequence[GroupResult], ctx: Context, thresholds: Thresholds) -> Document:
    """The regression report as a format-neutral document."""
    frame = verdict_frame(results)
    measures = measures_frame(results)
    measures["label"] = [_measure_label(m) for m in measures["measure"]]
    measures["ratio_cell"] = [
        _ratio_text(RatioResult(m, r, lo, hi, n, 0, 0.0, 0.0, ""))
        for m, r, lo, hi, n in measures[["measure", "ratio", "lo", "hi", "repeats"]].itertuples(index=False)
    ]
    failing = [g for g in results if g.failures]
    loads = [s.get(k) for s in ctx.slots for k in ("load_start", "load_end") if s.get(k) is not None]
    load_text = (f"1-minute load average {min(loads):.1f}-{max(loads):.1f} during the runs" if loads  # type: ignore[type-var]
                 else "all runs reused from an earlier invocation")  # fmt: skip
    summary = [
        f"BASE: {ctx.base}. HEAD: {ctx.head}.",
        "Studies: "
        + "; ".join(
            f"'{name}' ({tier} tier, seeds {', '.join(map(str, ctx.seeds_by_study[name]))})"
            for name, tier in ctx.tiers_by_study.items()
        )
        + f". {ctx.repeats} repeat(s) "
        + {
            "interleaved": "interleaved (base head, head base, ...)",
            "concurrent": "concurrent (the revisions' runs of a repeat side by side, each trial beside its twin)",
        }.get(ctx.mode, "of HEAD against the recorded reference run")
        + (", every trial in a fresh process through its revision's own 'suite run'." if ctx.mode != "reference" else "."),
        f"Machine: {ctx.machine.get('cpu_model')}, {ctx.machine.get('cpu_count_usable')} usable CPUs, {load_text} "
        "(the machine may be shared: speed ratios are paired to cancel that out).",
        f"Result: {'FAIL' if failing else 'PASS'} ({len(failing)} of {len(results)} comparisons fail).",
    ]
    notes: list[Paragraph | DisplayTable | FigureRef | Failure] = [Paragraph(n) for n in ctx.notes]
    notes += [Paragraph(f"{g.algo} / {g.env_label}: {n}") for g in results for n in g.notes]
    speed = measures[measures["measure"].isin(list(SPEEDS))]
    phase_t = measures[measures["measure"].str.startswith("time:")]
    memory = measures[(measures["measure"] == "peak_rss_mb") | measures["measure"].str.startswith("mem:")]
    sections = [
        Section("verdicts", "Verdicts", [Paragraph(VERDICT_SPEC.caption, "caption"), display_table(frame, VERDICT_SPEC),
                                         *(Paragraph(line) for line in rule_text(thresholds, ctx.speed_gated))]),
        Section("returns", "Returns", [Paragraph(RETURNS_SPEC.caption, "caption"), display_table(frame, RETURNS_SPEC)]),
        Section("speed", "Speed", [
            Paragraph("Training steps/s: env steps over the wall-clock time of rollout + advantages + update "
                      "(steps_per_second), over the CPU time of the trial process in those phases "
                      "(cpu_steps_per_second) and over their wall time less the trial thread's run-queue wait "
                      "(unstarved_steps_per_second), the last two where both revisions record them. Verdict info: "
                      "shown, not gating (the rule is under the verdicts).", "caption"),
            display_table(speed, _measure_spec("Speed", "Training steps/s.")),
            Paragraph("Seconds per phase, HEAD/BASE (above 1: HEAD slower in that phase); shown to locate a change, "
                      "not gated.", "caption"),
            display_table(phase_t, _measure_spec("Phases", "Seconds per phase.")),
        ]),
        Section("memory", "Memory", [
            Paragraph("Peak RSS of the trial process and per-phase peak memory fields (MB) where the records have them.",
                      "caption"),
            display_table(memory, _measure_spec("Memory", "Peak memory (MB).")),
        ]),
        Section("notes", "Notes", notes or [Paragraph("None.")]),
        Section("runs", "Runs", [display_table(pd.DataFrame(list(ctx.slots), columns=["side", "repeat", "seconds",
                                                "load_start", "load_end", "started_at"]), SLOTS_SPEC)]),
        Section("files", "Files", [Paragraph(
            "Beside this page: regression.md (the same in Markdown), verdicts.csv, measures.csv and runs.csv (full "
            "precision), study.toml (what both revisions ran), <side>/r<k>/suite.db (every trial record) and "
            "report/ (the normal study report of both revisions side by side).")]),
    ]  # fmt: skip
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return Document(f"rl-suite regression: {', '.join(ctx.tiers_by_study)}", summary, sections,
                    f"Generated by rl-suite {suite.__version__} on {now} in {ctx.run_dir}.")  # fmt: skip


def write_outputs(results: Sequence[GroupResult], runs: pd.DataFrame, ctx: Context, thresholds: Thresholds) -> dict[str, Path]:
    """Write the files listed in the module docstring into ``ctx.run_dir``; return them by name."""
    out = ctx.run_dir
    out.mkdir(parents=True, exist_ok=True)
    frame = verdict_frame(results)
    files = {
        "verdicts.csv": out / "verdicts.csv",
        "measures.csv": out / "measures.csv",
        "runs.csv": out / "runs.csv",
        "regression.md": out / "regression.md",
        "regression.html": out / "regression.html",
    }
    frame.drop(columns=["returns_cell", "speed_cell", "memory_cell"]).to_csv(files["verdicts.csv"], index=False)
    measures_frame(results).to_csv(files["measures.csv"], index=False)
    runs.to_csv(files["runs.csv"], index=False)
    doc = document(results, ctx, thresholds)
    files["regression.md"].write_text(md_out.render_document(doc), encoding="utf-8")
    files["regression.html"].write_text(html_out.render_document(doc), encoding="utf-8")
    return files
