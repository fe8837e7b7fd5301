"""The table writers of a claim set: a headline, the source's own layout, every cell in detail, verdicts as data.

``reports/claims/<set>/`` (or ``-o DIR``) gets::

    index.html      self-contained page: the headline (counts by verdict, findings, the cost of settling the rest),
                    the table in the source's layout, every cell with its notes, the uncovered claims, the rule
    report.md       the same in Markdown
    table.tex       the source's layout as a booktabs table whose columns wrap (\\usepackage{booktabs,tabularx})
    cells.tex       every cell (claimed, measured, verdict, why) the same way
    verdicts.csv    one row per cell at full precision (diff two runs to see what changed)
    verdicts.json   the same with the set's metadata, the rule and the command that made the files

The HTML, Markdown and LaTeX renderers are the study report's (:mod:`suite.report`), so numbers read the same
everywhere: ``point [lo, hi]`` for a 95% interval, ``not reached`` for "never". The CSV and JSON hold no clock time,
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
from suite.claims.results import CellResult
from suite.claims.uncovered import uncovered_for
from suite.claims.verdict import REFERENCE, RULE, RULE_SHORT, STAND_IN_VERDICTS, VERDICTS
from suite.errors import UserError
from suite.report import html as html_out
from suite.report import latex as latex_out
from suite.report import markdown as md_out
from suite.report.display import Cell as DCell
from suite.report.display import DisplayTable, TableSpec, format_ci, format_number
from suite.report.document import Document, Failure, FigureRef, Paragraph, Section

RULE_DOC = "docs/claims.md"
"""Where the whole rule is written down (the tables print :data:`suite.claims.verdict.RULE` and link here)."""


def _signed(x: float, decimals: int | None = None) -> str:
    if isinstance(x, float) and math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    text = format_number(x, decimals)
    return text if text.startswith(("-", "n/a", "not")) or x == 0 else f"+{text}"


def claimed_text(cell: Cell) -> str:
    """The claim as a table shows it: ``498.2``, ``490.04 ± 6.12``, ``+8.8% (289.7 -> 315.2)``, ``0.70x``,
    ``[2, 51]``, ``lower``."""
    if cell.direction is not None:
        return f"{cell.direction} (no number given)"
    if cell.claimed_range is not None:
        text = f"[{format_number(cell.claimed_range[0])}, {format_number(cell.claimed_range[1])}]"
    elif cell.claimed is None:
        text = f"{format_number(cell.claimed_ratio)}x" if cell.kind == "ratio" else _signed(cell.claimed_gain or 0.0)
    elif cell.comparison == "value":
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
    """The measurement alone: ``point [lo, hi]`` (95%); comparisons with the arms' own statistics and, for a gain
    of returns, its size on the env's normalised scale."""
    cell, j = result.cell, result.judgement
    point, lo, hi = j.measured
    if math.isnan(point):
        return "n/a"
    if cell.comparison == "value":
        text = format_ci(point, lo, hi)
        return f"{text}; {j.reached}" if j.reached else text
    if cell.comparison == "ratio":
        core = f"{format_ci(point, lo, hi)}x"
    else:
        core = f"{_signed(point)} [{_signed(lo)}, {_signed(hi)}]"
        if j.normalised is not None:
            core += f" = {_signed(j.normalised[0], 3)} pts"
    text = f"{core} ({format_number(j.b_point)} -> {format_number(j.a_point)})"
    return f"{text}; {j.reached}" if j.reached else text


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


def _why(result: CellResult) -> str:
    """The verdict's reason, with the cost of settling the cell where the reason does not state it."""
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


def _date(result: CellResult) -> str:
    return max((a.ended for a in result.arms if a.ended), default="")


def _machine(result: CellResult) -> str:
    return "; ".join(sorted({m for a in result.arms for m in a.machines}))


def _tolerance(result: CellResult) -> str:
    j = result.judgement
    return f"±{format_number(j.tolerance)}" if math.isfinite(j.tolerance) else "n/a"


def _judged(result: CellResult) -> str:
    """The judged interval (the claim's noise included) and the band."""
    j = result.judgement
    if j.interval90 is None or j.band is None:
        return "-"

    def show(interval: tuple[float, float]) -> str:
        lo, hi = interval
        if j.scale == "log":
            lo, hi = math.exp(lo), math.exp(hi)
        f = lambda x: "-inf" if x == -math.inf else ("not reached" if x == math.inf else format_number(x))  # noqa: E731
        return f"[{f(lo)}, {f(hi)}]"

    return f"90% {show(j.interval90)} vs band {show(j.band)}"


def layout_table(claims: ClaimSet, results: list[CellResult]) -> DisplayTable:
    """The source's own layout: one line per row; per column the claim, the measurement and the verdict."""
    spec = TableSpec("table", claims.title, _caption(claims), ())
    columns = claims.columns
    table = DisplayTable(spec=spec, headers=["Row", *columns], numeric=[False] * (len(columns) + 1))
    by_place = {(r.cell.row, r.cell.column): r for r in results}
    for row in claims.rows:
        line = [DCell(row)]
        for column in columns:
            r = by_place.get((row, column))
            if r is None:
                line.append(DCell(""))
            else:
                line.append(DCell(f"{r.verdict}: claimed {claimed_text(r.cell)}; measured {measured_text(r)}",
                                  bold=False))  # fmt: skip
        table.rows.append(line)
    return table


CELL_HEADERS = ("Row", "Column", "Kind", "Claimed", "Measured [95% CI]", "Judged", "Tolerance", "Verdict", "Why",
                "Seeds ok", "Budget run / claimed", "Tier", "Date", "Machine", "Records", "Note")  # fmt: skip


def cells_table(claims: ClaimSet, results: list[CellResult]) -> DisplayTable:
    """Every cell with its claim kind, measurement, judged interval, verdict, tier, budget, date, machine and notes."""
    spec = TableSpec("cells", f"{claims.title}: every cell", "", ())
    numeric = [h in ("Claimed", "Measured [95% CI]") for h in CELL_HEADERS]
    table = DisplayTable(spec=spec, headers=list(CELL_HEADERS), numeric=numeric)
    for r in results:
        cell = r.cell
        budgets = ", ".join(f"{v:,}" for v in sorted({a.run_budget for a in r.arms}))
        values = [
            cell.row, cell.column, cell.kind + (" (reference)" if cell.role == "reference" else ""), claimed_text(cell),
            measured_text(r), _judged(r), _tolerance(r), r.verdict, _why(r), _seeds(r), f"{budgets} / {cell.budget:,}",
            r.tier, _date(r) or "-", _machine(r) or "-", r.records or "-", _note(cell),
        ]  # fmt: skip
        table.rows.append(
            [DCell(v, numeric=n, bold=(h == "Verdict")) for v, n, h in zip(values, numeric, CELL_HEADERS, strict=True)]
        )
    return table


def _note(cell: Cell) -> str:
    parts = [cell.note] if cell.note else []
    if cell.eval_protocol != "deterministic":
        parts.append(f"evaluated with {cell.eval_protocol} actions, as the source did")
    return "; ".join(parts) or "-"


def _caption(claims: ClaimSet) -> str:
    parts = ["STAND-IN."] if claims.stand_in else []
    parts.append(f"Source: {claims.source}.")
    return " ".join(parts)


def verdict_rows(claims: ClaimSet, results: list[CellResult]) -> list[dict[str, Any]]:
    """One flat record per cell (what ``verdicts.csv`` and ``verdicts.json`` hold)."""
    rows = []
    for r in results:
        cell, j = r.cell, r.judgement
        a = r.arms[0]
        b = r.arms[1] if len(r.arms) > 1 else None
        rows.append(
            {
                "claim_set": claims.name,
                "stand_in": claims.stand_in,
                "row": cell.row,
                "column": cell.column,
                "role": cell.role,
                "kind": cell.kind,
                "kind_source": cell.kind_source,
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
                "claimed_range": json.dumps(cell.claimed_range) if cell.claimed_range else "",
                "direction": cell.direction or "",
                "claimed_pm": cell.claimed_pm,
                "pm_over": cell.pm_over,
                "claimed_a": cell.claimed_a,
                "claimed_b": cell.claimed_b,
                "eval_protocol": cell.eval_protocol,
                "measured": j.measured[0],
                "ci_lo": j.measured[1],
                "ci_hi": j.measured[2],
                "normalised_gain_pts": j.normalised[0] if j.normalised else None,
                "judged_scale": j.scale,
                "judged_lo90": j.interval90[0] if j.interval90 else None,
                "judged_hi90": j.interval90[1] if j.interval90 else None,
                "judged_lo95": j.interval95[0] if j.interval95 else None,
                "judged_hi95": j.interval95[1] if j.interval95 else None,
                "band_lo": j.band[0] if j.band else None,
                "band_hi": j.band[1] if j.band else None,
                "tolerance": j.tolerance,
                "tolerance_source": j.tolerance_source,
                "method": j.method,
                "reached": j.reached,
                "a_statistic": j.a_point,
                "b_statistic": j.b_point if b else None,
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
                "records": r.records,
                "date": _date(r),
                "machine": _machine(r),
                "algo_versions": ", ".join(sorted({v for x in r.arms for v in x.versions})),
                "training_curve": _curve(r),
                "verdict": r.verdict,
                "family": j.family,
                "code": j.code,
                "reason": r.reason,
                "p": j.p,
                "p_adjusted": j.p_adjusted,
                "seeds_needed": r.seeds_needed,
                "settle_tier": r.settle_tier,
                "core_hours": r.core_hours,
                "note": cell.note,
            }
        )
    return rows


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def counts(results: list[CellResult], family: str) -> str:
    """``3 reproduced, 2 inconclusive (1 saturated, 1 by budget)`` for one family of cells."""
    mine = [r for r in results if r.judgement.family == family]
    by = Counter(r.verdict for r in mine)
    order = {"claim": VERDICTS, "stand-in": STAND_IN_VERDICTS, "reference": (REFERENCE,)}[family]
    parts = []
    for v in order:
        if not by[v]:
            continue
        text = f"{by[v]} {v}"
        if "inconclusive" in v:
            why = Counter(_WHY.get(r.judgement.code, r.judgement.code) for r in mine if r.verdict == v)
            text += " (" + ", ".join(f"{n} {k}" for k, n in why.most_common()) + ")"
        parts.append(text)
    return ", ".join(parts) or "none"


_WHY = {"budget": "below the claim's budget", "not_run": "not run", "wide": "interval too wide",
        "saturated": "saturated", "seeds": "too few seeds", "censored": "censored", "multiplicity": "lost to multiplicity",
        "no_value": "no value"}  # fmt: skip


def kernels_of(claims: ClaimSet) -> str:
    """The kernel mode the set's trials ran in (it is in their keys, so the records judged are of that mode)."""
    from suite.trial import default_kernels

    return claims.kernels or default_kernels()


KERNEL_LINES = {
    "native": "Kernels: native (torch, MKL, numpy picked their vector kernels by each machine's CPU: exactly "
    "reproducible only on a CPU like the one each trial ran on, its model in the record; docs/kernels.md).",
    "portable": "Kernels: portable (torch, MKL, oneDNN, numpy, OpenBLAS held to AVX2: the same bits on any x86-64 "
    "machine; docs/kernels.md).",
}
"""The headline's line saying which kernel mode the table's trials ran in."""


def headline(claims: ClaimSet, results: list[CellResult]) -> list[str]:
    """The first screen: what was found, counted by verdict (the source's claims apart from stand-ins and reference
    columns), the findings that matter, and what settling the rest costs."""
    lines = []
    if claims.stand_in:
        lines.append(f"STAND-IN: {claims.stand_in}.")
    claim_cells = [r for r in results if r.judgement.family == "claim"]
    stand_cells = [r for r in results if r.judgement.family == "stand-in"]
    refs = [r for r in results if r.judgement.family == "reference"]
    if claim_cells:
        lines.append(f"{len(claim_cells)} claims of {claims.source}: {counts(results, 'claim')}.")
    if stand_cells:
        lines.append(f"{len(stand_cells)} stand-in cells (not the source's own measurement): {counts(results, 'stand-in')}.")
    if refs:
        lines.append(f"{len(refs)} reference cells shown beside them, not judged or counted.")
    for code, word in (("impossible", "Impossible"), ("outside", "Measured outside the claim"),
                       ("equivalent", "Measured within the claim")):  # fmt: skip
        decided = [r for r in results if r.judgement.code == code]
        if decided:
            shown = "; ".join(f"{r.cell.label} (claimed {claimed_text(r.cell)}, measured {_brief(r)})" for r in decided[:8])
            more = f"; and {len(decided) - 8} more" if len(decided) > 8 else ""
            lines.append(f"{word} ({len(decided)}): {shown}{more}.")
    lines += list(claims.findings)
    lines.append(KERNEL_LINES[kernels_of(claims)])
    pending = [r for r in results if "inconclusive" in r.verdict]
    if pending:
        hours = [r.core_hours for r in pending if r.core_hours is not None]
        rest = [r for r in pending if r.core_hours is None]
        kinds = Counter(
            "saturated (no run can settle them)" if r.judgement.code == "saturated"
            else "not run yet" if r.judgement.code == "not_run"
            else "beyond more seeds (the claim's own noise is wider than its tolerance)"
            if r.judgement.code == "wide" and r.seeds_needed is None
            else "without an estimate (the Why column says what they need)"
            for r in rest
        )  # fmt: skip
        parts = [f"about {format_number(sum(hours))} core-hours for {len(hours)}"] if hours else []
        parts += [f"{n} {what}" for what, n in kinds.most_common()]
        text = f"Settling the {len(pending)} inconclusive cell{'s' if len(pending) > 1 else ''}: " + "; ".join(parts)
        lines.append(text + ".")
    lines.append(RULE_SHORT)
    return lines


def _brief(result: CellResult) -> str:
    point = result.judgement.measured[0]
    if math.isnan(point):
        return "n/a"
    unit = "x" if result.cell.comparison == "ratio" else ""
    return f"{format_number(point)}{unit}"


def _short(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def write_tables(
    claims: ClaimSet, results: list[CellResult], out_dir: Path, *, tier: str, db_path: Path, command: str
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
        "kernels": kernels_of(claims),
        "command": command,
        "rule": RULE,
        "rule_doc": RULE_DOC,
        "multiplicity": claims.multiplicity,
        "tolerance_fraction": claims.tolerance_fraction,
        "headline": headline(claims, results),
        "notes": list(claims.notes),
        "uncovered": [u.__dict__ for u in uncovered_for(claims.source)],
        "cells": [{k: _json_number(v) for k, v in row.items()} for row in rows],
    }
    (out_dir / "verdicts.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    layout, cells = layout_table(claims, results), cells_table(claims, results)
    label = "".join(ch if ch.isalnum() else "-" for ch in claims.name)
    wrap = latex_out.WRAP
    note = f"Tier {tier}; rule: {RULE_DOC}."
    head = f"% STAND-IN: {latex_out.latex_escape(claims.stand_in)}\n" if claims.stand_in else ""
    first = r">{\raggedright\arraybackslash}p{0.2\linewidth}"
    table_tex = latex_out.render_table(layout, label=f"tab:{label}", note=note, widths=[first] + [wrap] * len(claims.columns))
    (out_dir / "table.tex").write_text(head + table_tex, encoding="utf-8")
    rag = r">{\raggedright\arraybackslash}p"
    widths = [wrap, rag + r"{0.13\linewidth}", rag + r"{0.17\linewidth}", rag + r"{0.16\linewidth}", wrap]
    cells_tex = latex_out.render_table(_latex_cells(claims, results), label=f"tab:{label}-cells", note=note, widths=widths)
    (out_dir / "cells.tex").write_text(head + cells_tex, encoding="utf-8")

    doc = _document(claims, results, layout, cells, tier=tier, db_path=db_path, command=command)
    (out_dir / "report.md").write_text(md_out.render_document(doc), encoding="utf-8")
    index = out_dir / "index.html"
    index.write_text(html_out.render_document(doc), encoding="utf-8")
    return index


def _latex_cells(claims: ClaimSet, results: list[CellResult]) -> DisplayTable:
    """Every cell for a paper: row and column, claim, measurement, verdict, why (the rest is in the CSV)."""
    spec = TableSpec("cells", f"{claims.title}: every cell", _caption(claims), ())
    headers = ["Cell", "Claimed", "Measured [95% CI]", "Verdict", "Why"]
    table = DisplayTable(spec=spec, headers=headers, numeric=[False] * len(headers))
    for r in results:
        table.rows.append([DCell(r.cell.label), DCell(claimed_text(r.cell)), DCell(measured_text(r)),
                           DCell(r.verdict, bold=True), DCell(_short(_why(r), 240))])  # fmt: skip
    return table


Block = Paragraph | DisplayTable | FigureRef | Failure

CELLS_CAPTION = (
    "Kind: what the claimed number is (a mean over seeds, one run, one agent's episodes, a gain, a ratio). Measured: "
    "the suite's statistic with its 95% interval. Judged: the 90% interval of the measurement with the claim's own "
    "noise, against the band (the claim widened by the tolerance). Budget: what the trials ran / what the claim is made "
    "at. Records: the folder whose records.db the cell was judged from."
)


def _document(claims: ClaimSet, results: list[CellResult], layout: DisplayTable, cells: DisplayTable, *, tier: str,
              db_path: Path, command: str) -> Document:  # fmt: skip
    summary = headline(claims, results)
    arms = sorted({(c.arm.label, c.arm.describe(), c.arm.note) for c in claims.cells})
    arms += sorted({(c.versus.label, c.versus.describe(), c.versus.note) for c in claims.cells if c.versus} - set(arms))
    arm_text: list[Block] = [Paragraph(f"{label}: {desc}. {note}".strip()) for label, desc, note in arms]
    kinds: list[Block] = [Paragraph(f"{c.label}: {c.kind}, because {c.kind_source or 'stated'}; tolerance {_tolerance(r)} "
                       f"({r.judgement.tolerance_source}).")
             for c, r in ((r.cell, r) for r in results)]  # fmt: skip
    budget_text: list[Block] = [
        Paragraph(f"{c.label}: {c.budget:,} steps ({c.budget_source or 'as given'}).") for c in claims.cells
    ]
    note_text: list[Block] = [Paragraph(n) for n in claims.notes] or [Paragraph("None.")]
    ledger = uncovered_for(claims.source)
    ledger_table = DisplayTable(TableSpec("uncovered", "Claims of the source no cell measures", "", ()),
                                ["Where", "Claim", "Why not measured"], [False] * 3)  # fmt: skip
    ledger_table.rows = [[DCell(u.location), DCell(u.claim), DCell(u.why)] for u in ledger]
    files = (
        f"Made by: {command} (records: {db_path}). Next to this page: report.md (the same in Markdown), table.tex and "
        "cells.tex (booktabs + tabularx LaTeX), verdicts.csv and verdicts.json (every cell at full precision, for "
        f"diffing two runs). The whole rule: {RULE_DOC}."
    )
    sections = [
        Section("table", "The table, in the source's layout", [Paragraph(layout.spec.caption, "caption"), layout]),
        Section("cells", "Every cell", [Paragraph(CELLS_CAPTION, "caption"), cells]),
        Section("kinds", "Claim kinds and tolerances", kinds),
        Section("uncovered", "Claims of the source no cell measures",
                [ledger_table] if ledger else [Paragraph("None: every claim of the source is a cell.")]),
        Section("arms", "What each column measures", arm_text),
        Section("budgets", "Claim budgets", budget_text),
        Section("notes", "Notes", note_text),
        Section("files", "Files", [Paragraph(files)]),
    ]  # fmt: skip
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"rl-suite claims: {claims.name}" + (" (STAND-IN)" if claims.stand_in else "")
    return Document(title, summary, sections, f"Generated by rl-suite {suite.__version__} on {now}; tier {tier}.")


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
        if v in ("inf", "-inf"):
            return float(v)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan

    point, lo, hi = num(row.get("measured")), num(row.get("ci_lo")), num(row.get("ci_hi"))
    if math.isnan(point):
        return "n/a"
    unit = (
        "x" if row.get("comparison") == "ratio" else ("%" if row.get("relative") and row.get("comparison") != "value" else "")
    )
    if row.get("comparison") == "improvement" and "kind" in row:
        unit = ""  # judged in score units since the claim kinds
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
    """One screen: the set, one line per cell (claimed, measured, seeds, steps, verdict), the headline, what changed
    against the folder's previous table, the rule."""
    lines = [f"{claims.name}: {claims.title} [{tier} tier]"]
    if claims.stand_in:
        lines.append(f"STAND-IN: {claims.stand_in}")
    for r in results:
        lines.append(
            f"  {r.verdict.upper():<15} {r.cell.label}: claimed {claimed_text(r.cell)}, measured {measured_text(r)}; "
            f"seeds {_seeds(r)}, {_steps(r)} steps"
        )
        if r.verdict not in ("reproduced", "consistent (stand-in)"):
            lines.append(f"  {'':<15}   {_why(r)}")
    lines += [line for line in headline(claims, results) if line != RULE_SHORT]
    lines += changes or []
    lines += textwrap.wrap(RULE, width=width)
    files = "index.html, report.md, table.tex, cells.tex, verdicts.csv, verdicts.json; the records: records.db"
    lines.append(f"tables written to {out_dir}/ ({files})")
    return "\n".join(lines)
