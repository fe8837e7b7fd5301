"""Benchmark: a recorded study's wall time on W workers when its trials start in study order and when they start
longest first (:func:`suite.plan.longest_first`, what ``suite run`` does since 2026-12-04), replayed from its records.

Each trial takes its recorded ``wall_time_s``; a free worker takes the next trial of the order (greedy list
scheduling, as the local and Ray executors do). The longest-first order uses the estimates ``suite run`` would make
from the same database (:func:`suite.plan.make_run_plan`, the claim records left out: per algorithm and env, so trials
of one group tie), which makes the replay slightly optimistic: a real run estimates from the records it has before it
starts. The lower bound is ``max(trial time / W, longest trial)``.

    python benchmarks/bench_schedule.py reports/claims/*/records.db --workers 2 --workers 8
"""

from __future__ import annotations

import argparse
import heapq
from collections.abc import Iterable, Sequence
from pathlib import Path

from suite.plan import longest_first, make_run_plan
from suite.store import ResultsStore
from suite.trial import TrialSpec


def makespan(walls: Sequence[float], order: Iterable[int], workers: int) -> float:
    """Wall time of running trials of ``walls`` seconds in ``order`` on ``workers`` (each free worker takes the next)."""
    free = [0.0] * workers
    for i in order:
        heapq.heappush(free, heapq.heappop(free) + walls[i])
    return max(free)


def replay(db: Path, workers: int) -> dict[str, float]:
    """``{trials, trial_s, study_order_s, longest_first_s, lower_bound_s}`` for the ok trials of ``db``."""
    with ResultsStore(db, create=False) as store:
        trials = store.trials()
    # A study's order, near enough: env by env, algorithm by algorithm, seed by seed (as Study.trials expands them).
    ok = trials[trials["status"] == "ok"].sort_values(["env_label", "algo", "seed"], kind="stable")
    specs = [TrialSpec(r.algo, r.env_id, seed=int(r.seed), total_timesteps=int(r.budget)) for r in ok.itertuples()]
    walls = ok["wall_time_s"].to_numpy(float)
    planned = make_run_plan(specs, done=0, db_path=db, claims_dir=None).seconds
    return {
        "trials": float(len(specs)),
        "trial_s": float(walls.sum()),
        "study_order_s": makespan(walls, range(len(specs)), workers),
        "longest_first_s": makespan(walls, longest_first(planned), workers),
        "lower_bound_s": max(float(walls.sum()) / workers, float(walls.max(initial=0.0))),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("db", nargs="+", type=Path, help="results databases (e.g. reports/claims/*/records.db)")
    p.add_argument("--workers", type=int, action="append", help="workers (repeatable; default 2)")
    args = p.parse_args()
    print("| study records | trials | trial time | workers | study order | longest first | ratio | lower bound |")
    print("|---|---|---|---|---|---|---|---|")
    for db in args.db:
        for w in args.workers or [2]:
            r = replay(db, w)
            ratio = r["longest_first_s"] / r["study_order_s"]
            print(
                f"| {db} | {r['trials']:.0f} | {r['trial_s']:,.0f} s | {w} | {r['study_order_s']:,.0f} s | "
                f"{r['longest_first_s']:,.0f} s | {ratio:.3f} | {r['lower_bound_s']:,.0f} s |"
            )


if __name__ == "__main__":
    main()
