"""Benchmark: what reading the run-queue wait at every phase boundary costs a trial, beside the ``rss`` memory probe.

The phase clock (:class:`suite.trial.TrialContext`) reads the thread's run-queue wait (:mod:`suite.schedstat`: one
``pread`` of ``/proc/thread-self/schedstat``) when a phase begins and when it ends. Measured in CPU time, one torch
thread, one process:

1. **Cost per phase**: ``begin_phase`` + ``end_phase`` around an empty phase, 20,000 times, with the run-queue clock
   and with it switched off (as where the file does not exist), in alternating rounds (median of the rounds); the
   difference is the reads' cost. The ``rss`` probe's cost per phase is measured in the same run
   (:func:`benchmarks.bench_memory_overhead.cost_per_phase_us`), so the two compare at the same load.
2. **Share of a trial**: the cost per phase times the phase calls of one ``ppo`` CartPole trial, over that trial's
   CPU seconds.

    python benchmarks/bench_phase_clock.py                 # ppo on CartPole-v1, 50k steps

Rows are appended to ``--csv`` (``results/evidence/memory-probe-overhead.csv``, the per-phase instrumentation's costs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import evidence_rows  # noqa: E402
from benchmarks.bench_memory_overhead import cost_per_phase_us  # noqa: E402
from suite.trial import TrialContext, TrialSpec, run_trial  # noqa: E402


def phase_pair_us(ctx: TrialContext, calls: int) -> float:
    """Microseconds of CPU time of one ``begin_phase`` + ``end_phase`` pair around an empty phase."""
    names = ("rollout", "advantages", "update")
    t0 = time.process_time()
    for i in range(calls):
        ctx.begin_phase(names[i % 3])
        ctx.end_phase()
    return (time.process_time() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algo", default="ppo")
    ap.add_argument("--env", default="CartPole-v1")
    ap.add_argument("--steps", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--csv", type=Path, default=evidence_rows.EVIDENCE_DIR / "memory-probe-overhead.csv",
                    help="evidence CSV the figures are appended to")  # fmt: skip
    args = ap.parse_args()
    load_before = evidence_rows.load()
    import torch

    torch.set_num_threads(1)
    resolved = TrialSpec(args.algo, args.env, 0, args.steps, n_eval_episodes=1, eval_freq=args.steps,
                         memory_profile="off").resolve()  # fmt: skip
    on, off = TrialContext(resolved), TrialContext(resolved)
    off._run_queue.available = False  # as where the kernel has no schedstat: the clock reads nothing
    if on._run_queue.read() is None:
        sys.exit("no /proc/thread-self/schedstat here: nothing to measure")
    phase_pair_us(on, 2_000), phase_pair_us(off, 2_000)  # warm-up
    with_clock, without = [], []
    for _ in range(args.rounds):
        with_clock.append(phase_pair_us(on, args.calls))
        without.append(phase_pair_us(off, args.calls))
    cost = statistics.median(w - o for w, o in zip(with_clock, without, strict=True))
    rss = cost_per_phase_us("rss", args.calls)
    print(f"phase clock per phase: {statistics.median(with_clock):.2f} us with the run-queue reads, "
          f"{statistics.median(without):.2f} us without: {cost:.2f} us; the rss probe: {rss:.2f} us")  # fmt: skip

    t0 = time.process_time()
    rec = run_trial(resolved)
    cpu = time.process_time() - t0
    assert rec["status"] == "ok", rec["error"]
    calls = sum(p["calls"] for p in rec["phases"].values())
    share = calls * cost * 1e-6 / cpu
    print(f"{calls} phase calls in {cpu:.2f} CPU s of a trial: {100 * share:.3f}%")

    load = f"{load_before} -> {evidence_rows.load()}"
    trial = f"{args.algo} on {args.env}, {args.steps} steps, 1 torch thread, memory probe off"
    evidence_rows.append_rows(args.csv, [
        evidence_rows.row(
            "phase-clock-run-queue-cost-per-phase", round(cost, 2), "us CPU per phase (begin + end)", load=load,
            notes=f"two preads of /proc/thread-self/schedstat per phase: begin_phase + end_phase around an empty phase, "
            f"{args.calls:,} calls x {args.rounds} rounds, with the reads minus without (median of rounds); the rss "
            f"probe in the same run: {rss:.2f} us per phase",
        ),
        evidence_rows.row(
            "phase-clock-run-queue-overhead", round(100 * share, 3), "% of a trial's CPU time", load=load,
            notes=f"cost per phase x {calls} phase calls / {cpu:.2f} CPU s of one trial ({trial})",
        ),
    ])  # fmt: skip
    print(f"appended to {args.csv}")


if __name__ == "__main__":
    main()
