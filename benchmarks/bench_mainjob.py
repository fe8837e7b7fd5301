"""Benchmark: the main job (``suite run``: the default study and its report) at two commits, before/after, one command.

Each commit is exported with ``git archive`` into a scratch folder and run there as a whole ``suite run --quiet --db
<scratch db>`` with ``PYTHONPATH`` set to the export, over this interpreter's environment (so both sides use the same
installed libraries: only the suite's code differs). The runs alternate in the given ``--order`` (default ``ABBA``,
A = after: a drift of the machine's speed during the measurement hits both sides alike) and ``--repeat`` times.

Per run it records the whole job's wall time, the load average, and from the run's database the trial time of every
algorithm. The summary separates the suite's own algorithms from the SB3 baselines (``sb3-*``), whose code is the
same at both commits, but whose env steps run the suite's own vector envs (:class:`suite.algorithms.sb3.SuiteVecEnv`),
which a commit may speed up: the **control** is therefore the baselines' *update* time (``update_time_s``: SB3's
learning code, the same at both sides), not their whole trial time. On a shared or virtual machine the same trial's
time moves by tens of percent within an hour (measured 2026-12-03: one ``sb3-ppo`` CartPole trial 23.5-35.2 s in
six runs), so besides the raw ratios the summary gives each run's ratios normalised by its control (``control = SB3
update time of the run / mean over all runs``; a run's normalised wall is its wall / its control), which cancel a
drift of the machine's speed that hits every trial of a run alike, and says so when the control itself moved. Runs
recorded without it (older ``runs.json``) fall back to the baselines' trial time.

    python benchmarks/bench_mainjob.py --before 01b7274 --after HEAD                     # ~4 main jobs
    python benchmarks/bench_mainjob.py --before 01b7274 --after HEAD --repeat 2 --out results/speed/mainjob.csv
    python benchmarks/bench_mainjob.py --summarize scratch/runs.json                     # re-read recorded runs

Outputs (``--out X.csv``): ``X.csv`` (trial time per algorithm and run, then the summary rows, the layout of
``results/speed/mainjob-abba-*.csv``) and ``X.json`` (the runs and the summary). The scratch folder (``--work``,
default a temporary one) keeps ``runs.json`` and each run's database and output.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def is_baseline(algo: str) -> bool:
    """The SB3 baselines: the same code at both commits (the control), not the suite's to speed up."""
    return algo.startswith("sb3-")


def export(rev: str, dest: Path) -> str:
    """``git archive rev`` extracted into ``dest``; returns the full commit id."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                            capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    shutil.rmtree(dest, ignore_errors=True)  # a reused --work must not mix in files of an earlier export
    dest.mkdir(parents=True)
    with tempfile.TemporaryFile() as tar:
        subprocess.run(["git", "-C", str(REPO), "archive", commit], stdout=tar, check=True)
        tar.seek(0)
        with tarfile.open(fileobj=tar) as tf:
            tf.extractall(dest, filter="data")
    return commit


def run_job(tree: Path, db: Path, log: Path, extra: list[str]) -> dict[str, Any]:
    """One main job in ``tree`` (an export); its wall time and the load average around it."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("SUITE_DB", None)
    cli = "from suite.cli import console_main; console_main()"  # the `suite` command, from the export
    argv = [sys.executable, "-c", cli, "run", "--quiet", "--db", str(db), *extra]
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    with log.open("w") as out:
        rc = subprocess.run(argv, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - t0
    return {"rc": rc, "wall_s": round(wall, 2), "load_before": load0, "load_after": os.getloadavg()[0]}


def trial_times(db: Path) -> dict[str, float]:
    """Trial wall time summed per algorithm (``wall_time_s`` of the run's trial records)."""
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT algo, SUM(wall_time_s) FROM trials GROUP BY algo").fetchall()
    return {algo: float(s or 0.0) for algo, s in rows}


def baseline_update_time(db: Path) -> float:
    """The SB3 baselines' update time summed over the run's trials (``update_time_s``): the control."""
    with sqlite3.connect(db) as con:
        (s,) = con.execute("SELECT SUM(update_time_s) FROM trials WHERE algo LIKE 'sb3-%'").fetchone()
    return float(s or 0.0)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Ratios after/before from runs ``{side: 'before'|'after', wall_s, trials: {algo: s}, control_s}`` (see the
    module doc; without ``control_s`` in every run the control is the baselines' trial time)."""
    for r in runs:
        r["suite_s"] = sum(s for a, s in r["trials"].items() if not is_baseline(a))
        r["baselines_s"] = sum(s for a, s in r["trials"].items() if is_baseline(a))
    key = "control_s" if all(r.get("control_s") for r in runs) else "baselines_s"
    mean_control = statistics.fmean(r[key] for r in runs)
    for r in runs:
        r["control"] = r[key] / mean_control if mean_control > 0 else 1.0
        r["wall_normalised_s"] = r["wall_s"] / r["control"]
        r["suite_normalised_s"] = r["suite_s"] / r["control"]
    before = [r for r in runs if r["side"] == "before"]
    after = [r for r in runs if r["side"] == "after"]
    if not before or not after:
        raise ValueError("need at least one run of each side")

    def mean(rs: list[dict[str, Any]], key: str) -> float:
        return statistics.fmean(r[key] for r in rs)

    algos = sorted({a for r in runs for a in r["trials"]})
    per_algo = {}
    for a in algos:
        b = statistics.fmean(r["trials"].get(a, 0.0) for r in before)
        f = statistics.fmean(r["trials"].get(a, 0.0) for r in after)
        per_algo[a] = {"before_s": b, "after_s": f, "speedup": b / f if f > 0 else None}
    controls = [r["control"] for r in runs]
    return {
        "runs": len(runs),
        "whole_job": {
            "before_s": mean(before, "wall_s"), "after_s": mean(after, "wall_s"),
            "ratio": mean(after, "wall_s") / mean(before, "wall_s"),
            "ratio_normalised": mean(after, "wall_normalised_s") / mean(before, "wall_normalised_s"),
        },
        "suite_share": {
            "before_s": mean(before, "suite_s"), "after_s": mean(after, "suite_s"),
            "speedup": mean(before, "suite_s") / mean(after, "suite_s"),
            "speedup_normalised": mean(before, "suite_normalised_s") / mean(after, "suite_normalised_s"),
        },
        "control": {
            "measure": "sb3 update time" if key == "control_s" else "sb3 trial time",
            "before_s": mean(before, key), "after_s": mean(after, key),
            "ratio": mean(after, key) / mean(before, key),
            "spread": max(controls) / min(controls) if min(controls) > 0 else None,
            "baselines_before_s": mean(before, "baselines_s"), "baselines_after_s": mean(after, "baselines_s"),
        },
        "per_algorithm": per_algo,
    }  # fmt: skip


def write_csv(runs: list[dict[str, Any]], summary: dict[str, Any], path: Path) -> None:
    names = [f"{r['side']}{i + 1}_{r['commit'][:7]}" for i, r in enumerate(runs)]
    algos = sorted({a for r in runs for a in r["trials"]})
    lines = ["algo," + ",".join(names)]
    lines += [a + "," + ",".join(f"{r['trials'].get(a, 0.0):.1f}" for r in runs) for a in algos]
    for label, key in (("suite algorithms (trial time)", "suite_s"), ("sb3 baselines (trial time)", "baselines_s"),
                       ("sb3 baselines (update time)", "control_s"), ("whole job (wall)", "wall_s"),
                       ("control (" + summary["control"]["measure"] + " / mean)", "control"),
                       ("whole job normalised by the control", "wall_normalised_s")):  # fmt: skip
        if all(key in r for r in runs):
            lines.append(label + "," + ",".join(f"{r[key]:.3f}" if key == "control" else f"{r[key]:.1f}" for r in runs))
    w, s, c = summary["whole_job"], summary["suite_share"], summary["control"]
    lines += [
        f"# whole job after/before: {w['ratio']:.3f} raw, {w['ratio_normalised']:.3f} normalised by the control",
        f"# suite share before/after: {s['speedup']:.2f}x raw, {s['speedup_normalised']:.2f}x normalised",
        f"# control ({c['measure']}) after/before: {c['ratio']:.3f}; max/min over runs {c['spread']:.3f}",
    ]
    path.write_text("\n".join(lines) + "\n")


def report(summary: dict[str, Any]) -> str:
    w, s, c = summary["whole_job"], summary["suite_share"], summary["control"]
    out = [
        f"whole job: before {w['before_s']:.1f} s, after {w['after_s']:.1f} s: {w['ratio']:.3f}x raw, "
        f"{w['ratio_normalised']:.3f}x normalised by the SB3 control",
        f"suite's algorithms' trial time: {s['before_s']:.1f} -> {s['after_s']:.1f} s: {s['speedup']:.2f}x raw, "
        f"{s['speedup_normalised']:.2f}x normalised",
        f"control ({c['measure']} of the SB3 baselines, their own code): {c['before_s']:.1f} -> "
        f"{c['after_s']:.1f} s ({c['ratio']:.3f}x); max/min over runs {c['spread']:.3f}"
        + ("  <- the machine's speed moved: the normalised figures are the fairer ones" if (c["spread"] or 1) > 1.1 else ""),
        f"SB3 baselines' trial time (their env steps run the suite's envs): {c['baselines_before_s']:.1f} -> "
        f"{c['baselines_after_s']:.1f} s",
    ]  # fmt: skip
    for a, v in summary["per_algorithm"].items():
        sp = v["speedup"]
        out.append(f"  {a:<20}{v['before_s']:>9.1f} ->{v['after_s']:>8.1f} s" + (f"  {sp:.2f}x" if sp else ""))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", default="01b7274", help="commit before (default: 01b7274, the one before the core rewrite)")
    p.add_argument("--after", default="HEAD", help="commit after (default: HEAD)")
    p.add_argument("--order", default="ABBA", help="run order, A = after, B = before (default ABBA)")
    p.add_argument("--repeat", type=int, default=1, help="times to run the order (default 1)")
    p.add_argument("--work", type=Path, help="scratch folder (exports, databases, runs.json); default: a temporary one")
    p.add_argument("--out", type=Path, help="write the CSV here (and the JSON beside it)")
    p.add_argument("--summarize", type=Path, metavar="RUNS_JSON", help="only summarise recorded runs (a runs.json)")
    p.add_argument("suite_args", nargs="*", help="after --: more 'suite run' arguments for both sides")
    a = p.parse_args(argv)
    if a.summarize:
        if not a.summarize.is_file():
            print(f"bench_mainjob: error: no runs file {a.summarize}", file=sys.stderr)
            return 2
        runs = json.loads(a.summarize.read_text())
        for r in runs:
            db = a.summarize.parent / r["db"] if r.get("db") else None
            if "trials" not in r:
                if db is None or not db.is_file():
                    print(f"bench_mainjob: error: run database {db or '(none named)'} is missing", file=sys.stderr)
                    return 2
                r["trials"] = trial_times(db)
            if "control_s" not in r and db is not None and db.is_file():
                r["control_s"] = baseline_update_time(db)
        if {r.get("side") for r in runs} != {"before", "after"}:
            print(f"bench_mainjob: error: {a.summarize} needs runs of both sides (before and after)", file=sys.stderr)
            return 2
    else:
        if set(a.order) != {"A", "B"} or a.repeat < 1:
            p.error("--order takes A and B, each at least once (A = after); --repeat >= 1")
        work = a.work or Path(tempfile.mkdtemp(prefix="bench-mainjob-"))
        work.mkdir(parents=True, exist_ok=True)
        commits = {}
        for side, rev in (("before", a.before), ("after", a.after)):
            try:
                commits[side] = export(rev, work / side)
            except subprocess.CalledProcessError:
                print(f"bench_mainjob: error: --{side} {rev!r} is not a commit of {REPO}", file=sys.stderr)
                return 2
        runs = []
        for i, letter in enumerate(a.order * a.repeat):
            side = "after" if letter == "A" else "before"
            db, log = work / f"run{i + 1}-{side}.db", work / f"run{i + 1}-{side}.log"
            db.unlink(missing_ok=True)
            print(f"run {i + 1}/{len(a.order) * a.repeat}: {side} ({commits[side][:7]}) ...", flush=True)
            try:
                job = run_job(work / side, db, log, a.suite_args)
            except KeyboardInterrupt:
                done = work / "runs.json"
                print(f"bench_mainjob: interrupted; the {len(runs)} finished runs are in {done}", file=sys.stderr)
                return 130
            r = {"side": side, "commit": commits[side], "db": db.name, **job}
            if r["rc"] != 0:
                print(f"bench_mainjob: the {side} run failed (exit {r['rc']}); see {log}", file=sys.stderr)
                return 1
            r["trials"] = trial_times(db)
            r["control_s"] = baseline_update_time(db)
            runs.append(r)
            print(f"  {r['wall_s']:.1f} s, load {r['load_before']:.2f} -> {r['load_after']:.2f}", flush=True)
            (work / "runs.json").write_text(json.dumps(runs, indent=1))
        print(f"runs in {work}")
    summary = summarize(runs)
    print(report(summary))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        write_csv(runs, summary, a.out)
        a.out.with_suffix(".json").write_text(json.dumps({"runs": runs, "summary": summary}, indent=1))
        print(f"wrote {a.out} and {a.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
