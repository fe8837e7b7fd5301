"""Benchmark: the suite's share of the main job before/after, its trials paired in time, with a confidence interval.

The main job's share target (issue 11: the suite's own algorithms' trial time in ``suite run`` at least 3x faster)
is measured whole by ``bench_mainjob.py``: four main jobs, after/before/before/after. On the shared 2-core VMs of
this project one such run pins the share to no better than ~12%: the machine's speed drifts in the minutes between
a trial's "before" and its "after" (five runs on one Xeon on 2026-12-05: 2.93-3.30x; same code in the last three).

This script measures the same 45 trials (``benchmarks/suite-share.toml``: the default study's trials of the suite's
own algorithms, the same envs, seeds, tier and evaluation, without the SB3 baselines) with ``suite regress BEFORE
AFTER --schedule concurrent``: each unit (one algorithm on one env, every seed) runs at both commits at the same
moment, one CPU each, each commit through its own ``suite run`` (its own trial runner) over this interpreter's
installed libraries (``--deps-env``), ``--repeats`` times. A drift of the machine then hits a trial and its twin
alike. The share is the ratio of the trials' summed wall times (``wall_time_s``, as ``bench_mainjob.py`` sums
them), per repeat and over all; its 95% interval is a percentile bootstrap over the 45 trials (each trial's times
in every repeat resampled together, 10,000 resamples).

How it differs from the share inside a main job: a trial here runs beside its twin of the other commit, not beside
the job's other trials; and at each unit the faster side's run ends first, so the slower "before" side runs the
rest of its unit alone on the machine. Both make "before" faster than it is in a main job, so the figure leans
against the speed-up.

    python benchmarks/bench_suite_share.py --before 01b7274 --after HEAD --repeats 3 --out results/speed/share.csv
    python benchmarks/bench_suite_share.py --summarize RUN_FOLDER     # re-read a finished (or partial) run

``--work`` (default a temporary folder) is the ``suite regress`` run folder: ``base/r<k>/suite.db`` and
``head/r<k>/suite.db``; the same command with the same ``--work`` resumes it. Outputs (``--out X.csv``): ``X.csv`` (trial time
per algorithm and repeat, then the summary) and ``X.json`` (every trial's times and the summary).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "benchmarks" / "suite-share.toml"
SIDES = (("base", "before"), ("head", "after"))
"""``suite regress``'s side folders and what they are here."""

Key = tuple[str, str, int]
"""A trial: (algorithm, env label, seed)."""


def trial_walls(db: Path) -> dict[Key, float]:
    """Wall time of every finished trial of a results database."""
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT algo, env_label, seed, wall_time_s FROM trials WHERE status = 'ok'").fetchall()
    return {(str(a), str(e), int(s)): float(w) for a, e, s, w in rows}


def collect(run: Path) -> list[dict[str, Any]]:
    """Per repeat of a ``suite regress`` run folder: ``{"repeat": k, "before": {key: s}, "after": {key: s}}``."""
    repeats = sorted({int(p.name[1:]) for side, _ in SIDES for p in (run / side).glob("r[0-9]*") if p.name[1:].isdigit()})
    out = []
    for k in repeats:
        row: dict[str, Any] = {"repeat": k}
        for side, name in SIDES:
            db = run / side / f"r{k}" / "suite.db"
            row[name] = trial_walls(db) if db.is_file() else {}
        out.append(row)
    return out


def revisions(run: Path) -> dict[str, str] | None:
    """``{"before": commit, "after": commit}`` from the run folder's ``run.json`` (None where it has none)."""
    try:
        revs = json.loads((run / "run.json").read_text())["revisions"]
        return {name: str(revs[side]["commit"]) for side, name in SIDES}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def summarize(repeats: list[dict[str, Any]], n_boot: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """The share (before / after trial time) per repeat, over all repeats, per algorithm, and its bootstrap CI.

    Only trials finished at both commits in a repeat count; a repeat is *complete* when it holds every trial that any
    repeat holds. The CI resamples the trials present in every repeat (each with its times of all repeats)."""
    per_repeat = []
    keys_all: set[Key] = set()
    for r in repeats:
        keys = sorted(set(r["before"]) & set(r["after"]))
        keys_all |= set(keys)
        r["keys"] = keys
    for r in repeats:
        keys = r["keys"]
        if not keys:
            continue
        b = sum(r["before"][k] for k in keys)
        a = sum(r["after"][k] for k in keys)
        per_repeat.append({"repeat": r["repeat"], "trials": len(keys), "complete": len(keys) == len(keys_all),
                           "before_s": b, "after_s": a, "share": b / a})  # fmt: skip
    if not per_repeat:
        raise ValueError("no trial finished at both commits")
    total_b = sum(p["before_s"] for p in per_repeat)
    total_a = sum(p["after_s"] for p in per_repeat)
    per_algo: dict[str, dict[str, float]] = {}
    for r in repeats:
        for k in r["keys"]:
            v = per_algo.setdefault(k[0], {"before_s": 0.0, "after_s": 0.0})
            v["before_s"] += r["before"][k]
            v["after_s"] += r["after"][k]
    for v in per_algo.values():
        v["share"] = v["before_s"] / v["after_s"]
    common = sorted(set.intersection(*(set(r["keys"]) for r in repeats if r["keys"])))
    ci = None
    if len(common) >= 2:
        used = [r for r in repeats if r["keys"]]
        before = np.array([sum(r["before"][k] for r in used) for k in common])
        after = np.array([sum(r["after"][k] for r in used) for k in common])
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(common), size=(n_boot, len(common)))
        boot = before[idx].sum(1) / after[idx].sum(1)
        lo, hi = np.percentile(boot, [2.5, 97.5])
        ci = {"low": float(lo), "high": float(hi), "trials": len(common), "resamples": n_boot,
              "estimate": float(before.sum() / after.sum())}  # fmt: skip
    complete = [p["share"] for p in per_repeat if p["complete"]]
    return {
        "repeats": per_repeat,
        "share": total_b / total_a,
        "before_s": total_b,
        "after_s": total_a,
        "complete_repeats": len(complete),
        "share_range": [min(complete), max(complete)] if complete else None,
        "ci95": ci,
        "per_algorithm": dict(sorted(per_algo.items())),
    }


def report(summary: dict[str, Any]) -> str:
    out = []
    for p in summary["repeats"]:
        note = "" if p["complete"] else "  (incomplete)"
        out.append(f"repeat {p['repeat']}: {p['trials']} trials, before {p['before_s']:.1f} s, after "
                   f"{p['after_s']:.1f} s: {p['share']:.2f}x{note}")  # fmt: skip
    ci = summary["ci95"]
    line = f"suite share over all repeats: {summary['before_s']:.1f} -> {summary['after_s']:.1f} s: {summary['share']:.2f}x"
    if ci is not None:
        line += f", 95% CI [{ci['low']:.2f}, {ci['high']:.2f}] (bootstrap over {ci['trials']} trials)"
    out.append(line)
    for a, v in summary["per_algorithm"].items():
        out.append(f"  {a:<20}{v['before_s']:>9.1f} ->{v['after_s']:>8.1f} s  {v['share']:.2f}x")
    return "\n".join(out)


def write_csv(repeats: list[dict[str, Any]], summary: dict[str, Any], path: Path) -> None:
    cols = [f"{name}_r{r['repeat']}" for r in repeats for _, name in SIDES]
    algos = sorted({k[0] for r in repeats for k in r.get("keys", [])})
    lines = ["algo," + ",".join(cols)]
    for a in algos:
        vals = [sum(r[name][k] for k in r["keys"] if k[0] == a) for r in repeats for _, name in SIDES]
        lines.append(a + "," + ",".join(f"{v:.1f}" for v in vals))
    ci = summary["ci95"]
    lines.append(f"# suite share before/after: {summary['share']:.3f}x over {len(summary['repeats'])} repeats"
                 + (f", 95% CI [{ci['low']:.3f}, {ci['high']:.3f}]" if ci else ""))  # fmt: skip
    lines += [f"# repeat {p['repeat']}: {p['share']:.3f}x ({p['trials']} trials)" for p in summary["repeats"]]
    path.write_text("\n".join(lines) + "\n")


def run_regress(before: str, after: str, repeats: int, work: Path) -> int:
    """``suite regress BEFORE AFTER`` on the share study, concurrent; its exit status (0 or 1 both mean it ran:
    1 says HEAD is worse somewhere, e.g. returns that moved with an algorithm's version)."""
    cli = "from suite.cli import console_main; console_main()"
    argv = [sys.executable, "-c", cli, "regress", before, after, "--study", str(STUDY), "--schedule", "concurrent",
            "--repeats", str(repeats), "--max-repeats", str(repeats), "--deps-env", sys.prefix, "--no-report",
            "-o", str(work)]  # fmt: skip
    return subprocess.run(argv, cwd=REPO).returncode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", default="01b7274", help="commit before (default: 01b7274, the one before the core rewrite)")
    p.add_argument("--after", default="HEAD", help="commit after (default: HEAD)")
    p.add_argument("--repeats", type=int, default=3, help="runs of every trial per commit (default 3)")
    p.add_argument("--work", type=Path, help="the regress run folder (resumable); default: a temporary one")
    p.add_argument("--out", type=Path, help="write the CSV here (and the JSON beside it)")
    p.add_argument("--summarize", type=Path, metavar="RUN_FOLDER", help="only summarise a run folder")
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error("--repeats must be >= 1")
    if a.summarize:
        run = a.summarize
        if not (run / "base").is_dir() or not (run / "head").is_dir():
            print(f"bench_suite_share: error: {run} is not a 'suite regress' run folder (no base/ and head/)", file=sys.stderr)
            return 2
    else:
        run = a.work or Path(tempfile.mkdtemp(prefix="bench-suite-share-"))
        rc = run_regress(a.before, a.after, a.repeats, run)
        if rc == 130:  # Ctrl-C: the finished trials are kept in the run folder
            print(f"bench_suite_share: interrupted; rerun with --work {run} to resume", file=sys.stderr)
            return rc
        if rc not in (0, 1):  # 'suite regress' said why in its own error line (a bad revision, a failed build)
            return rc
        print(f"run folder: {run}")
    repeats = collect(run)
    commits = revisions(run)
    if commits:
        print(f"before {commits['before'][:7]}, after {commits['after'][:7]}")
    try:
        summary = summarize(repeats)
    except ValueError as exc:
        print(f"bench_suite_share: error: {exc} in {run}", file=sys.stderr)
        return 2
    print(report(summary))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        write_csv(repeats, summary, a.out)
        trials = [{"repeat": r["repeat"], "algo": k[0], "env": k[1], "seed": k[2], "before_s": r["before"][k],
                   "after_s": r["after"][k]} for r in repeats for k in r["keys"]]  # fmt: skip
        doc = {"commits": commits, "trials": trials, "summary": summary}
        a.out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
        print(f"wrote {a.out} and {a.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
