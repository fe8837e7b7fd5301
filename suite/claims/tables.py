"""The table writers of a claim set: the source's own layout, every cell in detail, verdicts as data.

``reports/claims/<set>/`` (or ``-o DIR``) gets::

    index.html      self-contained page: the table in the source's layout, every cell, the rule, notes
    report.md       the same in Markdown
    table.tex       the source's layout as a booktabs table (\\usepackage{booktabs})
    cells.tex       every cell (claimed, measured, seeds, budget, tier, verdict) as a booktabs table
    verdicts.csv    one row per cell at full precision (diff two runs to see what changed)
    verdicts.json   the same with the set's metadata, the rule and the command that made the files

The HTML, Markdown and LaTeX renderers are the study report's (:mod:`suite.report`), so numbers read the same
everywhere: ``point [lo, hi]`` for a 95% CI, ``not reached`` for "never". The CSV and JSON hold no clock time,
so regenerating unchanged results gives identical files.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

import suite
from suite.claims.claimset import Cell, ClaimSet
from suite.claims.metrics import get_metric
from suite.claims.reproduce import CellResult
from suite.claims.verdict import RULE, VERDICTS
from suite.errors import UserError
from suite.report import html as html_out
from suite.report import latex as latex_out
from suite.report import markdown as md_out
from suite.report.display import Cell as DCell
from suite.report.display import DisplayTable, TableSpec, format_ci, format_number
from suite.report.document import Document, Failure, FigureRef, Paragraph, Section


def _signed(x: float, decimals: int | None = None) -> str:
    if isinstance(x, float) and math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    text = format_number(x, decimals)
    return text if text.startswith(("-", "n/a", "not")) or x == 0 else f"+{text}"


def claimed_text(cell: Cell) -> str:
    """The claim as a table shows it: ``498.2``, ``1.2 ± 0.3``, ``+8.8%``, ``-20% (15,000 vs 12,000)``, ``0.70x``."""
    if cell.comparison == "value":
        text = format_number(cell.claimed)
    elif cell.comparison == "ratio":
        text = f"{format_number(cell.claimed)}x"
    else:
        text = f"{_signed(cell.claimed)}{'%' if cell.relative else ''}"
    if cell.claimed_pm is not None:
        text += f" ± {format_number(cell.claimed_pm)}"
    if cell.claimed_a is not None and cell.claimed_b is not None:
        text += f" ({format_number(cell.claimed_b)} -> {format_number(cell.claimed_a)})"
    return text


def measured_text(result: CellResult) -> str:
    """The measurement: ``point [lo, hi]``; for comparisons with the arms' own statistics."""
    cell = result.cell
    if cell.comparison == "value":
        return format_ci(result.point, result.lo, result.hi)
    unit = "%" if cell.relative else ("x" if cell.comparison == "ratio" else "")
    if any(math.isnan(v) for v in (result.point, result.lo, result.hi)):
        core = "n/a"
    elif cell.comparison == "ratio":
        core = f"{format_ci(result.point, result.lo, result.hi)}{unit}"
    else:
        core = f"{_signed(result.point)}{unit} [{_signed(result.lo)}, {_signed(result.hi)}]"
    a, b = result.arms[0], result.arms[1]
    return f"{core} ({format_number(b.point)} -> {format_number(a.point)})"


def _measures(cell: Cell) -> str:
    text = cell.arm.describe()
    return text if cell.versus is None else f"{text} vs {cell.versus.describe()}"


def _seeds(result: CellResult) -> str:
    return "/".join(str(a.n_ok) for a in result.arms) + f" of {len(result.cell.seeds)}"


def _steps(result: CellResult) -> str:
    values = sorted({s for a in result.arms for s in a.steps_trained})
    if not values:
        return "n/a"
    return f"{values[0]:,}" if len(values) == 1 else f"{values[0]:,}-{values[-1]:,}"


def _run_budget(result: CellResult) -> str:
    values = sorted({a.run_budget for a in result.arms})
    return ", ".join(f"{v:,}" for v in values)


def _why(result: CellResult) -> str:
    """The verdict's reason, with the cost of settling the cell where the reason does not state it: for a cell run
    below its claim's budget, the cost of the tier that settles it (not of the trials the reason may list as missing)."""
    text = result.reason
    if result.core_hours is not None and "core-hours" not in text:
        hours = format_number(result.core_hours)
        if result.settle_tier:
            text += f" (--tier {result.settle_tier} settles it: about {hours} core-hours from the recorded speeds)"
        else:
            text += f" (about {hours} core-hours)"
    return text


def _curve(result: CellResult) -> str:
    return "; ".join(dict.fromkeys(a.curve for a in result.arms if a.curve))


def layout_table(claims: ClaimSet, results: list[CellResult]) -> DisplayTable:
    """The source's own layout: one line per row, per column its claimed value, measurement and verdict."""
    spec = TableSpec("table", claims.title, _caption(claims), ())
    columns = claims.columns
    headers = ["Row"]
    numeric = [False]
    for column in columns:
        headers += [f"{column}: claimed", f"{column}: measured [95% CI]", f"{column}: verdict"]
        numeric += [True, True, False]
    table = DisplayTable(spec=spec, headers=headers, numeric=numeric)
    by_place = {(r.cell.row, r.cell.column): r for r in results}
    for row in claims.rows:
        line = [DCell(row)]
        for column in columns:
            r = by_place.get((row, column))
            if r is None:
                line += [DCell("", True), DCell("", True), DCell("")]
            else:
                line += [DCell(claimed_text(r.cell), True), DCell(measured_text(r), True), DCell(r.verdict, bold=True)]
        table.rows.append(line)
    return table


CELL_HEADERS = ("Row", "Column", "Env", "Measures", "Metric (statistic)", "Claimed", "Measured [95% CI]", "Seeds ok",
                "Claim budget", "Run budget", "Steps trained", "Tier", "Training curve", "Verdict", "Why")  # fmt: skip


def cells_table(claims: ClaimSet, results: list[CellResult]) -> DisplayTable:
    """Every cell with its measurement, seeds, budgets, steps trained, tier and verdict."""
    spec = TableSpec("cells", f"{claims.title}: every cell", _caption(claims), ())
    numeric = [h in ("Claimed", "Measured [95% CI]", "Claim budget", "Run budget", "Steps trained") for h in CELL_HEADERS]
    table = DisplayTable(spec=spec, headers=list(CELL_HEADERS), numeric=numeric)
    for r in results:
        cell = r.cell
        values = [
            cell.row, cell.column, cell.env_label, _measures(cell), f"{cell.metric} ({cell.statistic})", claimed_text(cell),
            measured_text(r), _seeds(r), f"{cell.budget:,}", _run_budget(r), _steps(r), r.tier, _curve(r) or "-",
            r.verdict, _why(r),
        ]  # fmt: skip
        table.rows.append(
            [DCell(v, numeric=n, bold=(h == "Verdict")) for v, n, h in zip(values, numeric, CELL_HEADERS, strict=True)]
        )
    return table


def _caption(claims: ClaimSet) -> str:
    parts = []
    if claims.stand_in:
        parts.append(f"STAND-IN: {claims.stand_in}.")
    parts.append(f"Source: {claims.source}, {claims.location}.".replace(", .", "."))
    parts.append("Measured: the cell's statistic over seeds with a 95% percentile bootstrap CI.")
    return " ".join(parts)


def verdict_rows(claims: ClaimSet, results: list[CellResult]) -> list[dict[str, Any]]:
    """One flat record per cell (what ``verdicts.csv`` and ``verdicts.json`` hold)."""
    rows = []
    for r in results:
        cell = r.cell
        a = r.arms[0]
        b = r.arms[1] if len(r.arms) > 1 else None
        rows.append(
            {
                "claim_set": claims.name,
                "stand_in": claims.stand_in,
                "row": cell.row,
                "column": cell.column,
                "env_id": cell.env_id,
                "env_label": cell.env_label,
                "arm": cell.arm.name,
                "algo": cell.arm.algo,
                "overrides": json.dumps(cell.arm.overrides_for(cell.env_id), sort_keys=True, default=str),
                "versus": cell.versus.name if cell.versus else "",
                "versus_algo": cell.versus.algo if cell.versus else "",
                "comparison": cell.comparison,
                "relative": cell.relative,
                "metric": cell.metric,
                "metric_description": get_metric(cell.metric).description,
                "statistic": cell.statistic,
                "params": json.dumps(dict(cell.params), sort_keys=True),
                "claimed": cell.claimed,
                "claimed_pm": cell.claimed_pm,
                "pm_over": cell.pm_over,
                "measured": r.point,
                "ci_lo": r.lo,
                "ci_hi": r.hi,
                "a_statistic": a.point,
                "b_statistic": b.point if b else None,
                "n_ok_a": a.n_ok,
                "n_ok_b": b.n_ok if b else None,
                "n_failed": sum(x.n_failed for x in r.arms),
                "n_missing": sum(x.n_missing for x in r.arms),
                "seeds_asked": len(cell.seeds),
                "claim_budget": cell.budget,
                "budget_source": cell.budget_source,
                "run_budget": max(x.run_budget for x in r.arms),
                "steps_trained": _steps(r),
                "tier": r.tier,
                "algo_versions": ", ".join(sorted({v for x in r.arms for v in x.versions})),
                "training_curve": _curve(r),
                "verdict": r.verdict,
                "reason": r.reason,
                "seeds_needed": r.seeds_needed,
                "settle_tier": r.settle_tier,
                "core_hours": r.core_hours,
            }
        )
    return rows


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def write_tables(
    claims: ClaimSet, results: list[CellResult], out_dir: Path, *, tier: str, db_path: Path, command: str, reps: int
) -> Path:
    """Write every file of the claim set's table (see the module docstring); return ``index.html``.

    Raises:
        UserError: the folder cannot be created.
    """
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the output folder {out_dir}: {exc}") from exc
    rows = verdict_rows(claims, results)
    pd.DataFrame(rows).to_csv(out_dir / "verdicts.csv", index=False)
    meta = {
        "claim_set": claims.name,
        "title": claims.title,
        "source": claims.source,
        "location": claims.location,
        "stand_in": claims.stand_in,
        "tier": tier,
        "command": command,
        "bootstrap_reps": reps,
        "rule": RULE,
        "notes": list(claims.notes),
        "cells": [{k: _json_number(v) for k, v in row.items()} for row in rows],
    }
    (out_dir / "verdicts.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    layout, cells = layout_table(claims, results), cells_table(claims, results)
    label = "".join(ch if ch.isalnum() else "-" for ch in claims.name)
    note = f"Tier {tier}. {RULE}"
    (out_dir / "table.tex").write_text(latex_out.render_table(layout, label=f"tab:{label}", note=note), encoding="utf-8")
    (out_dir / "cells.tex").write_text(latex_out.render_table(cells, label=f"tab:{label}-cells", note=note), encoding="utf-8")

    doc = _document(claims, results, layout, cells, tier=tier, db_path=db_path, command=command, reps=reps)
    (out_dir / "report.md").write_text(md_out.render_document(doc), encoding="utf-8")
    index = out_dir / "index.html"
    index.write_text(html_out.render_document(doc), encoding="utf-8")
    return index


Block = Paragraph | DisplayTable | FigureRef | Failure

CELLS_CAPTION = (
    "Seeds ok: ok runs of A (/B) over the seeds the claim asks for. Claim budget: the env steps the claim is made at "
    "(the source's, or the stated default under Claim budgets); run budget: what the trials were given at this tier; "
    "steps trained: what the records say was trained. Training curve: which training episodes a curve metric used "
    "('capped at N steps' = an algorithm that cut its episodes at its own step cap, the cut ones left out)."
)


def _counts(results: list[CellResult]) -> str:
    counts = Counter(r.verdict for r in results)
    return ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts[v])


def _document(claims: ClaimSet, results: list[CellResult], layout: DisplayTable, cells: DisplayTable, *, tier: str,
              db_path: Path, command: str, reps: int) -> Document:  # fmt: skip
    summary = []
    if claims.stand_in:
        summary.append(f"STAND-IN: {claims.stand_in}.")
    summary += [
        f"Claims of {claims.source} ({claims.location}), checked cell by cell. {claims.description}".strip(),
        f"Tier {tier}; {len(results)} cells: {_counts(results)}. Made by: {command} (results database {db_path}).",
        RULE,
    ]
    arms = sorted({(c.arm.label, c.arm.describe(), c.arm.note) for c in claims.cells})
    arms += sorted({(c.versus.label, c.versus.describe(), c.versus.note) for c in claims.cells if c.versus} - set(arms))
    arm_text: list[Block] = [Paragraph(f"{label}: {desc}. {note}".strip()) for label, desc, note in arms]
    budget_text: list[Block] = [
        Paragraph(f"{c.label}: {c.budget:,} steps ({c.budget_source or 'as given'}).") for c in claims.cells
    ]
    note_text: list[Block] = [Paragraph(n) for n in claims.notes] or [Paragraph("None.")]
    files = (
        "Next to this page: report.md (the same in Markdown), table.tex and cells.tex (booktabs LaTeX), verdicts.csv "
        f"and verdicts.json (every cell at full precision, for diffing two runs). Bootstrap: {reps:,} replications per "
        "cell, each arm's runs resampled independently."
    )
    sections = [
        Section("table", "The table, in the source's layout", [Paragraph(layout.spec.caption, "caption"), layout]),
        Section("cells", "Every cell", [Paragraph(CELLS_CAPTION, "caption"), cells]),
        Section("arms", "What each column measures", arm_text),
        Section("budgets", "Claim budgets", budget_text),
        Section("notes", "Notes", note_text),
        Section("files", "Files", [Paragraph(files)]),
    ]
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"rl-suite claims: {claims.name}" + (" (STAND-IN)" if claims.stand_in else "")
    return Document(title, summary, sections, f"Generated by rl-suite {suite.__version__} on {now}.")


def read_previous(out_dir: Path, claims: ClaimSet) -> dict[str, Any] | None:
    """The ``verdicts.json`` a folder already holds for this claim set (read before it is overwritten), or None."""
    path = out_dir / "verdicts.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("claim_set") != claims.name or not isinstance(data.get("cells"), list):
        return None
    return data


def _measured_brief(row: dict[str, Any]) -> str:
    def num(v: Any) -> float:
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan

    point, lo, hi = num(row.get("measured")), num(row.get("ci_lo")), num(row.get("ci_hi"))
    if math.isnan(point):
        return "n/a"
    unit = (
        "x" if row.get("comparison") == "ratio" else ("%" if row.get("relative") and row.get("comparison") != "value" else "")
    )
    return f"{format_ci(point, lo, hi)}{unit}"


def verdict_changes(previous: dict[str, Any] | None, claims: ClaimSet, results: list[CellResult]) -> list[str]:
    """What changed against the table the output folder held before: cells whose verdict changed (with the
    measurement before and after), cells whose measurement moved under the same verdict, cells added or gone.
    Cells are matched by row and column. Empty when there was no previous table or nothing changed."""
    if previous is None:
        return []
    before = {(str(c.get("row")), str(c.get("column"))): c for c in previous["cells"] if isinstance(c, dict)}
    now = {(str(c["row"]), str(c["column"])): c for c in verdict_rows(claims, results)}
    lines: list[str] = []
    moved = 0
    for key, row in now.items():
        old = before.get(key)
        if old is None:
            lines.append(f"  new cell  {key[0]} / {key[1]}: {row['verdict']}")
            continue
        was, measured_was, measured_now = old.get("verdict"), _measured_brief(old), _measured_brief(row)
        if was != row["verdict"]:
            lines.append(f"  {was} -> {row['verdict']}  {key[0]} / {key[1]} (measured {measured_was} -> {measured_now})")
        elif measured_was != measured_now:
            moved += 1
    lines += [f"  cell gone {r} / {c} (was {before[(r, c)].get('verdict')})" for r, c in before if (r, c) not in now]
    if moved:
        lines.append(f"  {moved} cell(s) measured differently with the same verdict")
    if not lines:
        return []
    tier_was = previous.get("tier")
    head = f"changes against the table this folder held (tier {tier_was}"
    head += f", now {results[0].tier})" if results and tier_was != results[0].tier else ")"
    return [head + ":", *lines]


def terminal_summary(
    claims: ClaimSet, results: list[CellResult], *, tier: str, out_dir: Path, width: int = 110,
    changes: list[str] | None = None,
) -> str:  # fmt: skip
    """One screen: the set, one line per cell (claimed, measured, seeds, steps, verdict), the counts, what changed
    against the folder's previous table, the rule."""
    lines = [f"{claims.name}: {claims.title} [{tier} tier]"]
    if claims.stand_in:
        lines.append(f"STAND-IN: {claims.stand_in}")
    for r in results:
        lines.append(
            f"  {r.verdict.upper():<15} {r.cell.label}: claimed {claimed_text(r.cell)}, measured {measured_text(r)}; "
            f"seeds {_seeds(r)}, {_steps(r)} steps"
        )
        if r.verdict not in ("reproduced",):
            lines.append(f"  {'':<15}   {_why(r)}")
    lines.append(f"{len(results)} cells: {_counts(results)}.")
    lines += changes or []
    lines += textwrap.wrap(RULE, width=width)
    files = "index.html, report.md, table.tex, cells.tex, verdicts.csv, verdicts.json; the records: records.db"
    lines.append(f"tables written to {out_dir}/ ({files})")
    return "\n".join(lines)
