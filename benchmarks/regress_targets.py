"""The regression gate's detection targets, measured: each planted regression caught in every one of N runs, two
identical revisions passing in every one of N runs, at the default thresholds, on the shipped studies.

For each run and each plant (``same``, ``wait-update``, ``flipped-loss``, ``obs-copy``, ``slow-update``; see
:mod:`suite.regress.plants`) this runs ``suite regress base <plant>`` with the defaults (studies, repeats,
thresholds) on a throwaway copy of this checkout, and records the exit code, the failing comparisons, the wall time
and the machine's load. The summary (``results.jsonl``, ``summary.csv``) says how often each plant was caught (exit 1 with the
expected verdict) and how often the identical revision passed (the false-alarm rate at the chosen thresholds).
Runs go round-robin (run 0 of every plant, then run 1 of every plant...), and ``results.jsonl`` and ``summary.csv``
are rewritten after every gate run, so a study stopped early leaves every plant with as many runs as possible and a
summary of them; ``--summarise`` then appends the evidence rows of what finished without running anything.

    python benchmarks/regress_targets.py --runs 3 --deps-env .venv --out results/regress-targets

Hours of machine time at the defaults (15 gate runs of 3-18 minutes on this 2-core machine; measured:
``results/regress-targets/README.md``); say how loaded the machine was when quoting the figures (the summary
records the load average during every gate run). Per plant, how many runs said what they must is also appended to
``--csv`` (``results/evidence/regress-targets.csv``; :mod:`benchmarks.evidence_rows`). The gate's trial databases
and models stay in each run's ``base/`` and ``head/`` folders, which are not for committing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import evidence_rows  # noqa: E402
from suite.regress.plants import PLANTS, make_planted_repo  # noqa: E402

EXPECTED = {"same": None, "wait-update": "slower", "flipped-loss": "worse", "obs-copy": "hungrier", "slow-update": "slower"}
"""What the gate must say about each plant (None: pass)."""


def run_gate(repo: Path, head: str, out: Path, cache: Path | None, deps_env: Path | None, extra: list[str]) -> dict:
    argv = [sys.executable, "-m", "suite.cli", "regress", "base", head, "-o", str(out), "--quiet", "--no-report", *extra]
    if cache is not None:
        argv += ["--cache", str(cache)]
    if deps_env is not None:
        argv += ["--deps-env", str(deps_env)]
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    done = subprocess.run(argv, cwd=repo, capture_output=True, text=True, check=False)
    seconds, load1 = time.perf_counter() - t0, os.getloadavg()[0]
    verdicts = pd.read_csv(out / "verdicts.csv") if (out / "verdicts.csv").is_file() else pd.DataFrame()
    failing = [] if verdicts.empty else [
        f"{r.algo}/{r.env_label}@{r.budget}: {r.verdict}" for r in verdicts.itertuples() if r.verdict.startswith("FAIL")
    ]  # fmt: skip
    return {"head": head, "exit_code": done.returncode, "seconds": round(seconds, 1), "load_start": load0,
            "load_end": load1, "failing": failing, "comparisons": len(verdicts), "speed": speed_ratios(verdicts),
            "stderr_tail": done.stderr.strip().splitlines()[-3:]}  # fmt: skip


def speed_ratios(verdicts: pd.DataFrame) -> dict[str, list]:
    """Per comparison, HEAD/BASE steps/s on the wall, CPU and unstarved wall clocks (3 decimals) and the clocks that
    gated it (``speed_rule``), from the gate's ``verdicts.csv``."""
    out = {}
    for r in verdicts.to_dict("records"):
        ratios = [None if pd.isna(r.get(c)) else round(float(r[c]), 3)
                  for c in ("speed_ratio", "cpu_speed_ratio", "unstarved_speed_ratio")]  # fmt: skip
        out[f"{r['algo']}/{r['env_label']}@{r['budget']}"] = [*ratios, r.get("speed_rule")]
    return out


def caught(result: dict) -> bool:
    """Whether the gate said what it must about this plant."""
    want = EXPECTED[result["head"]]
    if want is None:
        return result["exit_code"] == 0
    return result["exit_code"] == 1 and any(want in f for f in result["failing"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--plants", default=",".join(EXPECTED), help=f"comma-separated: {','.join(EXPECTED)}")
    parser.add_argument("--deps-env", type=Path, help="environment with the dependencies (default: build one per hash)")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "regress-targets")
    parser.add_argument(
        "--cache", type=Path, help="build cache (default: suite regress's own, $SUITE_CACHE or ~/.cache/rl-suite)"
    )
    parser.add_argument("--gate-arg", action="append", default=[], help="extra argument for suite regress (repeatable)")
    parser.add_argument("--csv", type=Path, default=evidence_rows.EVIDENCE_DIR / "regress-targets.csv",
                        help="evidence CSV the per-plant counts are appended to")  # fmt: skip
    parser.add_argument("--summarise", action="store_true",
                        help="run nothing: summarise --out's results.jsonl (a study stopped early)")  # fmt: skip
    args = parser.parse_args()
    if args.summarise:
        frame = pd.read_json(args.out / "results.jsonl", lines=True, convert_dates=False)
        summarise(frame, args.out)
        context = {k: str(frame[k].iloc[0]) for k in ("commit", "machine", "command")} | {"date": str(frame["date"].max())}
        evidence_rows.append_rows(args.csv, evidence(frame, context))
        return 0 if bool(frame["caught"].all()) else 1
    # the gate runs in the throwaway repository: every path the user gave is read from here
    args.out = args.out.absolute()
    args.deps_env = args.deps_env.absolute() if args.deps_env else None
    args.cache = args.cache.absolute() if args.cache else None
    plants = [p.strip() for p in args.plants.split(",") if p.strip()]
    unknown = sorted(set(plants) - set(EXPECTED))
    if unknown:
        parser.error(f"unknown plants {unknown}; known: {', '.join(EXPECTED)} (and {', '.join(PLANTS)})")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.jsonl").unlink(missing_ok=True)  # one invocation's runs, not an accumulation
    context = {"commit": evidence_rows.commit(), "machine": evidence_rows.machine(), "command": evidence_rows.command()}
    results = []
    with tempfile.TemporaryDirectory(prefix="regress-targets-") as tmp:
        repo = make_planted_repo(REPO, Path(tmp) / "repo")
        cache = args.cache
        for run in range(args.runs):
            for plant in plants:
                res = run_gate(repo, plant, args.out / f"run{run}-{plant}", cache, args.deps_env, args.gate_arg)
                res.update(run=run, caught=caught(res), date=evidence_rows.utc_now(), **context)
                results.append(res)
                print(json.dumps(res), flush=True)
                with open(args.out / "results.jsonl", "a") as fh:
                    fh.write(json.dumps(res) + "\n")
                summarise(pd.DataFrame(results), args.out)
    frame = pd.DataFrame(results)
    print(summarise(frame, args.out).to_string(index=False))
    evidence_rows.append_rows(args.csv, evidence(frame, context))
    return 0 if bool(frame["caught"].all()) else 1


def summarise(frame: pd.DataFrame, out: Path) -> pd.DataFrame:
    """Per plant (in the order run): gate runs, how many said what they must, mean seconds, load range; written to
    ``out/summary.csv``."""
    groups = frame.groupby("head", sort=False)
    summary = groups.agg(runs=("run", "size"), as_expected=("caught", "sum"), seconds_mean=("seconds", "mean")).reset_index()
    loads = groups[["load_start", "load_end"]]  # the load at the start and end of every gate run
    summary["load_min"] = loads.min().min(axis=1).to_numpy()
    summary["load_max"] = loads.max().max(axis=1).to_numpy()
    summary.to_csv(out / "summary.csv", index=False)
    return summary


def evidence(frame: pd.DataFrame, context: dict[str, str]) -> list[dict]:
    """Per plant, how many gate runs said what they must, as evidence rows (loads and failing comparisons noted)."""
    out = []
    for head, runs in frame.groupby("head", sort=False):
        want = EXPECTED[str(head)] or "pass"
        failing = sorted({f for fs in runs["failing"] for f in fs})
        seconds = ", ".join(f"{s:.0f}" for s in runs["seconds"])
        notes = (f"must: {want}; gate seconds {seconds}; failing comparisons: {'; '.join(failing) or 'none'} "
                 f"(of {int(runs['comparisons'].max())})")  # fmt: skip
        load = ", ".join(f"{a:.1f} -> {b:.1f}" for a, b in zip(runs["load_start"], runs["load_end"], strict=True))
        out.append(evidence_rows.row(f"regress-gate-{head}", int(runs["caught"].sum()),
                                     f"of {len(runs)} gate runs as expected", load=load, notes=notes, **context))  # fmt: skip
    return out


if __name__ == "__main__":
    sys.exit(main())
