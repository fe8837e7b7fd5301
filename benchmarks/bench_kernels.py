"""Speed of the two kernel modes side by side (issue 57: choose the default by measurement).

Every case (algorithm x env) runs as a fresh ``suite run`` in each mode, alternating native and portable (the order
flips every repeat, so a linear drift of a shared machine cancels), the same trial in both (seed 0, the same budget,
no models saved). Each run's speed is read from its record: env steps per CPU second of training (every phase but
``eval``; barely moved by other load on a shared machine) and per wall second. Rows go to
``results/evidence/kernels-speed.csv`` (the evidence convention: ``target,value,unit,machine,commit,command,date`` and
``load,notes``): per case and mode the median over repeats, the portable/native ratio, and where ``sb3-ppo`` ran too,
the ratio of each algorithm to it in each mode.

    python benchmarks/bench_kernels.py --repeats 2 --algo ppo --algo sb3-ppo
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

OUT = REPO / "results" / "evidence" / "kernels-speed.csv"
STEPS = {"CartPole-v1": 16384, "LunarLander-v3": 16384, "TextMatch-v0": 16384, "Hopper-v5": 4096, "ALE/Pong-v5": 2048}
"""Budget per env: a few updates at the per-env defaults, short enough for a shared 2-core machine."""
COLUMNS = ["target", "value", "unit", "machine", "commit", "command", "date", "load", "notes"]


def one_run(algo: str, env: str, steps: int, mode: str) -> tuple[float, float]:
    """(CPU-time steps/s, wall steps/s) of one fresh ``suite run`` of the case in ``mode``."""
    from suite.regress.records import load_slot

    with tempfile.TemporaryDirectory(prefix="bench-kernels-") as tmp:
        db = Path(tmp) / "suite.db"
        argv = [sys.executable, "-m", "suite.cli", "run", "--algo", algo, "--env", env, "--steps", str(steps),
                "--seeds", "0", "--kernels", mode, "--db", str(db), "--no-report", "--no-save-models", "--quiet",
                "--workers", "1"]  # fmt: skip
        subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        row = load_slot(db, mode, 0).iloc[0]
        if row["status"] != "ok":
            raise SystemExit(f"{algo} {env} {mode}: {row['status']} {row['error']}")
        return float(row["cpu_steps_per_second"]), float(row["steps_per_second"])


def machine() -> str:
    from suite.provenance import _cpu_capability, _cpu_model

    return f"{_cpu_model()} ({_cpu_capability()} native), {os.cpu_count()} CPUs"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algo", action="append", help="algorithm (repeatable; default ppo and sb3-ppo)")
    ap.add_argument("--env", action="append", help=f"env (repeatable; default {', '.join(STEPS)})")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    algos, envs = args.algo or ["ppo", "sb3-ppo"], args.env or list(STEPS)
    git = ["git", "rev-parse", "--short=12", "HEAD"]
    commit = subprocess.run(git, cwd=REPO, capture_output=True, text=True).stdout.strip()
    command = "python benchmarks/bench_kernels.py " + " ".join(sys.argv[1:])
    where = machine()
    speeds: dict[tuple[str, str, str], list[float]] = {}
    walls: dict[tuple[str, str, str], list[float]] = {}
    loads: list[float] = []
    for env in envs:
        for algo in algos:
            for r in range(args.repeats):
                for mode in ("native", "portable") if r % 2 == 0 else ("portable", "native"):
                    loads.append(os.getloadavg()[0])
                    cpu, wall = one_run(algo, env, STEPS[env], mode)
                    speeds.setdefault((algo, env, mode), []).append(cpu)
                    walls.setdefault((algo, env, mode), []).append(wall)
                    print(f"{algo} {env} {mode}: {cpu:.0f} steps/CPU-s, {wall:.0f} steps/s (load {loads[-1]:.1f})", flush=True)
    date = datetime.now(UTC).isoformat(timespec="seconds")
    load = f"{min(loads):.1f}-{max(loads):.1f}"
    rows = []

    def add(target: str, value: float, unit: str, notes: str) -> None:
        rows.append([target, f"{value:.4g}", unit, where, commit, command, date, load, notes])

    med = {k: statistics.median(v) for k, v in speeds.items()}
    for (algo, env, mode), value in sorted(med.items()):
        spread = ", ".join(f"{x:.0f}" for x in speeds[algo, env, mode])
        add(f"{algo} {env} {mode}", value, "steps per CPU second", f"median of {spread}; wall steps/s "
            + ", ".join(f"{x:.0f}" for x in walls[algo, env, mode]))  # fmt: skip
    for algo in algos:
        for env in envs:
            add(
                f"{algo} {env} portable/native",
                med[algo, env, "portable"] / med[algo, env, "native"],
                "ratio",
                "CPU-time speed, portable over native",
            )
            if algo != "sb3-ppo" and "sb3-ppo" in algos:
                for mode in ("native", "portable"):
                    add(
                        f"{algo}/sb3-ppo {env} {mode}",
                        med[algo, env, mode] / med["sb3-ppo", env, mode],
                        "ratio",
                        f"CPU-time speed of {algo} over sb3-ppo, both {mode}",
                    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    new = not args.out.exists()
    with args.out.open("a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(COLUMNS)
        w.writerows(rows)
    print(f"{len(rows)} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
