"""What the always-attached null lap clock costs a trial: calls per env step, the cost of one call, against a step.

The suite's loops call ``clock.lap(...)`` at every part of a step, unconditionally; outside ``suite profile speed`` the
clock is :data:`suite.algorithms.core.NULL_CLOCK`, whose ``lap`` does nothing. This counts the calls a trial makes
(a counting clock on the trial context, the same call sites), times one no-op call and the ``if clock is not None``
test it replaced (``timeit``, best of several rounds), times the same trial without any clock attached, and prints the
calls' share of the training time. One process, one thread.

    python benchmarks/bench_null_clock.py --steps 20480
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import timeit
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from suite.algorithms.core import NULL_CLOCK, NullClock  # noqa: E402

CASES = [("ppo", "CartPole-v1"), ("ppo-rlvr-prm", "CartPole-v1"), ("grpo", "CartPole-v1"),
         ("grpo-pairwise", "TextMatch-v0"), ("ppo", "TextMatch-v0")]  # fmt: skip


class CountingClock(NullClock):
    """A null clock that counts its laps (the same call sites as the null clock)."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0

    def lap(self, name: str, samples: int = 0) -> None:
        self.calls += 1


def train(algo: str, env: str, steps: int, clock: Any) -> tuple[int, float]:
    """(env steps, training CPU seconds) of one trial with ``clock`` on its context (None: the null clock)."""
    from suite.trial import TrialContext, TrialSpec, seed_everything

    resolved = TrialSpec(algo, env, 0, steps, n_eval_episodes=1, eval_freq=10**9).resolve()
    seed_everything(0, 1)
    ctx = TrialContext(resolved)
    if clock is not None:
        ctx.clock = clock  # type: ignore[attr-defined]
    try:
        resolved.algo.train(ctx, resolved.config)
    finally:
        ctx.close()
    return ctx.steps, sum(t for name, t in ctx.cpu_times.items() if name != "eval")


def per_call_ns(rounds: int = 7, number: int = 2_000_000) -> tuple[float, float]:
    """(ns per ``NULL_CLOCK.lap("forward", 256)`` call, ns per ``if clock is not None`` test on None)."""
    lap = min(timeit.repeat('clock.lap("forward", 256)', globals={"clock": NULL_CLOCK}, number=number, repeat=rounds))
    test = min(timeit.repeat("if clock is not None: pass", globals={"clock": None}, number=number, repeat=rounds))
    empty = min(timeit.repeat("pass", number=number, repeat=rounds))
    return 1e9 * (lap - empty) / number, 1e9 * (test - empty) / number


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20_480)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    lap_ns, test_ns = per_call_ns()
    print(f"one null lap call: {lap_ns:.1f} ns; the `if clock is not None` test it replaced: {test_ns:.1f} ns")
    rows = []
    for algo, env in CASES:
        counter = CountingClock()
        steps, _ = train(algo, env, args.steps, counter)
        _, seconds = train(algo, env, args.steps, None)
        share = counter.calls * lap_ns * 1e-9 / seconds
        rows.append({"algo": algo, "env": env, "steps": steps, "laps": counter.calls,
                     "laps_per_env_step": counter.calls / steps, "train_cpu_s": seconds,
                     "us_per_env_step": 1e6 * seconds / steps, "null_clock_share": share})  # fmt: skip
        print(f"{algo:14s} {env:13s} {counter.calls:7d} laps in {steps} env steps ({counter.calls / steps:.3f} a step), "
              f"{1e6 * seconds / steps:7.1f} us a step: the null laps are {100 * share:.4f}% of training")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps({"lap_ns": lap_ns, "none_test_ns": test_ns, "rows": rows,
                                         "cpu": platform.processor() or platform.machine()}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
