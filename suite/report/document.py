"""The report as a format-neutral document: sections of paragraphs, tables, figures and failure details.

:mod:`suite.report.html` and :mod:`suite.report.markdown` render the same :class:`Document`, so the HTML page
and ``report.md`` cannot drift apart. Text here is plain (unescaped); each renderer escapes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from suite.report.display import DisplayTable


@dataclass
class Paragraph:
    """A paragraph of plain text; ``code`` spans are not interpreted (kept as text)."""

    text: str
    """The text."""
    kind: str = "text"
    """``text`` or ``note`` (a warning, e.g. a statistic that could not be computed)."""


@dataclass
class FigureRef:
    """A figure written under ``figures/``."""

    name: str
    """File stem: ``figures/<name>.png`` and ``.svg``."""
    alt: str
    """Alternative text (what the figure shows)."""
    caption: str
    """Caption under the figure."""
    png: bytes = b""
    """PNG bytes, embedded in the HTML page."""


@dataclass
class Failure:
    """One failed or diverged trial, with its traceback."""

    title: str
    """``algo / env / seed N: status``."""
    error: str
    """Error message."""
    traceback: str
    """Traceback text (empty if the process died before it could report one)."""


@dataclass
class Section:
    """A titled section."""

    id: str
    """HTML anchor."""
    title: str
    """Heading."""
    blocks: list[Paragraph | DisplayTable | FigureRef | Failure] = field(default_factory=list)
    """Content, in order."""


@dataclass
class Document:
    """The whole report."""

    title: str
    """Page title."""
    summary: list[str]
    """Opening paragraphs (what was run, from what, with which statistics settings)."""
    sections: list[Section]
    """Sections in order."""
    footer: str
    """Last line (generator, time, database)."""
    headline: Section | None = None
    """The results, shown first: before the summary, the contents and every other section
    (:mod:`suite.report.headline`)."""
