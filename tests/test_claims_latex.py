"""Every committed claim table compiles with a real TeX and fits the page: no overfull box, quotes typeset as
quotes. Needs ``pdflatex`` (Debian's texlive-latex-base and texlive-latex-recommended; ``.ci/run`` installs them)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from suite.report.display import Cell
from suite.report.latex import format_cell, tex_quotes

ROOT = Path(__file__).resolve().parents[1] / "reports" / "claims"
TABLES = sorted(p.parent for p in ROOT.rglob("table.tex"))

PREAMBLE = r"""\documentclass{article}
\usepackage[T1]{fontenc}
\usepackage{booktabs,tabularx}
\begin{document}
"""


def test_straight_quotes_become_tex_quotes() -> None:
    assert tex_quotes("PPO vs 'GRPO = PPO + RLVR' and \"x\" in the document's table") == (
        "PPO vs `GRPO = PPO + RLVR' and ``x'' in the document's table"
    )
    assert format_cell(Cell("'hello' (code)")) == "`hello' (code)"


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed (.ci/run installs texlive)")
@pytest.mark.parametrize("folder", TABLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_committed_claim_table_compiles_without_an_overfull_box(folder: Path, tmp_path: Path) -> None:
    for name in ("table.tex", "cells.tex"):
        shutil.copy(folder / name, tmp_path / name)
    doc = tmp_path / "doc.tex"
    doc.write_text(PREAMBLE + "\\input{table.tex}\n\\input{cells.tex}\n\\end{document}\n", encoding="utf-8")
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    log = (tmp_path / "doc.log").read_text(encoding="utf-8", errors="replace")
    assert done.returncode == 0, log[-2000:]
    overfull = re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide\)", log)
    assert not overfull, f"{folder}: overfull boxes of {overfull} pt"
    assert "''GRPO" not in (folder / "table.tex").read_text(encoding="utf-8")  # no closing quote where one opens
