"""Benchmark: parallel efficiency of the executors on independent CartPole trials (2 workers vs 1, side by side).

A study of ``--trials`` independent `ppo` trials on CartPole-v1 (seeds 0.., ``--steps`` each) runs through
``suite.executors.execute`` into a fresh database, once on 1 worker and once on 2, for each executor asked for.
Throughput is trials per second of the trials' span: from the first trial's start to the last trial's end, read
from the records, so the fixed start-up (imports, forkserver, ``ray.init``) is not counted but every per-trial
cost (process start, scheduling, saving) is. Prints, per executor, both throughputs and their ratio (the target:
local >= 1.8x, Ray >= 1.7x on this 2-core machine), with the load average before and after, since other work on the
machine takes cores from the 2-worker run. Writes the figures as JSON (with machine info) to ``--output``.

    python benchmarks/bench_parallel.py --executor local --executor ray --trials 8 --steps 50000
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import datetime
from pathlib import Path

from suite.executors import ExecOptions, execute
from suite.provenance import collect_provenance, utc_now_iso
from suite.trial import TrialSpec


def span_s(records: list[dict]) -> float:
    """Seconds from the first trial's start to the last trial's end."""
    start = min(datetime.fromisoformat(r["started_at"]) for r in records)
    end = max(datetime.fromisoformat(r["ended_at"]) for r in records)
    return (end - start).total_seconds()


def run(executor: str, workers: int, trials: int, steps: int) -> dict:
    resolved = [TrialSpec("ppo", "CartPole-v1", seed, steps).resolve() for seed in range(trials)]
    with tempfile.TemporaryDirectory(prefix="bench-parallel-") as tmp:
        options = ExecOptions(
            executor=executor, workers=workers, save_models=False, show_progress=False, print_table=False, max_retries=0
        )
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        summary = execute(resolved, db_path=Path(tmp) / "bench.db", study="bench", tier="custom", options=options)
        wall = time.perf_counter() - t0
    records = summary.finished
    assert len(records) == trials and all(r["status"] == "ok" for r in records), [r["error"] for r in records]
    span = span_s(records)
    return {
        "executor": executor,
        "workers": workers,
        "trials": trials,
        "steps": steps,
        "span_s": span,
        "wall_s_with_startup": wall,
        "trials_per_s": trials / span,
        "mean_trial_wall_s": sum(r["wall_time_s"] for r in records) / trials,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executor", action="append", choices=["local", "ray"], help="repeatable; default: local")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--output", default=".benchmarks/parallel.json")
    args = parser.parse_args()
    results = []
    for executor in args.executor or ["local"]:
        one = run(executor, 1, args.trials, args.steps)
        two = run(executor, 2, args.trials, args.steps)
        ratio = two["trials_per_s"] / one["trials_per_s"]
        results.append({"executor": executor, "one_worker": one, "two_workers": two, "speedup": ratio})
        print(
            f"{executor:<5}  1 worker: {one['trials_per_s'] * 60:6.2f} trials/min ({one['span_s']:.1f} s)   "
            f"2 workers: {two['trials_per_s'] * 60:6.2f} trials/min ({two['span_s']:.1f} s)   speedup {ratio:.2f}x   "
            f"load avg {one['load_before']:.1f} -> {two['load_after']:.1f}"
        )
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": "parallel", "date": utc_now_iso(), "machine": collect_provenance(1), "results": results}
    out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
