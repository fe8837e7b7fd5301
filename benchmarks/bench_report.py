"""Benchmark: ``write_report`` on a 500-trial study (5 algorithms x 4 envs x 25 seeds) with full series.

Each synthetic trial has realistic sizes: ~2,000 training episodes, 10 evaluations of 10 episodes and 400
updates with 10 metrics (``grad_var``, ``approx_kl``, ``entropy`` among them), saved through
:meth:`ResultsStore.save_trial` exactly as the trial runner's records are. The target is a report in under a
minute on a 2-core machine with the default bootstrap settings.

    python benchmarks/bench_report.py                    # build the database once, time one report
    python -m pytest benchmarks/bench_report.py --benchmark-only
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from suite.provenance import collect_provenance, utc_now_iso
from suite.report import write_report
from suite.store import ResultsStore

ALGOS = ("ppo", "grpo", "sb3-ppo", "sb3-a2c", "ppo-adaptive-clip")
ENVS: dict[str, tuple[float, float, int]] = {
    # env id: (random score, reference score, budget)
    "CartPole-v1": (22.55, 500.0, 100_000),
    "LunarLander-v3": (-184.73, 242.1, 1_000_000),
    "ALE/Pong-v5": (-20.4, 21.0, 1_000_000),
    "Hopper-v5": (18.0, 2410.0, 1_000_000),
}
SEEDS = 25
STUDY = "bench"
N_EPISODES = 2_000
N_EVALS = 10
N_EVAL_EPISODES = 10
N_UPDATES = 400
METRICS = (
    "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm", "grad_var",
    "explained_variance", "learning_rate", "clip_range",
)  # fmt: skip


def synthetic_record(algo: str, env_id: str, seed: int, provenance: dict[str, Any]) -> dict[str, Any]:
    """A trial record with learning-curve-shaped returns (skill grows with steps, per-algorithm rate, noise)."""
    rng = np.random.default_rng([ALGOS.index(algo), list(ENVS).index(env_id), seed])
    low, high, budget = ENVS[env_id]
    rate = 2.0 + ALGOS.index(algo) + rng.normal(0, 0.5)

    def score(steps: np.ndarray) -> np.ndarray:
        skill = 1.0 - np.exp(-rate * steps / budget)
        return low + (high - low) * skill * 0.9 + rng.normal(0, 0.08 * (high - low), size=np.shape(steps))

    ends = np.sort(rng.choice(np.arange(1, budget), size=N_EPISODES, replace=False))
    eval_steps = np.linspace(budget / N_EVALS, budget, N_EVALS).astype(int)
    evals = [
        {"step": int(s), "final": i == N_EVALS - 1, "returns": score(np.full(N_EVAL_EPISODES, s)).tolist(),
         "lengths": rng.integers(10, 500, N_EVAL_EPISODES).tolist(), "wall_time_s": float(s) / 2000.0}
        for i, s in enumerate(eval_steps)
    ]  # fmt: skip
    update_steps = np.linspace(budget / N_UPDATES, budget, N_UPDATES).astype(int)
    updates = [
        {"update": i + 1, "step": int(s), **{m: float(v) for m, v in zip(METRICS, rng.random(len(METRICS)), strict=True)}}
        for i, s in enumerate(update_steps)
    ]
    final = np.asarray(evals[-1]["returns"])
    wall = budget / 2000.0
    return {
        "key": f"{algo}-{env_id.replace('/', '_')}-{seed}",
        "study": STUDY, "algo": algo, "algo_version": "1.0.0", "env_id": env_id, "env_kwargs": {},
        "env_label": env_id, "seed": seed, "budget": budget, "threads": 1, "n_eval_episodes": N_EVAL_EPISODES,
        "eval_freq": budget // N_EVALS, "config": {"learning_rate": 3e-4}, "config_hash": "0" * 16,
        "status": "ok", "error": None, "traceback": None, "steps": budget, "wall_time_s": wall,
        "rollout_time_s": 0.6 * wall, "update_time_s": 0.3 * wall, "eval_time_s": 0.1 * wall,
        "steps_per_second": budget / (0.9 * wall), "peak_rss_mb": 300 + 50 * rng.random(), "baseline_rss_mb": 160.0,
        "final_eval_mean": float(final.mean()), "final_eval_std": float(final.std()), "provenance": provenance,
        "suite_version": provenance["suite_version"], "started_at": utc_now_iso(), "ended_at": utc_now_iso(),
        "model_path": None, "format": 1,
        "curve": {"step": ends.tolist(), "return": score(ends).tolist(), "length": rng.integers(10, 500, N_EPISODES).tolist()},
        "evals": evals, "updates": updates,
    }  # fmt: skip


def build_database(path: Path) -> int:
    """Write the 500-trial study to ``path``; returns the number of trials."""
    provenance = collect_provenance(1)
    n = 0
    with ResultsStore(path) as store:
        for algo in ALGOS:
            for env_id in ENVS:
                for seed in range(SEEDS):
                    store.save_trial(synthetic_record(algo, env_id, seed, provenance))
                    n += 1
    return n


def test_report_500_trials(benchmark: Any, tmp_path: Path) -> None:
    """pytest-benchmark: one report of the 500-trial study (the database is built outside the timing)."""
    db = tmp_path / "suite.db"
    assert build_database(db) == len(ALGOS) * len(ENVS) * SEEDS
    index = benchmark.pedantic(write_report, kwargs={"study": STUDY, "db": db, "out_dir": tmp_path / "report"}, rounds=1)
    assert index.is_file()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="reuse (or create) the database here instead of a temporary one")
    parser.add_argument("-o", "--output", type=Path, help="report folder (default: a temporary one)")
    parser.add_argument("--reps", type=int, help="bootstrap replications (default: the report's default)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "suite.db"
        if not db.exists():
            t0 = time.perf_counter()
            n = build_database(db)
            print(f"built {n} trials in {time.perf_counter() - t0:.1f} s ({db.stat().st_size / 2**20:.0f} MiB)")
        kwargs = {"reps": args.reps} if args.reps else {}
        t0 = time.perf_counter()
        index = write_report(study=STUDY, db=db, out_dir=args.output or Path(tmp) / "report", **kwargs)
        elapsed = time.perf_counter() - t0
        print(f"write_report: {elapsed:.1f} s for {len(ALGOS) * len(ENVS) * SEEDS} trials on {os.cpu_count()} CPUs -> {index}")


if __name__ == "__main__":
    main()
