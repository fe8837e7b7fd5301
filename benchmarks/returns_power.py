"""Power of the regression gate's returns test: how often it calls "learns nothing" worse than "learns", per
(algorithm, env) of a returns study, at 2 and 3 seeds a side.

Two arms of real trials, run with the study's own budgets and evaluation schedule (``suite run``):

* **learns**: the study as it is;
* **learns nothing**: the same trials with ``learning_rate = 0`` (every algorithm's optimiser takes its step size
  from that key): the policy never moves from its initialisation, so its evaluation curve is the untrained
  policy's. This is what a version that lost the ability to learn looks like to the gate (the flipped-loss plant
  is worse still: it unlearns).

Then, for each group and each seed count k, ``--resamples`` times: draw k seeds of the learns arm as BASE and k seeds
of the learns-nothing arm as HEAD (without replacement within a side) and run the gate's own returns decision
(:func:`suite.regress.compare._returns`, the function ``suite regress`` calls, default thresholds: one-sided
Welch p < 0.05 and a drop > 0.1 of the normalised score, on the final return or the evaluation AUC). Power = the
fraction called ``worse``. The false-alarm rate is the same resampling with both sides drawn from the learns arm
(2k distinct seeds: an A/A comparison of versions whose results differ but whose learning does not).

    python benchmarks/returns_power.py --study suite/studies/regression-returns.toml --seeds 0-5 \\
        --work /tmp/returns-power --out results/evidence/returns-power.csv

Rows are appended to ``--out`` (the evidence-file convention: target, value, unit, machine, commit, command, date,
plus load and notes). Trials are reused from ``--work`` when it already holds them (``suite run`` skips finished
trials), so a second call with more seeds only runs the new ones.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from suite.regress.compare import Thresholds, _default_normaliser, _returns  # noqa: E402
from suite.regress.records import load_slot  # noqa: E402

FIELDS = ["target", "value", "unit", "machine", "commit", "command", "date", "load", "notes"]


def machine() -> str:
    """CPU model, family and model numbers, core count and whether it is a VM (what the evidence files say)."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = info.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in info:
        name += f" family {info['cpu family']} model {info.get('model', '?')}"
    vm = ", VM" if "hypervisor" in info.get("flags", "").split() else ""
    return f"{name}, {os.cpu_count()} cores{vm}"


def commit() -> str:
    out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "suite"], capture_output=True, text=True)
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def run_arm(study: str, seeds: str, db: Path, workers: int, extra: list[str]) -> None:
    argv = [sys.executable, "-m", "suite.cli", "run", study, "--seeds", seeds, "--db", str(db), "--workers",
            str(workers), "--no-report", "--no-save-models", "--quiet", "--yes", *extra]  # fmt: skip
    print("+", shlex.join(argv[1:]), file=sys.stderr, flush=True)
    subprocess.run(argv, cwd=REPO, check=True)


def decide(base: pd.DataFrame, head: pd.DataFrame) -> str:
    """The gate's returns verdict for one resample (both sides relabelled to seeds 0..k-1, repeat 0)."""
    first = base.iloc[0]
    return _returns(str(first["algo"]), str(first["env_label"]), str(first["env_id"]), base, head, Thresholds(),
                    _default_normaliser).returns  # fmt: skip


def relabel(rows: pd.DataFrame, side: str) -> pd.DataFrame:
    return rows.assign(side=side, repeat=0, seed=range(len(rows)))


def power(learns: pd.DataFrame, nothing: pd.DataFrame, k: int, resamples: int, rng: np.random.Generator) -> dict:
    out = {"power": np.nan, "false_alarm": np.nan}
    if len(learns) >= k and len(nothing) >= k:
        worse = 0
        for _ in range(resamples):
            b = learns.iloc[rng.choice(len(learns), k, replace=False)]
            h = nothing.iloc[rng.choice(len(nothing), k, replace=False)]
            worse += decide(relabel(b, "base"), relabel(h, "head")) == "worse"
        out["power"] = worse / resamples
    if len(learns) >= 2 * k:
        alarms = 0
        for _ in range(resamples):
            pick = rng.choice(len(learns), 2 * k, replace=False)
            b, h = learns.iloc[pick[:k]], learns.iloc[pick[k:]]
            alarms += decide(relabel(b, "base"), relabel(h, "head")) == "worse"
        out["false_alarm"] = alarms / resamples
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default=str(REPO / "suite" / "studies" / "regression-returns.toml"))
    parser.add_argument("--seeds", default="0-5", help="seeds of both arms (default 0-5)")
    parser.add_argument("--ks", default="2,3", help="seeds a side to estimate the power at (default 2,3)")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--algo", action="append", help="only this algorithm (repeatable; passed to suite run)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/returns-power"), help="folder of the arms' databases")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "evidence" / "returns-power.csv")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    study = str(Path(args.study).absolute()) if Path(args.study).is_file() else args.study
    filters = [a for algo in args.algo or [] for a in ("--algo", algo)]
    loads = [os.getloadavg()[0]]
    run_arm(study, args.seeds, args.work / "learns.db", args.workers, filters)
    loads.append(os.getloadavg()[0])
    run_arm(study, args.seeds, args.work / "nothing.db", args.workers, [*filters, "--set", "learning_rate=0"])
    loads.append(os.getloadavg()[0])

    learns = load_slot(args.work / "learns.db", "base", 0)
    nothing = load_slot(args.work / "nothing.db", "head", 0)
    ks = [int(k) for k in args.ks.split(",")]
    rng = np.random.default_rng(0)
    command = "python benchmarks/returns_power.py " + shlex.join(sys.argv[1:])
    stamp, where, rev = dt.date.today().isoformat(), machine(), commit()
    load = f"{min(loads):.1f}-{max(loads):.1f}"
    rows = []
    for (algo, env_label, budget), grp in learns.groupby(["algo", "env_label", "budget"], sort=True):
        grp = grp[grp["status"] == "ok"].sort_values("seed")
        zero = nothing[(nothing["algo"] == algo) & (nothing["env_label"] == env_label) & (nothing["budget"] == budget)]
        zero = zero[zero["status"] == "ok"].sort_values("seed")
        notes = (f"learns: {len(grp)} seeds, final {grp['final_return'].mean():.2f} "
                 f"[{grp['final_return'].min():.2f}, {grp['final_return'].max():.2f}], AUC {grp['auc'].mean():.2f}; "
                 f"learning_rate=0: {len(zero)} seeds, final {zero['final_return'].mean():.2f}, "
                 f"AUC {zero['auc'].mean():.2f}; {args.resamples} resamples")  # fmt: skip
        for k in ks:
            est = power(grp, zero, k, args.resamples, rng)
            for name, value in est.items():
                target = f"returns-{name.replace('_', '-')}:{algo}/{env_label}@{int(budget)}:seeds={k}"
                rows.append({"target": target, "value": "" if np.isnan(value) else f"{value:.4f}", "unit": "fraction",
                             "machine": where, "commit": rev, "command": command, "date": stamp, "load": load,
                             "notes": notes})  # fmt: skip
                print(f"{target}: {value:.3f}  ({notes})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    new = not args.out.is_file()
    with open(args.out, "a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        if new:
            writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} rows appended to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
