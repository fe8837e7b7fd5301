"""Evidence rows: each measured figure one CSV row under ``results/evidence/``, with what a reader needs to judge it.

The columns are the project's convention for result files (``target,value,unit,machine,commit,command,date``) plus
``load`` (the machine's load average around the measurement: the dev machine is shared, and a figure taken while
other work held its cores is a lower bound on speed) and ``notes`` (the raw figures behind the value, e.g. the CPU
seconds, so a reader can redo the arithmetic). A re-measurement appends a row; the latest row per target is the
current figure, which ``docs/`` tables show.
"""

from __future__ import annotations

import csv
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EVIDENCE_DIR = REPO / "results" / "evidence"
COLUMNS = ("target", "value", "unit", "machine", "commit", "command", "date", "load", "notes")


def machine() -> str:
    """The CPU as a reader compares machines: vendor name, family and model numbers, AVX-512 or not, usable CPUs,
    and the hypervisor where there is one (e.g. ``AMD EPYC family 25 model 17, AVX-512, 2 CPUs, KVM``)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
            if not line.strip():
                break  # the first processor's block is enough
    except OSError:
        return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    parts = [fields.get("model name", platform.machine())]
    if "cpu family" in fields and "model" in fields:
        parts[0] += f" family {fields['cpu family']} model {fields['model']}"
    flags = fields.get("flags", "").split()
    parts.append("AVX-512" if "avx512f" in flags else ("AVX2" if "avx2" in flags else "no AVX2"))
    parts.append(f"{len(os.sched_getaffinity(0))} CPUs")
    if "hypervisor" in flags:
        parts.append(_hypervisor() or "virtual machine")
    return ", ".join(parts)


def _hypervisor() -> str | None:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return None
    for line in out.splitlines():
        if line.startswith("Hypervisor vendor:"):
            return line.split(":", 1)[1].strip()
    return None


def commit() -> str:
    """The checkout's commit (12 hex digits), ``+dirty`` when tracked files differ from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False).stdout.strip()

    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def load() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` prints them."""
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def command() -> str:
    """This process's command line, as a reader would type it from the repository root."""
    script = Path(sys.argv[0])
    with_root = script.resolve().relative_to(REPO) if script.resolve().is_relative_to(REPO) else script
    return shlex.join(["python", str(with_root), *sys.argv[1:]])


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def row(target: str, value: float | str, unit: str, *, load: str, notes: str = "", **context: str) -> dict[str, Any]:
    """One evidence row; ``machine``, ``commit``, ``command`` and ``date`` are this process's unless given."""
    out = {"target": target, "value": value, "unit": unit, "load": load, "notes": notes}
    out["machine"] = context.pop("machine", None) or machine()
    out["commit"] = context.pop("commit", None) or commit()
    out["command"] = context.pop("command", None) or command()
    out["date"] = context.pop("date", None) or utc_now()
    if context:
        raise TypeError(f"unknown evidence columns {sorted(context)}")
    return out


def append_rows(path: Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Append ``rows`` to the CSV at ``path`` (written with its header when new) and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.is_file() or path.stat().st_size == 0
    with open(path, "a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        if new:
            writer.writeheader()
        for r in rows:
            writer.writerow({k: _cell(r[k]) for k in COLUMNS})
    return path


def latest(path: Path) -> dict[str, dict[str, str]]:
    """The latest row per target of an evidence CSV (the current figures)."""
    with open(path, newline="") as fh:
        return {r["target"]: r for r in csv.DictReader(fh)}


def _cell(value: Any) -> Any:
    return f"{value:.6g}" if isinstance(value, float) else value
