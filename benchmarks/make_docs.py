"""Refill the measurement tables of ``docs/*.md`` from the committed result files.

A measured number in the docs is never typed by hand: each table sits in a block ::

    <!-- generated: results/evidence/parallel.csv -->
    | target | value | unit | machine | commit | date | command |
    ...
    <!-- end generated -->

and this script rebuilds the block's table from the file it names, so every figure can be traced to a file (and from
it to the machine, commit and command that made it) and regenerated. The file is an evidence CSV with at least the
columns ``target,value,unit,machine,commit,command,date`` (extra columns allowed; a ``file`` column, naming the file
a figure was read from, is shown too). One row is one measurement and a re-measurement appends a row, so the table
shows the latest row per target (the latest ``date``; on equal dates the row further down the file), targets in the
order they first appear. ``targets=GLOB`` after the path keeps only the targets matching a shell pattern, so one file
can feed several tables: ``<!-- generated: results/speed/summary.csv targets=*Pong* -->``.

Usage::

    python benchmarks/make_docs.py            # rewrite every generated block of docs/*.md
    python benchmarks/make_docs.py --check    # exit 1, naming each stale block, when a doc is out of step

A block naming a file that does not exist or is not such a CSV is one error line and exit 2.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REQUIRED = ("target", "value", "unit", "machine", "commit", "command", "date")
TABLE_COLUMNS = ("target", "value", "unit", "machine", "commit", "date", "command")
BLOCK = re.compile(
    r"(?P<open><!-- generated: (?P<path>\S+)(?: targets=(?P<glob>\S+))? -->\n)(?P<body>.*?)(?P<close><!-- end generated -->)",
    re.DOTALL,
)


class DocsError(Exception):
    """A block that cannot be generated: its file is missing or not an evidence CSV."""


@dataclass(frozen=True)
class Block:
    """One generated block of a doc."""

    doc: Path
    """The markdown file holding it."""
    path: str
    """The result file it is generated from, relative to the repository root."""
    glob: str | None
    """The shell pattern of the targets it keeps, or None for all."""
    body: str
    """What the doc holds between the markers now."""

    def name(self, root: Path) -> str:
        where = f"{self.doc.relative_to(root)}: block generated from {self.path}"
        return where + (f" (targets={self.glob})" if self.glob else "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def latest_rows(path: Path, display: str) -> tuple[list[dict[str, str]], bool]:
    """The latest row per target of an evidence CSV, in the order targets first appear, and whether it has ``file``."""
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        missing = [c for c in REQUIRED if c not in columns]
        if missing:
            raise DocsError(f"{display} lacks the column(s) {', '.join(missing)} (needed: {', '.join(REQUIRED)})")
        first_seen: dict[str, int] = {}
        latest: dict[str, tuple[str, int, dict[str, str]]] = {}
        for index, row in enumerate(reader):
            target = (row.get("target") or "").strip()
            if not target:
                continue
            first_seen.setdefault(target, index)
            date = (row.get("date") or "").strip()
            if target not in latest or (date, index) >= latest[target][:2]:
                latest[target] = (date, index, row)
    rows = [latest[target][2] for target in sorted(latest, key=first_seen.__getitem__)]
    return rows, "file" in columns


def render_table(root: Path, path: str, glob: str | None) -> str:
    """The markdown table (and the line naming its file) of a block."""
    source = root / path
    if not source.is_file():
        raise DocsError(f"{path} does not exist")
    if source.suffix.lower() != ".csv":
        raise DocsError(f"{path} is not a CSV evidence file (columns {', '.join(REQUIRED)})")
    rows, with_file = latest_rows(source, path)
    if glob:
        rows = [row for row in rows if fnmatch.fnmatchcase(row["target"], glob)]
    if not rows:
        raise DocsError(f"{path} has no rows" + (f" whose target matches {glob}" if glob else ""))
    columns = TABLE_COLUMNS + (("file",) if with_file else ())
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = []
        for column in columns:
            value = _cell(row.get(column) or "")
            if column == "commit" and re.fullmatch(r"[0-9a-f]{40}", value):
                value = value[:7]
            if column in ("command", "file") and value:
                value = f"`{value}`"
            cells.append(value)
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Latest row per target of [`{path}`](../{path}); regenerate with `python benchmarks/make_docs.py`.")
    return "\n".join(lines) + "\n"


def find_blocks(doc: Path) -> list[Block]:
    text = doc.read_text()
    return [Block(doc, m["path"], m["glob"], m["body"]) for m in BLOCK.finditer(text)]


def regenerate(doc: Path, root: Path) -> str:
    """The doc's text with every generated block refilled."""

    def refill(match: re.Match[str]) -> str:
        try:
            table = render_table(root, match["path"], match["glob"])
        except DocsError as error:
            raise DocsError(f"{doc.relative_to(root)}: {error}") from None
        return match["open"] + table + match["close"]

    return BLOCK.sub(refill, doc.read_text())


def docs_of(root: Path) -> list[Path]:
    return sorted((root / "docs").glob("*.md"))


def check(root: Path) -> list[str]:
    """The names of the blocks that are out of step with their files (empty when every doc is in step)."""
    stale = []
    for doc in docs_of(root):
        for block in find_blocks(doc):
            try:
                table = render_table(root, block.path, block.glob)
            except DocsError as error:
                raise DocsError(f"{doc.relative_to(root)}: {error}") from None
            if block.body != table:
                stale.append(block.name(root))
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a generated block is out of step")
    parser.add_argument("--root", type=Path, default=REPO, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        if args.check:
            stale = check(root)
            for name in stale:
                print(f"{name} is out of step; run python benchmarks/make_docs.py", file=sys.stderr)
            if stale:
                return 1
            print(f"docs in step ({sum(len(find_blocks(d)) for d in docs_of(root))} generated blocks)")
            return 0
        changed = []
        for doc in docs_of(root):
            text = regenerate(doc, root)
            if text != doc.read_text():
                doc.write_text(text)
                changed.append(str(doc.relative_to(root)))
        print("rewrote " + ", ".join(changed) if changed else "docs already in step")
        return 0
    except DocsError as error:
        print(f"make_docs: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
