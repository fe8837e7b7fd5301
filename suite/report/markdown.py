"""Markdown rendering of the report's tables (GitHub-flavoured pipe tables)."""

from __future__ import annotations

from suite.report.display import Cell, DisplayTable
from suite.report.document import Document, Failure, FigureRef, Paragraph, Section


def markdown_escape(text: str) -> str:
    """Make ``text`` safe inside a pipe-table cell: escape ``|``, ``\\``, ``*``, ``_``, backticks, ``<`` and ``>``;
    newlines become spaces."""
    out = text.replace("\\", "\\\\")
    for ch in "|*_`<>":
        out = out.replace(ch, "\\" + ch)
    return " ".join(out.split())


def _cell(cell: Cell) -> str:
    text = markdown_escape(cell.text)
    return f"**{text}**" if cell.bold else text


def render_table(table: DisplayTable) -> str:
    """A pipe table (numbers right-aligned); an empty table is the line ``(none)``."""
    if not table.rows:
        return "(none)\n"
    header = "| " + " | ".join(markdown_escape(h) for h in table.headers) + " |"
    rule = "|" + "|".join("---:" if numeric else ":---" for numeric in table.numeric) + "|"
    body = ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table.rows]
    return "\n".join([header, rule, *body]) + "\n"


def markdown_unescape(text: str) -> str:
    """Inverse of :func:`markdown_escape` (for reading cells back, e.g. in tests)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _block(block: Paragraph | DisplayTable | FigureRef | Failure) -> str:
    if isinstance(block, Paragraph):
        text = markdown_escape(block.text)
        return f"> **Note:** {text}\n" if block.kind == "note" else f"{text}\n"
    if isinstance(block, DisplayTable):
        return render_table(block)
    if isinstance(block, FigureRef):
        return f"![{markdown_escape(block.alt)}](figures/{block.name}.png)\n\n{markdown_escape(block.caption)}\n"
    error = " ".join(block.error.split()).replace("`", "'")
    lines = [f"**{markdown_escape(block.title)}**: `{error}`"]
    if block.traceback:
        fence = "````" if "```" in block.traceback else "```"
        lines.append(f"\n{fence}text\n{block.traceback.rstrip()}\n{fence}")
    return "\n".join(lines) + "\n"


def render_document(doc: Document) -> str:
    """``report.md``: the same sections, tables and figures (linked, not embedded) as the HTML page, the headline
    first, then the summary."""

    def section(sec: Section) -> list[str]:
        return [f"## {markdown_escape(sec.title)}\n", *(_block(b) for b in sec.blocks)]

    parts = [f"# {markdown_escape(doc.title)}\n"]
    if doc.headline is not None:
        parts.extend(section(doc.headline))
    parts.extend(f"{markdown_escape(p)}\n" for p in doc.summary)
    for sec in doc.sections:
        parts.extend(section(sec))
    parts.append(f"---\n\n{markdown_escape(doc.footer)}\n")
    return "\n".join(parts)
