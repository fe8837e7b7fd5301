"""Study reports (HTML, Markdown, LaTeX, CSV, figures) and per-trial TensorBoard event files.

Modules:
    build: load a study from the results database and compute the statistics tables (:mod:`suite.stats`).
    display: which columns each table shows and how numbers are written (shared by every format).
    document: the format-neutral report (sections of paragraphs, tables, figures, failures).
    figures: matplotlib/seaborn figures (Agg backend), PNG + SVG.
    html, markdown, latex: renderers.
    writer: :func:`write_report`, which ties them together.
    tensorboard: :func:`write_tensorboard`, event files for one trial record.

Heavy imports (matplotlib, torch) happen on first use, so ``import suite.report`` stays cheap for the CLI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from suite.report.tensorboard import write_tensorboard
    from suite.report.writer import write_report

__all__ = ["write_report", "write_tensorboard"]

_LAZY = {"write_report": "suite.report.writer", "write_tensorboard": "suite.report.tensorboard"}


def __getattr__(name: str) -> Any:
    """Import ``write_report`` / ``write_tensorboard`` from their modules on first access (PEP 562)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
