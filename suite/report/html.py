"""The self-contained HTML page: inline CSS, figures as base64 PNG, no script, nothing fetched.

Every string (including those from the database: env labels, errors, tracebacks) goes through
:func:`html.escape`. The layout is a centred column of at most 1,100 px; wide tables scroll horizontally
inside their own box, so the page itself never scrolls sideways on a laptop screen.
"""

from __future__ import annotations

import base64
import html
import struct

from suite.report.display import DisplayTable
from suite.report.document import Document, Failure, FigureRef, Paragraph, Section

CSS = """
:root { color-scheme: light; --fg: #1d2329; --muted: #5b6670; --line: #d8dde2; --head: #f3f5f7; --accent: #2563a6; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--fg); background: #fff; }
main { max-width: 1100px; margin: 0 auto; padding: 1.2rem 1.2rem 3rem; }
h1 { font-size: 1.6rem; margin: 0.2rem 0 0.6rem; }
h2 { font-size: 1.25rem; margin: 2.2rem 0 0.6rem; padding-bottom: 0.2rem; border-bottom: 1px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.4rem 0 0.4rem; }
p { margin: 0.4rem 0 0.8rem; }
a { color: var(--accent); }
code { font: 0.9em ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
nav ul { margin: 0.4rem 0; padding: 0; list-style: none; display: flex; flex-wrap: wrap; gap: 0.3rem 1rem; }
.note { background: #fff6e0; border-left: 4px solid #e0a800; padding: 0.4rem 0.7rem; }
.caption { color: var(--muted); font-size: 0.9rem; }
.scroll { overflow-x: auto; margin: 0.4rem 0 1rem; border: 1px solid var(--line); border-radius: 4px; }
table { border-collapse: collapse; font-size: 0.85rem; width: max-content; min-width: 100%; }
th, td { padding: 0.3rem 0.6rem; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: var(--head); position: sticky; top: 0; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.text { max-width: 38rem; overflow-wrap: anywhere; }
tbody tr:nth-child(even) { background: #fafbfc; }
figure { margin: 0.8rem 0 1.4rem; }
figure img { display: block; max-width: 100%; height: auto; margin: 0 auto; }
figcaption { color: var(--muted); font-size: 0.9rem; margin-top: 0.3rem; }
details { margin: 0.3rem 0; border: 1px solid var(--line); border-radius: 4px; padding: 0.3rem 0.6rem; }
summary { cursor: pointer; font-weight: 600; }
pre { overflow-x: auto; background: #f6f8fa; padding: 0.6rem; font-size: 0.8rem; white-space: pre; }
.headline { border-bottom: 1px solid var(--line); padding-bottom: 0.4rem; margin-bottom: 1rem; }
.headline h2 { margin-top: 0.4rem; }
.headline-body { display: flex; flex-wrap: wrap; gap: 0 1.4rem; align-items: flex-start; }
.headline-table { flex: 0 1 auto; width: min-content; max-width: 100%; }
.headline p { margin: 0.25rem 0; font-size: 0.92rem; }
.headline td, .headline th { padding: 0.22rem 0.6rem; }
.headline figure { flex: 1 1 280px; max-width: 480px; margin: 0.4rem 0; }
footer { margin-top: 3rem; color: var(--muted); font-size: 0.85rem; }
"""


def esc(text: object) -> str:
    """HTML-escape any value's text (quotes included, so it is safe in attributes too)."""
    return html.escape(str(text), quote=True)


def png_size(png: bytes) -> tuple[int, int] | None:
    """Width and height from a PNG's IHDR chunk (None if the bytes are not a PNG)."""
    if len(png) < 24 or png[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    width, height = struct.unpack(">II", png[16:24])
    return int(width), int(height)


def render_table(table: DisplayTable) -> str:
    """A table inside a horizontally scrolling box; bold cells are the best per column."""
    if not table.rows:
        return '<p class="caption">(none)</p>'
    head = "".join(
        f'<th class="{"num" if n else "text"}" scope="col">{esc(h)}</th>'
        for h, n in zip(table.headers, table.numeric, strict=True)
    )
    rows = []
    for row in table.rows:
        cells = []
        for cell in row:
            text = f"<strong>{esc(cell.text)}</strong>" if cell.bold else esc(cell.text)
            cells.append(f'<td class="{"num" if cell.numeric else "text"}">{text}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def render_figure(figure: FigureRef) -> str:
    """An embedded PNG (``data:`` URI) with its caption and links to the PNG and SVG files."""
    size = png_size(figure.png)
    dims = f' width="{size[0]}" height="{size[1]}"' if size else ""
    data = base64.b64encode(figure.png).decode("ascii")
    links = f'(<a href="figures/{esc(figure.name)}.png">PNG</a>, <a href="figures/{esc(figure.name)}.svg">SVG</a>)'
    return (
        f'<figure id="fig-{esc(figure.name)}"><img src="data:image/png;base64,{data}" alt="{esc(figure.alt)}"{dims}>'
        f"<figcaption>{esc(figure.caption)} {links}</figcaption></figure>"
    )


def _block(block: Paragraph | DisplayTable | FigureRef | Failure) -> str:
    if isinstance(block, Paragraph):
        cls = ' class="note"' if block.kind == "note" else ' class="caption"' if block.kind == "caption" else ""
        return f"<p{cls}>{esc(block.text)}</p>"
    if isinstance(block, DisplayTable):
        return render_table(block)
    if isinstance(block, FigureRef):
        return render_figure(block)
    trace = f"<pre>{esc(block.traceback)}</pre>" if block.traceback else "<p>(no traceback recorded)</p>"
    return f"<details><summary>{esc(block.title)}</summary><p><code>{esc(block.error)}</code></p>{trace}</details>"


def render_section(section: Section) -> str:
    """A ``<section>`` with its heading and blocks."""
    body = "\n".join(_block(b) for b in section.blocks)
    return f'<section id="{esc(section.id)}">\n<h2>{esc(section.title)}</h2>\n{body}\n</section>'


def render_headline(section: Section) -> str:
    """The headline (:mod:`suite.report.headline`): its table (with the caption above it) beside its figure on a
    laptop screen (below it on a narrow one), then its lines, so the whole of it fits the first screen;
    ``data-headline`` marks it for tests."""
    cut = next((i + 1 for i, b in enumerate(section.blocks) if isinstance(b, DisplayTable)), 0)
    table = "\n".join(_block(b) for b in section.blocks[:cut])
    figures = "\n".join(_block(b) for b in section.blocks if isinstance(b, FigureRef))
    lines = "\n".join(_block(b) for b in section.blocks[cut:] if not isinstance(b, FigureRef))
    return (
        f'<section id="{esc(section.id)}" class="headline" data-headline="true">\n<h2>{esc(section.title)}</h2>\n'
        f'<div class="headline-body"><div class="headline-table">\n{table}\n</div>\n{figures}</div>\n{lines}\n</section>'
    )


def render_document(doc: Document) -> str:
    """The whole page: the title, the headline, then the summary, the contents and the sections."""
    listed = doc.sections if doc.headline is None else [doc.headline, *doc.sections]
    toc = "".join(f'<li><a href="#{esc(s.id)}">{esc(s.title)}</a></li>' for s in listed)
    headline = "" if doc.headline is None else render_headline(doc.headline)
    summary = "\n".join(f"<p>{esc(p)}</p>" for p in doc.summary)
    sections = "\n".join(render_section(s) for s in doc.sections)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(doc.title)}</title>
<style>{CSS}</style>
</head>
<body>
<main>
<header><h1>{esc(doc.title)}</h1></header>
{headline}
<div class="summary">
{summary}
<nav aria-label="Contents"><ul>{toc}</ul></nav>
</div>
{sections}
<footer>{esc(doc.footer)}</footer>
</main>
</body>
</html>
"""
