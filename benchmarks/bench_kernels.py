"""Speed of the two kernel modes side by side (issue 57: choose the default by measurement).

Every env's algorithms run in one fresh ``suite run`` per mode and repeat, the two modes back to back (native then
portable, the order flipping every repeat and env, so a load swing of a shared machine lands on both modes of a pair
and a linear drift cancels), the same trial in both (seed 0, the same budget, one final evaluation, no models saved).
Each trial's speed is read from its record: env steps per CPU second of training (every phase but ``eval``; barely
moved by other load on a shared machine) and per wall second. Rows go to ``results/evidence/kernels-speed.csv`` (the
evidence convention: ``target,value,unit,machine,commit,command,date`` and ``load,notes``): per case and mode the
median over repeats; the portable/native ratio of the medians with the ratio of each back-to-back pair (its spread);
and where ``sb3-ppo`` ran too, the ratio of each algorithm to it in each mode, on both clocks.

    python benchmarks/bench_kernels.py --repeats 3 --algo ppo --algo ppo-adaptive-clip --algo ppo-rlvr-prm \
        --algo grpo --algo grpo-pairwise --algo sb3-ppo
    python benchmarks/bench_kernels.py --rerun-cost     # re-running the committed claim tables in portable mode

``--rerun-cost`` sums the single-thread core-hours the records of every committed claim table (``reports/claims/*/
records.db``, all native) recorded, per env and algorithm, and divides each by the latest measured portable/native
ratio of that algorithm on that env (of ``ppo`` where the algorithm was not measured; 1 where the env was not):
the estimated core-hours of running them again in portable mode.
"""

from __future__ import annotations

import argparse
import csv
import json
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
STEPS = {"CartPole-v1": 4096, "LunarLander-v3": 4096, "TextMatch-v0": 4096, "Hopper-v5": 2048, "ALE/Pong-v5": 1024}
"""Budget per env: a few updates at the per-env defaults, short enough for a shared 2-core machine."""
COLUMNS = ["target", "value", "unit", "machine", "commit", "command", "date", "load", "notes"]


def one_study(algos: list[str], envs: list[str], mode: str) -> dict[tuple[str, str], tuple[float, float]]:
    """``{(algo, env): (CPU-time steps/s, wall steps/s)}`` of one fresh ``suite run`` of every case in ``mode`` (one
    trial at a time, each in its own process forked from the mode's forkserver, as any study runs)."""
    from suite.regress.records import load_slot

    budgets = "\n".join(f'"{env}" = {STEPS[env]}' for env in envs)
    study = (f'name = "bench-kernels"\ntier = "smoke"\nseeds = "0"\nn_eval_episodes = 1\neval_freq = 100000000\n'
             f"algos = {json.dumps(algos)}\nenvs = {json.dumps(envs)}\n\n[budgets.smoke]\n{budgets}\n")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-kernels-") as tmp:
        db, path = Path(tmp) / "suite.db", Path(tmp) / "study.toml"
        path.write_text(study)
        argv = [sys.executable, "-m", "suite.cli", "run", str(path), "--kernels", mode, "--db", str(db), "--no-report",
                "--no-save-models", "--quiet", "--workers", "1"]  # fmt: skip
        subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out = {}
        for row in load_slot(db, mode, 0).to_dict("records"):
            if row["status"] != "ok":
                raise SystemExit(f"{row['algo']} {row['env_id']} {mode}: {row['status']} {row['error']}")
            out[row["algo"], row["env_id"]] = (float(row["cpu_steps_per_second"]), float(row["steps_per_second"]))
        return out


def machine() -> str:
    from suite.provenance import _cpu_capability, _cpu_model

    return f"{_cpu_model()} ({_cpu_capability()} native), {os.cpu_count()} CPUs"


def rerun_cost(out: Path) -> list[list[str]]:
    """Rows of :data:`OUT` for re-running the committed claim tables in portable mode (see the module doc)."""
    import glob
    import sqlite3

    latest: dict[str, float] = {}
    with out.open() as f:
        for row in csv.DictReader(f):
            if row["target"].endswith(" portable/native"):
                latest[row["target"].removesuffix(" portable/native")] = float(row["value"])
    native = portable = 0.0
    per_set = []
    for db in sorted(glob.glob(str(REPO / "reports" / "claims" / "*" / "records.db"))):
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        rows = conn.execute("SELECT algo, env_id, SUM(wall_time_s) FROM trials GROUP BY algo, env_id").fetchall()
        conn.close()
        hours = sum(float(s or 0) for _, _, s in rows) / 3600
        estimate = sum(float(s or 0) / latest.get(f"{a} {e}", latest.get(f"ppo {e}", 1.0)) for a, e, s in rows) / 3600
        native, portable = native + hours, portable + estimate
        per_set.append(f"{Path(db).parent.name} {hours:.2f} -> {estimate:.2f}")
    how = "native core-hours over the latest portable/native CPU-speed ratio of the algorithm (else ppo) on the env"
    return [
        ["claim tables, recorded native core-hours", f"{native:.3g}", "core-hours", "; ".join(per_set)],
        ["claim tables, estimated portable core-hours", f"{portable:.3g}", "core-hours", how],
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algo", action="append", help="algorithm (repeatable; default ppo and sb3-ppo)")
    ap.add_argument("--env", action="append", help=f"env (repeatable; default {', '.join(STEPS)})")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--rerun-cost", action="store_true", help="estimate re-running the committed claim tables portable")
    args = ap.parse_args()
    if args.rerun_cost:
        git = ["git", "rev-parse", "--short=12", "HEAD"]
        commit = subprocess.run(git, cwd=REPO, capture_output=True, text=True).stdout.strip()
        date = datetime.now(UTC).isoformat(timespec="seconds")
        cost = [[t, v, u, machine(), commit, "python benchmarks/bench_kernels.py --rerun-cost", date, "", n]
                for t, v, u, n in rerun_cost(args.out)]  # fmt: skip
        with args.out.open("a", newline="") as f:
            csv.writer(f).writerows(cost)
        for row in cost:
            print(row[0], row[1], row[8])
        return 0
    algos, envs = args.algo or ["ppo", "sb3-ppo"], args.env or list(STEPS)
    git = ["git", "rev-parse", "--short=12", "HEAD"]
    commit = subprocess.run(git, cwd=REPO, capture_output=True, text=True).stdout.strip()
    command = "python benchmarks/bench_kernels.py " + " ".join(sys.argv[1:])
    where = machine()
    speeds: dict[tuple[str, str, str], list[float]] = {}
    walls: dict[tuple[str, str, str], list[float]] = {}
    loads: list[float] = []
    for r in range(args.repeats):
        for i, env in enumerate(envs):
            for mode in ("native", "portable") if (r + i) % 2 == 0 else ("portable", "native"):
                loads.append(os.getloadavg()[0])
                for (algo, env_id), (cpu, wall) in one_study(algos, [env], mode).items():
                    speeds.setdefault((algo, env_id, mode), []).append(cpu)
                    walls.setdefault((algo, env_id, mode), []).append(wall)
                    print(f"{algo} {env_id} {mode}: {cpu:.0f} steps/CPU-s, {wall:.0f} steps/s "
                          f"(repeat {r}, load {loads[-1]:.1f})", flush=True)  # fmt: skip
            loads.append(os.getloadavg()[0])
    date = datetime.now(UTC).isoformat(timespec="seconds")
    load = f"{min(loads):.1f}-{max(loads):.1f}"
    rows = []

    def add(target: str, value: float, unit: str, notes: str) -> None:
        rows.append([target, f"{value:.4g}", unit, where, commit, command, date, load, notes])

    def listed(values: list[float], fmt: str = ".0f") -> str:
        return ", ".join(f"{x:{fmt}}" for x in values)

    med = {k: statistics.median(v) for k, v in speeds.items()}
    wall_med = {k: statistics.median(v) for k, v in walls.items()}
    for (algo, env, mode), value in sorted(med.items()):
        notes = f"median of {listed(speeds[algo, env, mode])}; wall steps/s {listed(walls[algo, env, mode])}"
        add(f"{algo} {env} {mode}", value, "steps per CPU second", notes)
    for algo in algos:
        for env in envs:
            pairs = [p / n for p, n in zip(speeds[algo, env, "portable"], speeds[algo, env, "native"], strict=True)]
            wall_pairs = [p / n for p, n in zip(walls[algo, env, "portable"], walls[algo, env, "native"], strict=True)]
            add(
                f"{algo} {env} portable/native",
                med[algo, env, "portable"] / med[algo, env, "native"],
                "ratio",
                f"CPU-time speed, portable over native (medians); back-to-back pairs {listed(pairs, '.3f')} "
                f"(range {min(pairs):.3f}-{max(pairs):.3f}); wall clock "
                f"{wall_med[algo, env, 'portable'] / wall_med[algo, env, 'native']:.3f} (pairs {listed(wall_pairs, '.2f')})",
            )
            if algo != "sb3-ppo" and "sb3-ppo" in algos:
                for mode in ("native", "portable"):
                    add(
                        f"{algo}/sb3-ppo {env} {mode}",
                        med[algo, env, mode] / med["sb3-ppo", env, mode],
                        "ratio",
                        f"CPU-time speed of {algo} over sb3-ppo, both {mode} (medians); wall clock "
                        f"{wall_med[algo, env, mode] / wall_med['sb3-ppo', env, mode]:.3f}",
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
