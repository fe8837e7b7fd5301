"""Run the regression gate along a list of revisions: which one changed how often an algorithm reaches its target.

For each consecutive pair of ``--revisions`` this runs ``suite regress OLD NEW --study STUDY --repeats 1`` (the
gate's own builds, runs and returns test; ``--deps-env`` shares one environment of packages) and reads its
``runs.csv``: per revision, the seeds whose final evaluation reached ``--target`` (TextMatch-v0's 5.0 = every letter
of ``hello``), their mean final return, and the gate's returns verdict of the pair; then a two-sided Fisher exact
test of the reached counts of the first and last revision (scipy).

    python benchmarks/gate_history.py --revisions 68b33b4^,68b33b4 --study /tmp/pairwise-hello.toml \\
        --deps-env .venv --out /tmp/gate-history

A study for it: ``grpo-pairwise`` on ``TextMatch-v0`` at 30,000 steps, the seeds to count (the study file the gate
writes keeps only keys every revision reads, so old revisions run it unchanged).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import scipy.stats

REPO = Path(__file__).resolve().parents[1]


def gate(old: str, new: str, study: str, seeds: str | None, deps_env: Path | None, out: Path) -> tuple[int, pd.DataFrame]:
    argv = [sys.executable, "-m", "suite.cli", "regress", old, new, "--study", study, "--repeats", "1",
            "--max-repeats", "1", "-o", str(out), "--quiet", "--no-report"]  # fmt: skip
    if seeds:
        argv += ["--seeds", seeds]
    if deps_env is not None:
        argv += ["--deps-env", str(deps_env)]
    print("+", " ".join(argv[1:]), file=sys.stderr, flush=True)
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    if not (out / "verdicts.csv").is_file():
        raise SystemExit(f"gate_history: suite regress {old} {new} wrote no verdicts:\n{done.stderr[-2000:]}")
    print(done.stdout, file=sys.stderr)
    return done.returncode, pd.read_csv(out / "runs.csv", dtype={"algo": str, "side": str})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revisions", required=True, help="comma-separated, oldest first")
    parser.add_argument("--study", required=True, help="study name or TOML file")
    parser.add_argument("--seeds", help="seed spec (default: the study's)")
    parser.add_argument("--target", type=float, default=5.0, help="a seed 'reaches' when its final return >= this")
    parser.add_argument("--deps-env", type=Path)
    parser.add_argument("--out", type=Path, default=Path("/tmp/gate-history"))
    args = parser.parse_args()
    revs = [r.strip() for r in args.revisions.split(",") if r.strip()]
    study = str(Path(args.study).absolute()) if Path(args.study).is_file() else args.study
    deps = args.deps_env.absolute() if args.deps_env else None
    counts: dict[str, tuple[int, int, float]] = {}
    for old, new in zip(revs, revs[1:], strict=False):
        load = os.getloadavg()[0]
        code, runs = gate(old, new, study, args.seeds, deps, args.out.absolute() / f"{old}-{new}".replace("/", "_"))
        verdicts = pd.read_csv(args.out.absolute() / f"{old}-{new}".replace("/", "_") / "verdicts.csv")
        for side, rev in (("base", old), ("head", new)):
            ok = runs[(runs["side"] == side) & (runs["status"] == "ok")]
            counts[rev] = (int((ok["final_return"] >= args.target - 1e-9).sum()), len(ok), float(ok["final_return"].mean()))
        for v in verdicts.itertuples():
            print(f"{old} -> {new}: {v.algo}/{v.env_label}@{v.budget}: {v.verdict} ({v.returns_detail}); exit {code}; "
                  f"load {load:.1f}")  # fmt: skip
    for rev, (hit, n, mean) in counts.items():
        print(f"{rev}: target reached on {hit}/{n} seeds, mean final return {mean:.3f}")
    (a, na, _), (b, nb, _) = counts[revs[0]], counts[revs[-1]]
    _, p = scipy.stats.fisher_exact([[a, na - a], [b, nb - b]])
    print(f"Fisher exact (two-sided), {revs[0]} vs {revs[-1]}: {a}/{na} vs {b}/{nb}, p = {p:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
