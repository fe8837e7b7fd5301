"""Benchmark: ``ppo-rlvr-prm``'s update by autograd (double backward for the input-gradient penalty) against the
hand-derived one (``hand_derived = true``: the JS term and the penalty's second derivatives by hand in the shared
core), side by side in one run.

Each run is a fresh spawned process (one torch thread) training one trial; the two paths alternate seed by seed so
that a change of load on a shared machine hits both. Per run: the trial process's CPU seconds (training and its
periodic evaluations), the update phase's wall seconds, the final evaluation. Per env: medians and the ratio.

    python benchmarks/bench_rlvr_hand_derived.py --env CartPole-v1 --env LunarLander-v3 --seeds 0-1 --steps 50000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import time
from typing import Any


def _run(env_id: str, seed: int, steps: int, hand_derived: bool, conn: Any) -> None:
    import torch

    from suite.trial import TrialSpec, run_trial

    torch.set_num_threads(1)
    spec = TrialSpec("ppo-rlvr-prm", env_id, seed, steps, overrides={"hand_derived": hand_derived}, n_eval_episodes=10)
    c0 = time.process_time()
    rec = run_trial(spec.resolve())
    conn.send({
        "env": env_id, "seed": seed, "hand_derived": hand_derived, "status": rec["status"], "steps": rec["steps"],
        "cpu_s": time.process_time() - c0, "update_wall_s": rec["update_time_s"], "final_eval_mean": rec["final_eval_mean"],
    })  # fmt: skip
    conn.close()


def run_isolated(env_id: str, seed: int, steps: int, hand_derived: bool) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_run, args=(env_id, seed, steps, hand_derived, child))
    proc.start()
    child.close()
    out = parent.recv()
    proc.join()
    return out


def main() -> None:
    from suite.study import parse_seeds

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", action="append", help="env id (repeatable; default CartPole-v1 and LunarLander-v3)")
    p.add_argument("--seeds", default="0-1")
    p.add_argument("--steps", type=int, default=50_000)
    p.add_argument("--json", help="also write every run to this file")
    args = p.parse_args()
    runs = []
    for env_id in args.env or ["CartPole-v1", "LunarLander-v3"]:
        for i, seed in enumerate(parse_seeds(args.seeds)):
            for hand in (False, True) if i % 2 == 0 else (True, False):
                r = run_isolated(env_id, seed, args.steps, hand)
                runs.append(r)
                print(json.dumps(r), flush=True)
        by = {h: [r for r in runs if r["env"] == env_id and r["hand_derived"] is h] for h in (False, True)}
        cpu = {h: statistics.median(r["cpu_s"] for r in by[h]) for h in by}
        upd = {h: statistics.median(r["update_wall_s"] for r in by[h]) for h in by}
        finals = {h: [round(r["final_eval_mean"], 1) for r in by[h]] for h in by}
        print(f"{env_id}, {args.steps:,} steps, seeds {args.seeds}: trial CPU {cpu[False]:.1f} s autograd vs "
              f"{cpu[True]:.1f} s hand-derived ({cpu[False] / cpu[True]:.2f}x); "
              f"update wall {upd[False]:.1f} vs {upd[True]:.1f} s "
              f"({upd[False] / upd[True]:.2f}x); final evaluations {finals[False]} vs {finals[True]}", flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(runs, fh, indent=1)


if __name__ == "__main__":
    main()
