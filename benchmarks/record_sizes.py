"""Measure what results databases hold per trial: the bytes of each trial's record (its trial row and its curve,
evaluation and update blobs, as SQLite stores them) and the file's size; optionally append the figures to an evidence
CSV (columns target, value, unit, machine, commit, command, date, load, notes, file).

    python benchmarks/record_sizes.py reports/claims/zoo-benchmark/rows-a2c-hopper-v3-columns-sb3-a2c/records.db \\
        --target a2c-hopper-1m-trial-record --evidence results/evidence/records.csv
    python benchmarks/record_sizes.py --reports --evidence results/evidence/records.csv   # reports/ in all
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import sqlite3
import subprocess
import sys
from pathlib import Path

TRIAL_BYTES = """
SELECT t.key, t.algo, t.env_id, t.steps,
       (SELECT SUM(pgsize) FROM dbstat WHERE name = 'trials') * 1.0 / (SELECT COUNT(*) FROM trials),
       COALESCE((SELECT LENGTH(data) FROM curves c WHERE c.key = t.key), 0),
       COALESCE((SELECT LENGTH(data) FROM evals e WHERE e.key = t.key), 0),
       COALESCE((SELECT LENGTH(data) FROM updates u WHERE u.key = t.key), 0)
FROM trials t ORDER BY t.key
"""


def _machine() -> str:
    """``<model name> family F model M, N CPUs[, KVM]`` from /proc/cpuinfo (the platform's name elsewhere)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            fields.setdefault(name.strip(), value.strip())
    except OSError:
        pass
    cpu = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields:
        cpu += f" family {fields['cpu family']} model {fields.get('model', '?')}"
    kvm = ", KVM" if "hypervisor" in fields.get("flags", "").split() else ""
    return f"{cpu}, {os.cpu_count()} CPUs{kvm}"


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def trial_sizes(path: Path) -> list[tuple[str, str, str, int, float]]:
    """``(key, algo, env_id, steps, bytes)`` per trial: its share of the trials table's pages plus its blobs."""
    with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as conn:
        rows = conn.execute(TRIAL_BYTES).fetchall()
    return [(key, algo, env, steps, sum(parts)) for key, algo, env, steps, *parts in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("databases", nargs="*", type=Path)
    parser.add_argument("--reports", action="store_true", help="also measure the tracked files under reports/ in all")
    parser.add_argument("--target", help="evidence target name for the largest trial record of the databases given")
    parser.add_argument("--evidence", type=Path, help="append the figures to this CSV")
    args = parser.parse_args()
    rows: list[dict[str, object]] = []
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    common = {"machine": _machine(), "commit": _commit(), "command": "python " + " ".join(sys.argv), "date": now,
              "load": f"{os.getloadavg()[0]:.1f}"}  # fmt: skip
    largest = (0.0, "")
    for path in args.databases:
        sizes = trial_sizes(path)
        for key, algo, env, steps, size in sizes:
            print(f"{path}: {key[:12]} {algo} {env} {steps:,} steps: {size / 1e6:.3f} MB")
            largest = max(largest, (size, f"{algo} {env} {steps:,} steps, {key[:12]}, {path}"))
        print(f"{path}: {len(sizes)} trials, file {path.stat().st_size / 1e6:.2f} MB")
    if args.target and largest[1]:
        rows.append({"target": args.target, "value": f"{largest[0] / 1e6:.3f}", "unit": "MB", **common,
                     "notes": f"largest trial record: {largest[1]}", "file": ""})  # fmt: skip
    if args.reports:
        listed = subprocess.run(["git", "ls-files", "-z", "reports"], capture_output=True, check=True).stdout.decode()
        files = [Path(n) for n in listed.split("\0") if n and Path(n).is_file()]
        total = sum(f.stat().st_size for f in files)
        biggest = max(files, key=lambda f: f.stat().st_size)
        largest_mb = biggest.stat().st_size / 1e6
        print(f"reports/: {len(files)} tracked files, {total / 1e6:.2f} MB; largest {biggest} {largest_mb:.2f} MB")
        rows.append({"target": "reports-total", "value": f"{total / 1e6:.2f}", "unit": "MB", **common,
                     "notes": f"{len(files)} tracked files under reports/", "file": ""})  # fmt: skip
        rows.append({"target": "reports-largest-file", "value": f"{biggest.stat().st_size / 1e6:.2f}", "unit": "MB",
                     **common, "notes": "", "file": str(biggest)})  # fmt: skip
    if args.evidence and rows:
        fields = ["target", "value", "unit", "machine", "commit", "command", "date", "load", "notes", "file"]
        new = not args.evidence.exists()
        args.evidence.parent.mkdir(parents=True, exist_ok=True)
        with args.evidence.open("a", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=fields)
            if new:
                writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
