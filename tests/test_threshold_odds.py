"""``benchmarks/threshold_odds.py``: what a few seeds' time-to-threshold ratio can say, from a many-seed result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "threshold_odds.py"


def test_odds_follow_the_steps_and_the_speed() -> None:
    from benchmarks.threshold_odds import odds  # the repository root is on pytest's path (pyproject.toml)

    same = np.full(5, 20_480.0)
    # every seed needs the same steps: the time ratio is the speed ratio
    assert odds(same, same, 3.1, 3, 3.0, 1000, 0) == {"pooled": 1.0, "each_side_own": 1.0}
    assert odds(same, same, 2.9, 3, 3.0, 1000, 0) == {"pooled": 0.0, "each_side_own": 0.0}
    # ppo needs twice the peer's steps on every seed: 3.1x the speed makes a 1.55x time ratio on its own draws
    assert odds(2 * same, same, 3.1, 3, 3.0, 1000, 0)["each_side_own"] == 0.0
    # a seed that never reaches the threshold counts as the largest value, not as an error
    never = np.array([np.inf, 10_240.0, 10_240.0])
    assert 0.0 < odds(never, never, 3.1, 3, 3.0, 2000, 0)["pooled"] < 1.0


def test_the_committed_ten_seed_result_reads_as_one_distribution() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(REPO / "results/speed/cartpole-ppo-vs-sb3-10seeds.json"), "--draws", "20000"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "steps to 475 on seeds 0-9 (10 seeds)" in out
    assert "Mann-Whitney U = 66.5, two-sided p = 0.21" in out
    assert "a study of 3 seeds a side sees a median time ratio >= 3 with probability 0." in out
