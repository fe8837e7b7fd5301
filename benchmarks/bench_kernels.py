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
    python benchmarks/bench_kernels.py --pool           # the pooled rows of the latest run in the file (no run)
    python benchmarks/bench_kernels.py --rerun-cost     # re-running the committed claim tables in portable mode

``--rerun-cost`` estimates the single-thread core-hours of running every committed claim table again in portable
mode, over all its records (``reports/claims/<set>/records.db`` and its detailed runs' ``*/records.db``): a native
trial is priced by the plan's trial-time model (training speed and overhead, :mod:`suite.plan`) fitted to the
portable sets' records of its algorithm and env where there are some (the native records' own times can be stale:
made on a busier machine, or before a faster core), else
at its recorded time over the latest measured portable/native ratio of that algorithm on that env (of ``sb3-ppo``
for another ``sb3-*`` algorithm, of ``ppo`` for any other one not measured; 1 where the env was not). A set whose
claim-set file says ``kernels = "portable"`` has been re-run: its portable records' recorded core-hours are given.
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
    import sqlite3

    from suite.claims import load_claim_set

    latest: dict[str, float] = {}
    with out.open() as f:
        for row in csv.DictReader(f):
            if row["target"].endswith(" portable/native"):
                latest[row["target"].removesuffix(" portable/native")] = float(row["value"])

    def ratio(algo: str, env: str) -> float:
        fallback = "sb3-ppo" if algo.startswith("sb3-") else "ppo"
        return latest.get(f"{algo} {env}", latest.get(f"{fallback} {env}", 1.0))

    records: dict[str, list[tuple[str, str, int, float, str, str]]] = {}  # set -> (algo, env, steps, s, mode, version)
    for db in sorted((REPO / "reports" / "claims").glob("*/**/records.db")):  # the top level and every detailed run
        name = db.relative_to(REPO / "reports" / "claims").parts[0]
        conn = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
        rows = conn.execute("SELECT algo, env_id, steps, wall_time_s, provenance, algo_version FROM trials "
                            "WHERE status = 'ok'").fetchall()  # fmt: skip
        conn.close()
        for algo, env, steps, seconds, provenance, version in rows:
            mode = (json.loads(provenance or "{}").get("kernels") or {}).get("mode", "native")
            records.setdefault(name, []).append((algo, env, int(steps or 0), float(seconds or 0), mode, version))
    # today's portable speed where committed portable records measured it: the plan's trial-time model (training
    # speed and a fixed overhead, suite.plan) fitted to the portable sets' records, which hold portable trials only
    from suite.plan import recorded_speeds

    pairs = {(algo, env) for rows in records.values() for algo, env, *_ in rows}
    models = {}
    for name in sorted(records):
        if load_claim_set(name).kernels == "portable":
            for pair, model in recorded_speeds(None, pairs, REPO / "reports" / "claims" / name).models.items():
                models.setdefault(pair, model)

    native = estimate_all = left = 0.0
    per_set = []
    for name, rows in sorted(records.items()):
        hours = estimate = measured = 0.0
        priced = 0
        for algo, env, steps, seconds, mode, _ in rows:
            if mode == "portable":
                measured += seconds / 3600
                continue
            hours += seconds / 3600
            if (algo, env) in models:  # priced at the portable records' speed (today's code, machines and mode)
                estimate += models[algo, env].seconds(steps) / 3600
                priced += 1
            else:
                estimate += seconds / ratio(algo, env) / 3600
        native, estimate_all = native + hours, estimate_all + estimate
        n_native = sum(1 for r in rows if r[4] != "portable")
        if load_claim_set(name).kernels == "portable":
            per_set.append(f"{name} portable: {measured:.3f} recorded")
        else:
            left += estimate
            per_set.append(
                f"{name} {hours:.2f} -> {estimate:.2f} ({priced} of {n_native} trials at a portable record's speed)"
            )
    how = (
        "every records.db of each set (top level and detailed runs); a native trial priced by the trial-time model "
        "(training speed and overhead, suite.plan) of the portable sets' records of its algorithm and env where there "
        "are some, else its recorded time over the latest portable/native CPU-speed ratio (sb3-ppo's or ppo's where "
        "unmeasured)"
    )
    return [
        ["claim tables, recorded native core-hours", f"{native:.3g}", "core-hours", "; ".join(per_set)],
        ["claim tables, estimated portable core-hours", f"{estimate_all:.3g}", "core-hours", how],
        ["claim tables still native, estimated portable core-hours", f"{left:.3g}", "core-hours",
         "the sets whose claim-set file does not say kernels = \"portable\""],
    ]  # fmt: skip


def pooled(pairs: dict[tuple[str, str], list[float]]) -> list[tuple[str, float, str]]:
    """``(target, geometric mean, notes)`` of the portable/native ratios of the back-to-back pairs, pooled: per env over
    the suite's own algorithms (every algorithm but ``sb3-*``), per algorithm over the envs, and all of the suite's
    together; each with the 95% t-interval of the mean log ratio (pairs taken as independent; on a shared machine a
    pair's ratio carries the load's noise, which ``sb3-ppo``'s own pooled ratio shows)."""
    import math

    from scipy import stats

    groups: dict[str, list[float]] = {}
    for (algo, env), ratios in sorted(pairs.items()):
        own = not algo.startswith("sb3-")
        for key in [f"{algo} all envs", *([f"suite algorithms {env}", "suite algorithms all envs"] if own else [])]:
            groups.setdefault(key, []).extend(ratios)
    out = []
    for key, ratios in groups.items():
        logs = [math.log(r) for r in ratios]
        mean, n = statistics.fmean(logs), len(logs)
        half = stats.t.ppf(0.975, n - 1) * statistics.stdev(logs) / math.sqrt(n) if n > 1 else float("nan")
        interval = f"[{math.exp(mean - half):.3f}, {math.exp(mean + half):.3f}]"
        notes = f"geometric mean of {n} back-to-back pairs' CPU-time ratios, 95% t-interval {interval}, range "
        notes += f"{min(ratios):.3f}-{max(ratios):.3f}"
        out.append((f"{key} portable/native (pooled)", math.exp(mean), notes))
    return out


def pairs_in(out: Path) -> tuple[dict[tuple[str, str], list[float]], dict[str, str]]:
    """The back-to-back pairs of the latest ``ALGO ENV portable/native`` rows of ``out`` (as this script writes them
    in their notes), and that run's ``commit``, ``command``, ``date`` and ``load``."""
    latest: dict[str, dict[str, str]] = {}
    with out.open() as f:
        for row in csv.DictReader(f):
            if row["target"].endswith(" portable/native") and "back-to-back pairs " in row["notes"]:
                latest[row["target"]] = row
    if not latest:
        raise SystemExit(f"no portable/native rows with back-to-back pairs in {out}")
    last = max(latest.values(), key=lambda r: r["date"])
    pairs = {}
    for target, row in latest.items():
        if row["date"] == last["date"]:
            algo, env = target.removesuffix(" portable/native").split(" ", 1)
            listed = row["notes"].split("back-to-back pairs ", 1)[1].split(" (range", 1)[0]
            pairs[algo, env] = [float(x) for x in listed.split(", ")]
    return pairs, {k: last[k] for k in ("commit", "command", "date", "load")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algo", action="append", help="algorithm (repeatable; default ppo and sb3-ppo)")
    ap.add_argument("--env", action="append", help=f"env (repeatable; default {', '.join(STEPS)})")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--rerun-cost", action="store_true", help="estimate re-running the committed claim tables portable")
    ap.add_argument("--pool", action="store_true", help="add the pooled rows of the latest run in --out (no run)")
    args = ap.parse_args()
    if args.pool:
        pairs, run = pairs_in(args.out)
        rows = [[t, f"{v:.4g}", "ratio", machine(), run["commit"], run["command"], run["date"], run["load"], n]
                for t, v, n in pooled(pairs)]  # fmt: skip
        with args.out.open("a", newline="") as f:
            csv.writer(f).writerows(rows)
        for row in rows:
            print(row[0], row[1], row[8])
        return 0
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
    all_pairs: dict[tuple[str, str], list[float]] = {}
    for algo in algos:
        for env in envs:
            pairs = [p / n for p, n in zip(speeds[algo, env, "portable"], speeds[algo, env, "native"], strict=True)]
            all_pairs[algo, env] = pairs
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
    for target, value, notes in pooled(all_pairs):
        add(target, value, "ratio", notes)
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
