"""How much a time-to-threshold ratio on a few seeds says, from a ``bench_ppo_vs_sb3.py`` result over many seeds.

The time to an evaluation >= a threshold (CartPole: 475) is the env steps a seed needs to get there over the
training speed. ``ppo`` and SB3 PPO do the same update (``tests/test_sb3.py::
test_a_ppo_update_is_sb3_ppos_train_on_the_same_rollout``) and differ in their random streams only, so the steps a
seed needs are a draw from one distribution on both sides. This script reads a result with several seeds and prints,
per env:

* the steps to the threshold per seed on each side and a two-sided Mann-Whitney U test of "both sides draw from the
  same distribution" (seeds that never reach it count as the largest values);
* the odds that a study of ``--seeds-per-side`` seeds (the issue's targets use 3) sees a median time ratio at or
  above ``--target``, at the measured speed ratio (training steps per CPU second): by resampling each side's seeds
  from the pooled steps (one distribution, as the test supports) and, for comparison, from each side's own.

    python benchmarks/threshold_odds.py results/speed/cartpole-ppo-vs-sb3-10seeds.json --seeds-per-side 3 --target 3
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import mannwhitneyu


def _steps(rows: list[dict[str, Any]], side: str) -> np.ndarray:
    return np.array([math.inf if r[side]["steps_to_threshold"] is None else r[side]["steps_to_threshold"] for r in rows])


def odds(ppo: np.ndarray, peer: np.ndarray, speed: float, k: int, target: float, draws: int, seed: int) -> dict[str, float]:
    """P(speed x median(peer's k seeds) / median(ppo's k seeds) >= target) when each side's k seeds are drawn (with
    replacement) from the pooled steps, and from each side's own steps."""
    rng = np.random.default_rng(seed)
    pooled = np.concatenate([ppo, peer])

    def p(a: np.ndarray, b: np.ndarray) -> float:
        x = np.median(rng.choice(a, (draws, k)), axis=1)
        y = np.median(rng.choice(b, (draws, k)), axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = speed * y / x
        return float(np.mean(ratio >= target))

    return {"pooled": p(pooled, pooled), "each_side_own": p(ppo, peer)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("result", type=Path, help="a bench_ppo_vs_sb3.py JSON output")
    ap.add_argument("--seeds-per-side", type=int, default=3)
    ap.add_argument("--target", type=float, default=3.0, help="the time ratio a study must reach (default 3)")
    ap.add_argument("--draws", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    payload = json.loads(args.result.read_text())
    for res in payload["results"]:
        rows = res["rows"]
        peer = next(key for key in rows[0] if key not in ("seed", "ppo"))
        a, b = _steps(rows, "ppo"), _steps(rows, peer)
        speed = res["steps_per_cpu_second_ratio"]
        test = mannwhitneyu(a, b, alternative="two-sided")
        o = odds(a, b, speed, args.seeds_per_side, args.target, args.draws, args.seed)
        seeds = [r["seed"] for r in rows]
        print(f"{res['env']}: steps to {res['threshold']:g} on seeds {seeds[0]}-{seeds[-1]} ({len(seeds)} seeds)")
        for name, steps in (("ppo", a), (peer, b)):
            print(f"  {name:<8} {', '.join(f'{s:,.0f}' for s in steps)}  (median {np.median(steps):,.0f})")
        print(f"  Mann-Whitney U = {test.statistic:.1f}, two-sided p = {test.pvalue:.2f}")
        print(f"  speed ratio {speed:.2f}x: a study of {args.seeds_per_side} seeds a side sees a median time ratio >= "
              f"{args.target:g} with probability {o['pooled']:.2f} (seeds drawn from the pooled steps; "
              f"{o['each_side_own']:.2f} from each side's own)")  # fmt: skip


if __name__ == "__main__":
    main()
